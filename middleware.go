package retryafter

import (
	"context"
	"math"
	"net/http"
	"time"

	"golang.org/x/time/rate"

	"github.com/retryafter/retryafter/internal/header"
)

// Limit returns middleware that lets each client make requests at limit per second with bursts
// of up to burst, counted in memory by a [TokenBucket], and answers the requests over that with
// 429 Too Many Requests, a Retry-After in delay-seconds and a Date, both from one clock reading.
//
// Retry-After is the bucket's own delay for the refused request, rounded up to whole seconds and
// never 0: a client that waits exactly that long and retries is admitted, unless something else
// spent its quota meanwhile, and a client that waits a second less may not be. A refused request
// costs no quota. A request that can never be admitted (a limit of 0 with the burst spent) is
// answered 429 with no Retry-After. A limit of [rate.Inf] admits everything.
//
// Clients are told apart by [ClientIP] unless [WithKeyFunc] says otherwise. Responses the
// middleware passes to next are next's own: unless [WithRateLimitFields] or
// [WithLegacyRateLimitFields] is on, it adds no header to them, and net/http's server adds Date
// to each when it writes it, as it does without the middleware.
//
// Browsers: mount CORS middleware before the limiter (with chi, r.Use(cors.Handler(...)) first),
// or its refusals go without Access-Control-Allow-Origin and the page cannot read them. A CORS
// preflight is passed to next uncounted, never refused. See [LimitWith].
//
// Limit(limit, burst, opts...) is shorthand for LimitWith(NewTokenBucket(limit, burst), opts...).
// It panics if limit is negative or not a number, or burst is below 1. The returned middleware
// is safe for concurrent use.
func Limit(limit rate.Limit, burst int, opts ...Option) func(http.Handler) http.Handler {
	return LimitWith(NewTokenBucket(limit, burst), opts...)
}

// LimitWith returns middleware that asks l about each request, passes the admitted ones to next
// and answers the others with 429 Too Many Requests, Retry-After and Date, as [Limit] does. It is
// shorthand for NewMiddleware(l, opts...).Handler.
//
// When the key function or l fails, the request is answered as [WithFailOpen] says, except that
// a request whose own context ended while l decided (the client hung up, a deadline passed) is
// never admitted uncounted: it is answered 503 with Retry-After: 1, and not reported to the
// error hook, since the store did not fail. LimitWith does not change l, which may serve other
// middleware at the same time.
//
// Browsers read a refusal only when CORS middleware has set Access-Control-Allow-Origin on it,
// so mount CORS middleware before the limiter (outside it: with chi, r.Use(cors.Handler(...))
// ahead of r.Use(retryafter.LimitWith(...))). Mounted after it, CORS never runs for a refusal,
// and the page sees a network error rather than 429 and Retry-After; the middleware reports that
// order, once, as [ErrCORSMountOrder] to the hook of [WithErrorHook] (or, without one, to the
// standard logger) the first time a cross-origin response gets Access-Control-Allow-Origin from
// inside it. On a request with an Origin field, a refusal names Retry-After, Date and the
// rate-limit fields in Access-Control-Expose-Headers, and so does an admitted response when
// rate-limit fields are on, merging with what the CORS middleware set there.
//
// A CORS preflight (OPTIONS with Origin and Access-Control-Request-Method) is not the request it
// asks about: it is passed to next uncounted and never refused, in either mount order.
func LimitWith(l Limiter, opts ...Option) func(http.Handler) http.Handler {
	return NewMiddleware(l, opts...).Handler
}

// A Middleware asks a [Limiter] about requests and answers those it refuses: the middleware of
// [LimitWith] as a value, so that a handler that limits by something only it knows (a login, by
// the user name in the body) answers with the very same 429, fields, problem details and hooks.
//
//	m := retryafter.NewMiddleware(perUser, retryafter.WithProblemDetails(retryafter.ProblemDetails{}))
//	func login(w http.ResponseWriter, r *http.Request) {
//		user := r.PostFormValue("user")
//		if !m.Allow(w, r, user) {
//			return // refused: the 429 is written
//		}
//		...
//	}
//
// A Middleware is safe for concurrent use.
type Middleware struct {
	limiter       Limiter
	bucket        *TokenBucket // limiter, when it is one: called directly, which is faster
	group         *bucketGroup // limiter, when it is an All of TokenBuckets: likewise
	after         afterCharger // limiter, when it has layers charged after the request
	c             config
	emit          emitter
	fields        quotaFields
	exposeAllowed exposeList // names an admitted response exposes (the rate-limit fields)
	cors          corsOrderWatch
	plain         bool // limiter is a TokenBucket, with no cost function and no rate-limit fields
}

// NewMiddleware returns a [Middleware] that asks l, configured by opts. It panics if l is nil.
func NewMiddleware(l Limiter, opts ...Option) *Middleware {
	if l == nil {
		panic("retryafter: nil Limiter")
	}
	c := newConfig(opts)
	m := &Middleware{limiter: l, c: c}
	m.bucket, _ = l.(*TokenBucket)
	if a, ok := l.(*all); ok {
		m.group = a.buckets
	}
	if a, ok := l.(afterCharger); ok && a.deferred() {
		m.after = a
	}
	m.fields = newQuotaFields(&m.c, l)
	m.plain = m.bucket != nil && m.c.cost == nil && m.fields.set == 0
	names := m.fields.exposed()
	m.exposeAllowed = newExposeList(names...)
	m.emit.expose = newExposeList(append([]string{header.RetryAfter, header.Date}, names...)...)
	return m
}

// Handler returns next behind the limiter, as [LimitWith] describes: the key function names
// the client, and admitted requests reach next. With chi: r.Use(m.Handler).
func (m *Middleware) Handler(next http.Handler) http.Handler {
	if next == nil {
		panic("retryafter: Middleware.Handler(nil)")
	}
	return &limitHandler{next: next, m: m}
}

// Allow decides r under key, rather than the key function's, and reports whether it was
// admitted; if not, it has written the refusal, as the middleware would have (the key function
// is not called). The cost is the one [WithCost] gives r. When the limiter fails, it reports
// true if the Middleware fails open and otherwise writes the 503. A limiter with layers charged
// afterwards ([ChargedAfter]) is charged by the caller, which knows the key: with [Charger]'s
// Charge. A CORS preflight is admitted uncounted.
func (m *Middleware) Allow(w http.ResponseWriter, r *http.Request, key string) bool {
	if isPreflight(r) {
		return true // a CORS preflight is not the request it asks about
	}
	return m.decide(w, r, m.c.now(), key)
}

// limitHandler is the handler a Middleware wraps around next.
type limitHandler struct {
	next http.Handler
	m    *Middleware
}

func (h *limitHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	m := h.m
	if isPreflight(r) {
		m.cors.serve(h.next, w, r, m.c.onError)
		return
	}
	now := m.c.now()
	var key string
	var err error
	if m.c.keyer != nil {
		key, err = m.c.keyer.key(r) // a direct call, without the method value's
	} else {
		key, err = m.c.key(r)
	}
	if err != nil {
		m.fail(w, r, now, http.StatusInternalServerError, err)
		if m.c.failOpen {
			h.next.ServeHTTP(w, r)
		}
		return
	}
	if m.plain {
		// decide's path for a TokenBucket with no cost function and no rate-limit fields, the
		// most common one, without its call and its checks.
		var d Decision
		m.bucket.decide(key, 1, now, &d, false)
		if !d.Allowed {
			m.limited(w, r, now, key, d, nil)
			return
		}
	} else if !m.decide(w, r, now, key) {
		return
	}
	if m.after == nil {
		if hasOrigin(r) {
			m.cors.serve(h.next, w, r, m.c.onError)
			return
		}
		h.next.ServeHTTP(w, r)
		return
	}
	// Layers charged afterwards: the handler reports what the request cost with Charge.
	slot := new(chargeSlot)
	r = r.WithContext(context.WithValue(r.Context(), chargeKey{}, slot))
	if hasOrigin(r) {
		m.cors.serve(h.next, w, r, m.c.onError)
	} else {
		h.next.ServeHTTP(w, r)
	}
	if cost := slot.cost.Load(); cost > 0 {
		// The request's context may have ended with the handler; what it cost is still owed.
		ctx := context.WithoutCancel(r.Context())
		if err := m.after.chargeAfter(ctx, key, int(min(cost, math.MaxInt32)), m.c.now()); err != nil && m.c.onError != nil {
			m.c.onError(r, err)
		}
	}
}

// decide asks the limiter about r under key at now, writes the rate-limit fields, and reports
// whether r was admitted; if not, it has answered r.
func (m *Middleware) decide(w http.ResponseWriter, r *http.Request, now time.Time, key string) bool {
	cost := 1
	if m.c.cost != nil {
		cost = max(1, m.c.cost(r))
	}
	var d Decision
	var err error
	if m.bucket != nil {
		m.bucket.decide(key, cost, now, &d, m.fields.set != 0)
	} else if m.group != nil {
		m.group.decide(key, cost, now, &d, m.fields.set != 0)
	} else if d, err = m.limiter.Decide(r.Context(), key, cost, now); err != nil {
		if r.Context().Err() != nil {
			// The request itself ended (the client hung up, a deadline passed): the store
			// did not fail, and a request that was not counted is not admitted for it.
			m.emit.refuse(w, r, m.c.respond, http.StatusServiceUnavailable, now, failClosedWait, nil)
			return false
		}
		m.fail(w, r, now, http.StatusServiceUnavailable, err)
		return m.c.failOpen
	}
	var lines *header.Lines
	if m.fields.set != 0 {
		lines = new(header.Lines)
		hdr := w.Header()
		m.fields.write(hdr, d, lines)
		if d.Allowed && hasOrigin(r) {
			m.exposeAllowed.expose(hdr, lines)
		}
	}
	if d.Allowed {
		return true
	}
	m.limited(w, r, now, key, d, lines)
	return false
}

// limited answers a request that d refused: it calls the hook of WithLimitedHook, and writes the
// refusal, with lines when the rate-limit fields were written.
func (m *Middleware) limited(w http.ResponseWriter, r *http.Request, now time.Time, key string, d Decision, lines *header.Lines) {
	if m.c.onLimited != nil {
		m.c.onLimited(r, key, d)
	}
	m.emit.refuse(w, r, m.c.respond, http.StatusTooManyRequests, now, d.RetryAfter, lines)
}

// failClosedWait is the Retry-After of the 503 that answers a limiter error when failing
// closed: short, since a store that is down is usually back soon.
const failClosedWait = time.Second

// fail reports err and, unless the Middleware fails open, refuses r with status.
func (m *Middleware) fail(w http.ResponseWriter, r *http.Request, now time.Time, status int, err error) {
	if m.c.onError != nil {
		m.c.onError(r, err)
	}
	if m.c.failOpen {
		return
	}
	var wait time.Duration
	if status == http.StatusServiceUnavailable {
		wait = failClosedWait
	}
	m.emit.refuse(w, r, m.c.respond, status, now, wait, nil)
}
