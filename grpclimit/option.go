package grpclimit

import (
	"context"
	"time"

	"github.com/retryafter/retryafter"
	"github.com/retryafter/retryafter/edge"
)

// An Option configures the interceptors of [UnaryServerInterceptor] and
// [StreamServerInterceptor]. Each has an effect on both, but [WithMessageCharge], which is for
// streams alone: UnaryServerInterceptor panics when given it.
//
// An Option given a nil function panics when it is made, with a message that starts
// "grpclimit: ". The hooks (WithErrorHook, WithDecisionHook) add up: each one given is called,
// in the order given.
type Option func(*config)

// config is the interceptors' configuration, as their options leave it.
type config struct {
	edge.Config[call] // how calls are decided: the core's

	messages retryafter.Charger // charged each stream's messages, when not nil
	fields   *edge.Fields       // the RateLimit fields, when they are on
}

// A call is what the core decides: a call's context and its method, "/package.Service/Method".
type call struct {
	ctx        context.Context
	fullMethod string
}

func newConfig(opts []Option) config {
	var c config
	c.Now = time.Now
	for _, o := range opts {
		if o == nil {
			panic("grpclimit: nil Option")
		}
		o(&c)
	}
	if c.Key == nil {
		c.Key = callKey(ClientIP())
	}
	c.Quota = c.fields != nil
	return c
}

// callKey returns key as the core's key function.
func callKey(key KeyFunc) func(call) (string, error) {
	return func(c call) (string, error) { return key(c.ctx, c.fullMethod) }
}

// WithClock sets the clock, which the interceptor reads once per call, for the limiter and the
// wait it computes. The default is [time.Now].
func WithClock(now func() time.Time) Option {
	if now == nil {
		panic("grpclimit: WithClock(nil)")
	}
	return func(c *config) { c.Now = now }
}

// WithKeyFunc sets the function that names the client a call is counted against. The default
// is [ClientIP] with no trusted proxies: the peer's address (an IPv6 client's /64).
//
// A call whose key function fails is not counted: it ends with INTERNAL unless [WithFailOpen]
// says otherwise, and the error goes to the hooks of [WithErrorHook], never to the client.
func WithKeyFunc(key KeyFunc) Option {
	if key == nil {
		panic("grpclimit: WithKeyFunc(nil)")
	}
	return func(c *config) { c.Key = callKey(key) }
}

// WithCost sets the function that says how many tokens a call costs, so that an expensive
// method counts for several calls. The default is 1. A cost below 1 counts as 1, so that no
// call is free by mistake: to exempt a method, use [WithExempt]. A stream costs what it is
// given when it opens, whatever it sends afterwards. The function must be safe for concurrent
// use.
func WithCost(cost func(ctx context.Context, fullMethod string) int) Option {
	if cost == nil {
		panic("grpclimit: WithCost(nil)")
	}
	return func(c *config) { c.Cost = func(c call) int { return cost(c.ctx, c.fullMethod) } }
}

// WithExempt names calls the interceptor passes on without counting them: health checks,
// reflection. fullMethod is "/package.Service/Method". An exempt call is not counted nor
// refused; the key function is not called for it. The default exempts nothing.
//
//	grpclimit.WithExempt(func(_ context.Context, m string) bool {
//		return strings.HasPrefix(m, "/grpc.health.v1.Health/")
//	})
func WithExempt(fn func(ctx context.Context, fullMethod string) bool) Option {
	if fn == nil {
		panic("grpclimit: WithExempt(nil)")
	}
	return func(c *config) { c.Exempt = func(c call) bool { return fn(c.ctx, c.fullMethod) } }
}

// WithFailOpen makes the interceptor admit a call, uncounted, when its key function or its
// limiter fails. The default is to fail closed: a key error ends the call with INTERNAL and a
// limiter error with UNAVAILABLE and a wait of one second, as RetryInfo and pushback. Either
// way the client never sees the error's text. A call whose own context ended while the limiter
// decided is never admitted for the limiter's error: it ends with its context's status.
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

// WithWait makes the interceptor let a call that is only a little early wait for its place, as
// [retryafter.WithWait] does a request: a call whose wait is at most max, and whose deadline
// (grpc-timeout) would not pass before the wait ends, waits for its place, promised when it
// began to wait, and then proceeds; the hooks of [WithDecisionHook] are told of it as
// [edge.Waited], its Decision's RetryAfter the time it waited. A longer wait is refused at
// once, as without it, and a call cancelled while it waits gives its place back and ends with
// its context's status. In a dry run a call that would wait proceeds at once, as
// [edge.DryRunWaited]. Only a Limiter that can promise a place waits ([edge.Reserver]). At
// most [edge.DefaultMaxWaiting] calls wait at once unless [WithMaxWaiting] says otherwise. The
// default, and a max of 0, is not to wait. It panics if max is negative.
func WithWait(max time.Duration) Option {
	if max < 0 {
		panic("grpclimit: WithWait: negative wait")
	}
	return func(c *config) { c.MaxWait = max }
}

// WithMaxWaiting sets the most calls that wait at once for their place (see [WithWait]), across
// clients; beyond it, a call is refused as without WithWait. The default is
// [edge.DefaultMaxWaiting]. It panics if n is below 1.
func WithMaxWaiting(n int) Option {
	if n < 1 {
		panic("grpclimit: WithMaxWaiting below 1")
	}
	return func(c *config) { c.MaxWaiting = n }
}

// WithErrorHook adds a function that is told of every error of the key function or the
// limiter, for logs or metrics. It runs on the call's goroutine before the call is answered
// and must be safe for concurrent use.
func WithErrorHook(fn func(ctx context.Context, fullMethod string, err error)) Option {
	if fn == nil {
		panic("grpclimit: WithErrorHook(nil)")
	}
	return func(c *config) {
		c.OnError = append(c.OnError, func(c call, err error) { fn(c.ctx, c.fullMethod, err) })
	}
}

// WithDecisionHook adds a function that is told of every call the interceptor handles, with
// what it did ([retryafter.Outcome]) and the limiter's [retryafter.Decision] (the zero Decision
// when the limiter was not asked: an exempt call, a key function that failed), for metrics. It
// runs on the call's goroutine before the call proceeds or ends, and must be safe for
// concurrent use and cheap.
func WithDecisionHook(fn func(ctx context.Context, fullMethod string, o retryafter.Outcome, d retryafter.Decision)) Option {
	if fn == nil {
		panic("grpclimit: WithDecisionHook(nil)")
	}
	return func(c *config) {
		c.OnDecided = append(c.OnDecided, func(c call, o retryafter.Outcome, d retryafter.Decision) { fn(c.ctx, c.fullMethod, o, d) })
	}
}

// WithMessageCharge makes a stream cost, besides what it is decided at when it opens, one token
// of c for each message it carries, either way, charged under the stream's key when its handler
// returns (or panics), at the clock's instant then. c may go into debt: the key's next call is
// then refused until the debt is repaid, with the exact wait, when the interceptor's Limiter
// counts in c (c itself, or [retryafter.All] of a limit per call and
// [retryafter.ChargedAfter](c)). A charge that fails goes to the hooks of [WithErrorHook]. The
// default charges nothing for messages. [UnaryServerInterceptor] panics when given it: a unary
// call's one message is its cost.
func WithMessageCharge(c retryafter.Charger) Option {
	if c == nil {
		panic("grpclimit: WithMessageCharge(nil)")
	}
	return func(cfg *config) { cfg.messages = c }
}
