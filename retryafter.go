// Package retryafter is HTTP middleware that tells clients the truth about when to come back.
//
// A request over its limit is answered with 429 Too Many Requests, a Retry-After in the
// delay-seconds form computed from the limiter's own reservation and rounded up (never 0), and a
// Date header from the same clock reading. A client that waits exactly Retry-After seconds and
// retries is admitted, unless something else spent that key's quota meanwhile.
//
// The quick start, with chi or any net/http mux:
//
//	r := chi.NewRouter()
//	r.Use(retryafter.Limit(rate.Every(200*time.Millisecond), 10)) // 5 req/s per client, bursts of 10
//
// [Limit] counts with an in-memory token bucket per client ([TokenBucket]); [LimitWith] takes any
// [Limiter]. [NewMaintenance] is the 503 form: a switch that answers every request with
// Service Unavailable and a Retry-After that counts down to the announced end of the work.
// Options add, each off by default, the RateLimit fields ([WithRateLimitFields]), RFC 9457
// problem details ([WithProblemDetails]), per-request costs ([WithCost]) and hooks for logs and
// metrics ([WithLimitedHook], [WithErrorHook]). [ParseRetryAfter] is the client side: it reads
// both forms of Retry-After, all three HTTP-date formats, and measures dates against the
// response's own Date header.
package retryafter

import (
	"net/http"
	"time"
)

// An Option configures the constructors of this package. Options are shared: each constructor
// reads the ones that concern it and ignores the rest, so one list can configure a [Limit] and a
// [NewMaintenance] alike. The doc comment of each option names the constructors it affects.
type Option func(*config)

// config is the configuration every constructor reads from its options.
type config struct {
	now       func() time.Time
	key       func(*http.Request) (string, error)
	respond   Responder // nil: the default plain text (writePlain)
	onError   func(*http.Request, error)
	failOpen  bool
	maxKeys   int
	quota     bool                                  // limiters report Decision.Limit, Remaining and Reset
	fields    fieldSet                              // which rate-limit fields the middleware writes (ratelimitfields.go)
	policy    string                                // the policy name of the RateLimit fields, as a structured-field String
	cost      func(*http.Request) int               // a request's cost in tokens; nil means 1 (WithCost)
	onLimited func(*http.Request, string, Decision) // told of every request refused by the limiter (WithLimitedHook)
	httpDate  bool                                  // maintenance states Retry-After as an HTTP-date
	exempt    func(*http.Request) bool              // requests maintenance lets through; nil = none
	openWait  time.Duration                         // maintenance's Retry-After with no end to count down to

	fallback        time.Duration // the normalizer's Retry-After for an unusable one; 0 means its default
	maxRetryAfter   time.Duration // the normalizer's cap on Retry-After; 0 means its default
	missingFallback bool          // the normalizer gives a 429 or 503 without Retry-After the fallback
	onRepair        func(Repair)  // the normalizer's hook for each repair
}

func newConfig(opts []Option) config {
	c := config{
		now:      new(clock).now,
		maxKeys:  defaultMaxKeys,
		openWait: defaultMaintenanceWait,
	}
	for _, o := range opts {
		if o == nil {
			panic("retryafter: nil Option")
		}
		o(&c)
	}
	if c.key == nil {
		c.key = ClientIP()
	}
	return c
}

// WithClock sets the clock. The middleware reads it once per request and uses that one reading
// for the limiter, the Retry-After it computes and the Date header it writes. The default is
// the system clock: [time.Now], but for the wall clock, which it reads at most every 100 ms and
// advances by the monotonic clock in between, since reading both is the largest single cost of
// an admitted request. Its monotonic readings are time.Now's; its wall time, which Date and the
// windows of [NewSlidingWindow] go by, can trail a change of the wall clock (a step, a resume
// from suspend) by up to 100 ms. WithClock(time.Now) restores the plain one. It affects every
// constructor.
func WithClock(now func() time.Time) Option {
	if now == nil {
		panic("retryafter: WithClock(nil)")
	}
	return func(c *config) { c.now = now }
}

// WithKeyFunc sets the function that names the client a request is counted against. The default
// is [ClientIP] with no trusted proxies: the address in RemoteAddr, port stripped (an IPv6
// client's /64), so that forwarding headers, which the client writes, play no part.
//
// When the function returns an error the request is not counted; what it is answered is set by
// [WithFailOpen] (the default is 500 Internal Server Error), and the error goes to the hook set
// by [WithErrorHook]. It affects [Limit] and [LimitWith].
func WithKeyFunc(key func(*http.Request) (string, error)) Option {
	if key == nil {
		panic("retryafter: WithKeyFunc(nil)")
	}
	return func(c *config) { c.key = key }
}

// WithResponder sets the function that writes the status line and body of every response the
// package refuses a request with. The default writes a short plain-text body ([Responder]).
// It affects every constructor that refuses requests.
func WithResponder(fn Responder) Option {
	if fn == nil {
		panic("retryafter: WithResponder(nil)")
	}
	return func(c *config) { c.respond = fn }
}

// WithErrorHook sets a function that is told of every error of the key function or the limiter,
// for logging or metrics. It runs on the request's goroutine before the request is answered and
// must be safe for concurrent use. The default is none.
func WithErrorHook(fn func(r *http.Request, err error)) Option {
	return func(c *config) { c.onError = fn }
}

// WithFailOpen makes the middleware admit a request when its key function or limiter fails
// (a shared store that is down, say), instead of refusing it. The default is to fail closed:
// a key error is answered 500 Internal Server Error, and a limiter error 503 Service
// Unavailable with a Retry-After of one second. Either way the client never sees the error text,
// the hook of [WithErrorHook] sees the error, and an admitted request is not counted.
//
// Failing open admits key errors too: with a key function that fails on input the client
// controls (a missing API key header, say), every such request would pass unlimited, so keep
// the default or make the key function fall back to a key of its own instead of failing. It
// affects [Limit] and [LimitWith].
func WithFailOpen(open bool) Option {
	return func(c *config) { c.failOpen = open }
}
