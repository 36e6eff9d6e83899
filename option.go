package retryafter

import (
	"net/http"
	"time"
)

// An Option configures the middleware of [Limit] and [LimitWith]. Each has an effect on both.
type Option func(*config)

// config is the middleware's configuration, as its options leave it.
type config struct {
	now       func() time.Time
	key       KeyFunc
	keyer     *clientKeyer // key's own, when it is the default ClientIP(): called directly
	respond   Responder    // nil: the default plain text (writePlain)
	onError   func(*http.Request, error)
	failOpen  bool
	fields    fieldSet                              // which rate-limit fields to write (ratelimitfields.go)
	policy    string                                // their policy name, as a structured-field String
	cost      func(*http.Request) int               // a request's cost; nil means 1
	onLimited func(*http.Request, string, Decision) // told of every refusal by the limiter
}

func newConfig(opts []Option) config {
	c := config{now: time.Now}
	for _, o := range opts {
		if o == nil {
			panic("retryafter: nil Option")
		}
		o(&c)
	}
	if c.key == nil {
		c.keyer = newClientIP()
		c.key = c.keyer.key
	}
	return c
}

// WithClock sets the clock, which the middleware reads once per request and uses that one
// reading for the limiter, the Retry-After it computes and the Date it writes. The default is
// [time.Now].
func WithClock(now func() time.Time) Option {
	if now == nil {
		panic("retryafter: WithClock(nil)")
	}
	return func(c *config) { c.now = now }
}

// WithKeyFunc sets the function that names the client a request is counted against. The
// default is [ClientIP] with no trusted proxies: RemoteAddr, port stripped (an IPv6 client's
// /64), so that forwarding headers, which the client writes, play no part.
//
// A request whose key function fails is not counted: it is answered 500 Internal Server Error
// unless [WithFailOpen] says otherwise, and the error goes to the hook of [WithErrorHook].
func WithKeyFunc(key KeyFunc) Option {
	if key == nil {
		panic("retryafter: WithKeyFunc(nil)")
	}
	return func(c *config) { c.key = key }
}

// WithResponder sets the function that writes the status line and body of every refusal of the
// middleware. The default writes a short plain-text body.
func WithResponder(fn Responder) Option {
	if fn == nil {
		panic("retryafter: WithResponder(nil)")
	}
	return func(c *config) { c.respond = fn }
}

// WithErrorHook sets a function that is told of every error of the key function or the limiter,
// for logs or metrics, and, once, of [ErrCORSMountOrder] when CORS middleware is mounted after the
// middleware. It runs on the request's goroutine, before the request is answered for the errors
// (after it for ErrCORSMountOrder), and must be safe for concurrent use. The default is none: the
// errors are only answered, and ErrCORSMountOrder is logged by the standard logger.
func WithErrorHook(fn func(r *http.Request, err error)) Option {
	return func(c *config) { c.onError = fn }
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
	return func(c *config) { c.failOpen = open }
}

// WithCost sets the function that says how many tokens a request costs, so that an expensive
// endpoint counts for several requests. The default is 1. A cost below 1 counts as 1, so that
// no request is free by mistake: to exempt a route, mount the middleware only where it limits.
// A cost above what the limiter can ever admit is answered 429 with no Retry-After, since there
// is no honest value to send. The function must be safe for concurrent use.
func WithCost(cost func(*http.Request) int) Option {
	if cost == nil {
		panic("retryafter: WithCost(nil)")
	}
	return func(c *config) { c.cost = cost }
}

// WithLimitedHook sets a function that is told of every request the limiter refuses, with its
// key and the limiter's [Decision] (RetryAfter before rounding; rate.InfDuration for a request
// that can never be admitted), for logs or metrics: count by something bounded (the route, the
// status), not by key. It runs on the request's goroutine before the 429 is written and must be
// safe for concurrent use. The default is none.
func WithLimitedHook(fn func(r *http.Request, key string, d Decision)) Option {
	return func(c *config) { c.onLimited = fn }
}
