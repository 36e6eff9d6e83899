package retryafter

import (
	"context"
	"hash/maphash"
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
// Browsers: mount CORS middleware before the limiter; see the package doc's Browsers section.
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
// A CORS preflight that CORS middleware answers is never counted or refused, and a request
// shaped as one that it does not is limited as any other; see the package doc's Browsers section
// for where to mount CORS middleware.
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
	bucket        *TokenBucket // limiter, when it is one and nothing reads the quota: decided lean
	after         afterCharger // limiter, when it has layers charged after the request
	c             config
	emit          emitter
	fields        quotaFields
	exposeAllowed exposeList // names an admitted response exposes (the rate-limit fields)
	cors          corsOrderWatch
}

// NewMiddleware returns a [Middleware] that asks l, configured by opts. It panics if l is nil.
func NewMiddleware(l Limiter, opts ...Option) *Middleware {
	if l == nil {
		panic("retryafter: nil Limiter")
	}
	m := &Middleware{limiter: l, c: newConfig(opts)}
	if m.c.fields == 0 && len(m.c.onDecided) == 0 && len(m.c.onLimited) == 0 {
		m.bucket, _ = l.(*TokenBucket)
	}
	if a, ok := l.(afterCharger); ok && a.deferred() {
		m.after = a
	}
	m.fields.set, m.fields.raw = m.c.fields, m.c.policy
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
	h := &limitHandler{next: next, m: m}
	h.preflights.seed = maphash.MakeSeed()
	return h
}

// Allow decides r under key, rather than the key function's, and reports whether it was
// admitted; if not, it has written the refusal, as the middleware would have (the key function
// is not called, nor the exemption of [WithExempt]). The cost is the one [WithCost] gives r.
// When the limiter fails, it reports true if the Middleware fails open and otherwise writes the
// 503. A limiter with layers charged afterwards ([ChargedAfter]) is charged by the caller, which
// knows the key: with [Charger]'s Charge.
func (m *Middleware) Allow(w http.ResponseWriter, r *http.Request, key string) bool {
	return m.decide(w, r, key)
}

// limitHandler is the handler a Middleware wraps around next.
type limitHandler struct {
	next       http.Handler
	m          *Middleware
	preflights preflightMemory // what next does with requests shaped as preflights
}

func (h *limitHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	m := h.m
	if m.c.exempt != nil && m.c.exempt(r) {
		m.decided(r, Exempt, Decision{})
		h.serve(w, r)
		return
	}
	// Free when it is one, which only the answer tells: see preflight.go.
	preflight := isPreflight(r)
	if preflight && h.preflights.pass(h, w, r) {
		return
	}
	key, err := m.c.key(r)
	if err != nil {
		m.fail(w, r, m.c.now(), http.StatusInternalServerError, err)
		if m.c.failOpen {
			h.serve(w, r)
		}
		return
	}
	if !m.decide(w, r, key) {
		return
	}
	if m.after == nil {
		h.serve(w, r)
	} else {
		h.serveCharged(w, r, key)
	}
	if preflight {
		h.preflights.learn(r, answersPreflight(w.Header()))
	}
}

// serveCharged passes r to next and charges the layers of the limiter charged afterwards what
// the handler reports with Charge, whatever becomes of the handler, a panic included.
func (h *limitHandler) serveCharged(w http.ResponseWriter, r *http.Request, key string) {
	slot := new(chargeSlot)
	r = r.WithContext(context.WithValue(r.Context(), chargeKey{}, slot))
	defer h.m.chargeAfter(r, key, slot)
	h.serve(w, r)
}

// serve passes r to next, watching the order of CORS middleware when r is cross-origin.
func (h *limitHandler) serve(w http.ResponseWriter, r *http.Request) {
	if hasOrigin(r) {
		h.m.cors.serve(h.next, w, r, h.m.c.onError)
		return
	}
	h.next.ServeHTTP(w, r)
}

// enter implements frontDoor: r is decided as any request, under its key.
func (h *limitHandler) enter(w http.ResponseWriter, r *http.Request) (func(), bool) {
	m := h.m
	if key, passed := m.key(w, r); passed {
		return nil, m.decide(w, r, key)
	}
	return nil, m.c.failOpen
}

// key returns the key of r, or, when the key function fails, reports the error, answers r
// unless the Middleware fails open, and returns false.
func (m *Middleware) key(w http.ResponseWriter, r *http.Request) (string, bool) {
	key, err := m.c.key(r)
	if err != nil {
		m.fail(w, r, m.c.now(), http.StatusInternalServerError, err)
		return "", false
	}
	return key, true
}

// chargeAfter charges the layers of m's limiter that are charged afterwards what r's handler
// reported in slot.
func (m *Middleware) chargeAfter(r *http.Request, key string, slot *chargeSlot) {
	cost := slot.total()
	if cost <= 0 {
		return
	}
	// The request's context may have ended with the handler; what it cost is still owed.
	ctx := context.WithoutCancel(r.Context())
	if err := m.after.chargeAfter(ctx, key, cost, m.c.now()); err != nil {
		m.errored(r, err)
	}
}

// decide asks the limiter about r under key, writes the rate-limit fields, and reports whether
// r may reach next; if not, it has answered r. It reads the clock after the cost function, which
// may take long (reading a body), so that r is decided at a reading no older than its decision.
func (m *Middleware) decide(w http.ResponseWriter, r *http.Request, key string) bool {
	cost := 1
	if m.c.cost != nil {
		cost = max(1, m.c.cost(r))
	}
	now := m.c.now()
	var d Decision
	var err error
	if m.bucket != nil {
		// Neither the fields nor the hooks read the quota (see TokenBucket.decideLean).
		if m.bucket.decideLean(key, cost, now, &d) {
			return true
		}
	} else {
		d, err = m.limiter.Decide(r.Context(), key, cost, now)
	}
	if err != nil {
		if r.Context().Err() != nil {
			// The request itself ended (the client hung up, a deadline passed): the store
			// did not fail, and a request that was not counted is not admitted for it.
			m.decided(r, FailedClosed, Decision{})
			m.emit.refuse(w, r, m.c.respond, Refusal{Status: http.StatusServiceUnavailable, RetryAfter: failClosedWait}, now, nil)
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
		if (d.Allowed || m.c.dryRun) && hasOrigin(r) {
			m.exposeAllowed.expose(hdr, lines)
		}
	}
	if d.Allowed {
		m.decided(r, Admitted, d)
		return true
	}
	for _, fn := range m.c.onLimited {
		fn(r, key, d)
	}
	if m.c.dryRun {
		m.decided(r, DryRunRefused, d)
		return true
	}
	m.decided(r, Refused, d)
	f := Refusal{Status: http.StatusTooManyRequests, RetryAfter: d.RetryAfter}
	if m.c.respond != nil { // the default plain text names no policy
		f.Violated = m.fields.violated(d)
	}
	m.emit.refuse(w, r, m.c.respond, f, now, lines)
	return false
}

// decided tells the hooks of WithDecisionHook what became of r.
func (m *Middleware) decided(r *http.Request, o Outcome, d Decision) {
	for _, fn := range m.c.onDecided {
		fn(r, o, d)
	}
}

// errored tells the hooks of WithErrorHook of err.
func (m *Middleware) errored(r *http.Request, err error) {
	for _, fn := range m.c.onError {
		fn(r, err)
	}
}

// failClosedWait is the Retry-After of the 503 that answers a limiter error when failing
// closed: short, since a store that is down is usually back soon.
const failClosedWait = time.Second

// fail reports err and, unless the Middleware fails open, refuses r with status.
func (m *Middleware) fail(w http.ResponseWriter, r *http.Request, now time.Time, status int, err error) {
	m.errored(r, err)
	if m.c.failOpen {
		m.decided(r, FailedOpen, Decision{})
		return
	}
	m.decided(r, FailedClosed, Decision{})
	var wait time.Duration
	if status == http.StatusServiceUnavailable {
		wait = failClosedWait
	}
	m.emit.refuse(w, r, m.c.respond, Refusal{Status: status, RetryAfter: wait}, now, nil)
}
