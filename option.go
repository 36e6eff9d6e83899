package retryafter

import (
	"net/http"
	"time"

	"github.com/retryafter/retryafter/edge"
)

// An Option configures the middleware of [Limit], [LimitWith] and [NewMiddleware]. Each has an
// effect on all three.
//
// One rule for arguments: an Option given a nil function, or a value it cannot use, panics when
// it is made, with a message that starts "retryafter: ". The hooks (WithErrorHook,
// WithLimitedHook, WithDecisionHook) add up: each one given is called, in the order given, so
// that a metrics package and a logger can both listen.
type Option func(*config)

// config is the middleware's configuration, as its options leave it.
type config struct {
	edge.Config[*http.Request] // how requests are decided: the core's

	respond Responder // nil: the default plain text
	fields  fieldSet  // which rate-limit fields to write (fields.go)
	policy  string    // their policy name
}

func newConfig(opts []Option) config {
	c := config{policy: defaultPolicy}
	c.Now = time.Now
	for _, o := range opts {
		if o == nil {
			panic("retryafter: nil Option")
		}
		o(&c)
	}
	if c.Key == nil {
		c.Key = ClientIP()
	}
	return c
}

// WithClock sets the clock. The middleware reads it once per request, after the key and cost
// functions, just before the limiter decides, and uses that one reading for the limiter, the
// Retry-After it computes and the Date it writes. The default is [time.Now]. (A [Maintenance],
// a struct whose zero value works, has a Now field instead.)
//
// A clock without monotonic readings (time.Now().UTC(), a clock of the test's) follows the wall
// clock when it is set back, by any step: a [TokenBucket] decides a reading more than a second
// behind the latest it has seen at that latest instant, and the readings that follow it on the
// clock's new line count on from there, taken for a step back once they have run on for 5 s
// with no current reading in between; so all its buckets count on from the new readings,
// neither refilled nor frozen for the step, and no client is told to wait the step (see
// [TokenBucket.Decide]). A one-off stale or zero reading credits no key. time.Now's readings
// are monotonic: they never go back.
func WithClock(now func() time.Time) Option {
	if now == nil {
		panic("retryafter: WithClock(nil)")
	}
	return func(c *config) { c.Now = now }
}

// WithKeyFunc sets the function that names the client a request is counted against. The
// default is [ClientIP] with no trusted proxies: RemoteAddr, port stripped (an IPv6 client's
// /64), so that forwarding headers, which the client writes, play no part.
//
// A request whose key function fails is not counted: it is answered 500 Internal Server Error
// unless [WithFailOpen] says otherwise, and the error goes to the hooks of [WithErrorHook].
func WithKeyFunc(key KeyFunc) Option {
	if key == nil {
		panic("retryafter: WithKeyFunc(nil)")
	}
	return func(c *config) { c.Key = key }
}

// WithResponder sets the function that writes the status line and body of every refusal of the
// middleware, replacing [WithProblemDetails] given before it; a refusal of the limiter's names
// the policies it violated in the [Refusal]. The default writes a short plain-text body.
func WithResponder(fn Responder) Option {
	if fn == nil {
		panic("retryafter: WithResponder(nil)")
	}
	return func(c *config) { c.respond = fn }
}

// WithProblemDetails makes the middleware answer with the problem objects of p, which name the
// policies a refusal violated: it is shorthand for WithResponder(p.Respond), and like it
// replaces any responder set before it. For a [Maintenance], set its Respond field to p.Respond.
func WithProblemDetails(p ProblemDetails) Option {
	return WithResponder(p.Respond)
}

// WithErrorHook adds a function that is told of every error of the key function or the limiter,
// for logs or metrics, and, once, of [ErrCORSMountOrder] when CORS middleware is mounted after the
// middleware. It runs on the request's goroutine, before the request is answered for the errors
// (after it for ErrCORSMountOrder), and must be safe for concurrent use. Without one, the errors
// are only answered, and ErrCORSMountOrder is logged by the standard logger.
func WithErrorHook(fn func(r *http.Request, err error)) Option {
	if fn == nil {
		panic("retryafter: WithErrorHook(nil)")
	}
	return func(c *config) { c.OnError = append(c.OnError, fn) }
}

// WithLimitedHook adds a function that is told of every request the limiter refuses (and, in a
// dry run, would have refused), with its key and the limiter's [Decision] (RetryAfter before
// rounding, and at least 1 ns, the least wait, for a limiter's refusal with none;
// rate.InfDuration for a request that can never be admitted), for logs: count by
// something bounded (the route, the policy), not by key. It runs on the request's goroutine
// before the 429 is written and must be safe for concurrent use.
func WithLimitedHook(fn func(r *http.Request, key string, d Decision)) Option {
	if fn == nil {
		panic("retryafter: WithLimitedHook(nil)")
	}
	return func(c *config) { c.OnLimited = append(c.OnLimited, fn) }
}

// WithDecisionHook adds a function that is told of every request the middleware handles, with
// what it did ([Outcome]) and the limiter's [Decision] (the zero Decision when the limiter was
// not asked: an exempt request, a key function that failed; a refusal's RetryAfter at least
// 1 ns, as for [WithLimitedHook]), for metrics. It runs on the
// request's goroutine before the request is answered or passed on, and must be safe for
// concurrent use and cheap. Without one, the middleware does no work for it.
func WithDecisionHook(fn func(r *http.Request, o Outcome, d Decision)) Option {
	if fn == nil {
		panic("retryafter: WithDecisionHook(nil)")
	}
	return func(c *config) { c.OnDecided = append(c.OnDecided, fn) }
}

// WithFailOpen makes the middleware admit a request, uncounted, when its key function or its
// limiter fails (a shared store that is down, say). The default is to fail closed: a key error
// is answered 500 Internal Server Error and a limiter error 503 Service Unavailable with
// Retry-After: 1. Either way the client never sees the error's text. A request whose own context
// ended while the limiter decided is never admitted for the limiter's error (see [LimitWith]).
//
// Failing open admits key errors too: with a key function that fails on input the client
// controls (a missing API key header), every such request would pass unlimited, so keep the
// default or make the key function fall back to a key of its own.
func WithFailOpen(open bool) Option {
	return func(c *config) { c.FailOpen = open }
}

// WithDryRun makes the middleware decide and report every request as usual but never refuse:
// a request that would have been refused reaches next.
//
// A would-be refusal spends nothing, exactly as a real one, nor is it charged afterwards
// ([ChargedAfter]), so that the dry run shows what enforcing would do; the hooks of
// [WithLimitedHook] are told of it with its Decision, and those of [WithDecisionHook] with
// [edge.DryRunRefused]. A request whose key function or Limiter fails reaches next too, as with
// [WithFailOpen]. The response next writes carries no Retry-After;
// the rate-limit fields, when on, are sent as they would be. To roll a limit out: run it dry,
// watch the hook, then enforce.
func WithDryRun(on bool) Option {
	return func(c *config) { c.DryRun = on }
}

// WithExempt names requests the middleware passes to next without counting them: health checks,
// internal traffic. An exempt request is not counted, not refused and gets no rate-limit
// fields; the key function is not called for it. fn runs first, on every request, and must be
// safe for concurrent use.
func WithExempt(fn func(*http.Request) bool) Option {
	if fn == nil {
		panic("retryafter: WithExempt(nil)")
	}
	return func(c *config) { c.Exempt = fn }
}

// WithCost sets the function that says how many tokens a request costs, so that an expensive
// endpoint counts for several requests. The default is 1. A cost below 1 counts as 1, so that
// no request is free by mistake: to exempt a request, use [WithExempt]. A cost above what the
// limiter can ever admit is answered 429 with no Retry-After, since there is no honest value to
// send. The function must be safe for concurrent use.
func WithCost(cost func(*http.Request) int) Option {
	if cost == nil {
		panic("retryafter: WithCost(nil)")
	}
	return func(c *config) { c.Cost = cost }
}

// WithRateLimitFields makes the middleware send the RateLimit and RateLimit-Policy fields of
// draft-ietf-httpapi-ratelimit-headers on every response the limiter decides, admitted (set
// before next is called) and refused alike, one item for each policy that decided the request
// (every layer of an [All]), named by its [Policy] or, when it has no name, by policy
// ("default" when policy is ""). The default is to send neither.
//
// For a token bucket of rate R and burst B the fields read
//
//	RateLimit-Policy: "default";q=B;w=ceil(B/R)
//	RateLimit: "default";r=<whole tokens left>;t=<seconds until a token is back, rounded up>
//
// and on a 429, t of the binding layer equals the Retry-After, so that neither tells the client
// it may come back earlier than the other. A [Decision] with no Limit gets no fields, and one
// with no Policy.Limit no w. It panics if policy has a character outside printable ASCII.
func WithRateLimitFields(policy string) Option {
	if policy == "" {
		policy = defaultPolicy
	}
	if !edge.Printable(policy) {
		panic("retryafter: WithRateLimitFields: policy name outside printable ASCII")
	}
	return func(c *config) {
		c.fields |= fieldsDraft
		c.policy = policy
	}
}

// WithLegacyRateLimitFields makes the middleware also send, when on is true, the
// X-RateLimit-Limit, X-RateLimit-Remaining and X-RateLimit-Reset fields that older clients read,
// for the binding policy: q, r and t of [WithRateLimitFields], X-RateLimit-Reset in
// delay-seconds, not a Unix time, so that the client's clock plays no part. The default is not
// to send them.
func WithLegacyRateLimitFields(on bool) Option {
	return func(c *config) {
		if on {
			c.fields |= fieldsLegacy
		} else {
			c.fields &^= fieldsLegacy
		}
	}
}

// An Outcome is what the middleware did with a request, for the hooks of [WithDecisionHook]:
// [edge.Outcome], with its values (edge.Admitted, edge.Refused, ...).
type Outcome = edge.Outcome

// WithWait makes the middleware serve a request that is only a little early, as nginx's
// limit_req delays one within its burst: a request whose wait is at most max, and whose context
// would still be alive when the wait ends, waits in the server for its place, promised when it
// began to wait, and is then passed to next; the hooks of [WithDecisionHook] are told of it as
// [edge.Waited], its Decision's RetryAfter the time it waited, and the rate-limit fields are
// those of when it is served. A longer wait is refused at once, as without it. The default, and
// a max of 0, is not to wait.
//
// The requests of one client that wait at once are at most what its limit admits in max. A
// client that hangs up while it waits gives its place back to the requests that come after it.
// The wait counts against http.Server's WriteTimeout; mount the middleware outside package
// overload's Concurrency, so that a waiting request holds no slot. In a dry run a request that
// would wait is passed on at once, as [edge.DryRunWaited]. Only a limiter that can promise a
// place waits ([edge.Reserver]: a [TokenBucket], [All] and [Shared] of them, and package
// redisstore's Store, but not Stores that an All combines in one script); with others the
// option has no effect. At most [edge.DefaultMaxWaiting] requests wait at once unless
// [WithMaxWaiting] says otherwise; beyond, they are refused as without WithWait. It panics if
// max is negative.
func WithWait(max time.Duration) Option {
	if max < 0 {
		panic("retryafter: WithWait: negative wait")
	}
	return func(c *config) { c.MaxWait = max }
}

// WithMaxWaiting sets the most requests that wait at once for their place (see [WithWait]),
// across clients, counting those the limiter is deciding, which may be given one; beyond it, a
// request is refused as without WithWait. The default is
// [edge.DefaultMaxWaiting]. It panics if n is below 1.
func WithMaxWaiting(n int) Option {
	if n < 1 {
		panic("retryafter: WithMaxWaiting below 1")
	}
	return func(c *config) { c.MaxWaiting = n }
}
