package connectlimit

import (
	"context"
	"net/http"
	"time"

	"connectrpc.com/connect"

	"github.com/retryafter/retryafter"
	"github.com/retryafter/retryafter/edge"
)

// A Call is what the interceptor knows of a call when it decides it, before its handler runs:
// for the key, cost and exemption functions and the hooks. Its Context is the handler's, with
// what interceptors before this one put in it (an authenticated user, to key by).
type Call struct {
	Context context.Context
	Spec    connect.Spec // the procedure, "/package.Service/Method", and its stream type
	Peer    connect.Peer // the client's address and the protocol it speaks
	Header  http.Header  // the request's header; the caller must not modify it
}

// An Option configures [NewInterceptor].
//
// An Option given a nil function panics when it is made, with a message that starts
// "connectlimit: ". The hooks (WithErrorHook, WithDecisionHook) add up: each one given is
// called, in the order given.
type Option func(*config)

// config is the interceptor's configuration, as its options leave it.
type config struct {
	edge.Config[Call]
	messages retryafter.Charger // charged each stream's messages, when not nil
	fields   *edge.Fields       // the RateLimit fields, when they are on
}

func newConfig(opts []Option) config {
	var c config
	for _, o := range opts {
		if o == nil {
			panic("connectlimit: nil Option")
		}
		o(&c)
	}
	if c.Key == nil {
		c.Key = ClientIP()
	}
	c.Quota = c.fields != nil
	return c
}

// WithClock sets the clock, which the interceptor reads once per call, for the limiter and the
// wait it computes. The default is [time.Now].
func WithClock(now func() time.Time) Option {
	if now == nil {
		panic("connectlimit: WithClock(nil)")
	}
	return func(c *config) { c.Now = now }
}

// WithKeyFunc sets the function that names the client a call is counted against. The default
// is [ClientIP] with no trusted proxies: the peer's address (an IPv6 client's /64).
//
// A call whose key function fails is not counted: it ends with internal unless [WithFailOpen]
// says otherwise, and the error goes to the hooks of [WithErrorHook], never to the client.
func WithKeyFunc(key func(Call) (string, error)) Option {
	if key == nil {
		panic("connectlimit: WithKeyFunc(nil)")
	}
	return func(c *config) { c.Key = key }
}

// WithCost sets the function that says how many tokens a call costs, so that an expensive
// procedure counts for several calls. The default is 1. A cost below 1 counts as 1: to exempt
// a procedure, use [WithExempt]. A stream costs what it is given when it opens, and nothing for
// its messages unless [WithMessageCharge] says otherwise. It must be safe for concurrent use.
func WithCost(cost func(Call) int) Option {
	if cost == nil {
		panic("connectlimit: WithCost(nil)")
	}
	return func(c *config) { c.Cost = cost }
}

// WithExempt names calls the interceptor passes on without counting them: health checks,
// reflection. An exempt call is not counted nor refused; the key function is not called for
// it. The default exempts nothing.
func WithExempt(fn func(Call) bool) Option {
	if fn == nil {
		panic("connectlimit: WithExempt(nil)")
	}
	return func(c *config) { c.Exempt = fn }
}

// WithFailOpen makes the interceptor admit a call, uncounted, when its key function or its
// limiter fails. The default is to fail closed: a key error ends the call with internal and a
// limiter error with unavailable and a wait of one second (RetryInfo, the pushback, and
// Retry-After: 1 on a Connect unary call's 503). Either way the client never sees the error's
// text. A call whose own context ended while the limiter decided is never admitted for the
// limiter's error: it ends with canceled or deadline_exceeded.
func WithFailOpen(open bool) Option {
	return func(c *config) { c.FailOpen = open }
}

// WithDryRun makes the interceptor decide and report every call as usual but never refuse: a
// call that would have been refused proceeds, and the hooks of [WithDecisionHook] are told of
// it with [edge.DryRunRefused]. A would-be refusal spends nothing, exactly as a real one, and
// its stream's messages are not charged ([WithMessageCharge]); a call whose key function or
// limiter fails proceeds too, as with [WithFailOpen].
func WithDryRun(on bool) Option {
	return func(c *config) { c.DryRun = on }
}

// WithErrorHook adds a function that is told of every error of the key function or the
// limiter, and of a charge of [WithMessageCharge] that fails, for logs or metrics. It runs on
// the call's goroutine and must be safe for concurrent use.
func WithErrorHook(fn func(call Call, err error)) Option {
	if fn == nil {
		panic("connectlimit: WithErrorHook(nil)")
	}
	return func(c *config) { c.OnError = append(c.OnError, fn) }
}

// WithDecisionHook adds a function that is told of every call the interceptor handles, with
// what it did ([retryafter.Outcome]) and the limiter's [retryafter.Decision] (the zero Decision
// when the limiter was not asked: an exempt call, a key function that failed), for metrics. It
// runs on the call's goroutine before the call proceeds or ends, and must be safe for
// concurrent use and cheap.
func WithDecisionHook(fn func(call Call, o retryafter.Outcome, d retryafter.Decision)) Option {
	if fn == nil {
		panic("connectlimit: WithDecisionHook(nil)")
	}
	return func(c *config) { c.OnDecided = append(c.OnDecided, fn) }
}

// WithMessageCharge makes a stream cost, besides what it is decided at when it opens, one token
// of ch for each message it carries, either way, charged under the stream's key when its handler
// returns (or panics), at the clock's instant then. ch may go into debt: the key's next call is
// then refused until the debt is repaid, with the exact wait, when the interceptor's Limiter
// counts in ch (ch itself, or [retryafter.All] of a limit per call and
// [retryafter.ChargedAfter](ch)). A charge that fails goes to the hooks of [WithErrorHook]. It
// has no effect on unary calls, whose one message is their cost. The default charges nothing
// for messages.
func WithMessageCharge(ch retryafter.Charger) Option {
	if ch == nil {
		panic("connectlimit: WithMessageCharge(nil)")
	}
	return func(c *config) { c.messages = ch }
}

// WithRateLimitFields makes the interceptor send the RateLimit and RateLimit-Policy fields of
// draft-ietf-httpapi-ratelimit-headers on every call the limiter decides, with the values
// [retryafter.WithRateLimitFields] sends over HTTP: as response headers of an admitted call and
// in the error's metadata of a refused one (headers of a Connect unary call's 429, trailers
// otherwise). The default is to send neither. It panics as retryafter.WithRateLimitFields does.
func WithRateLimitFields(policy string) Option {
	f := edge.NewFields(policy)
	return func(c *config) { c.fields = f }
}
