package retryafter

import (
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
// It panics if limit is negative or burst is below 1. The returned middleware is safe for
// concurrent use.
func Limit(limit rate.Limit, burst int, opts ...Option) func(http.Handler) http.Handler {
	return LimitWith(NewTokenBucket(limit, burst), opts...)
}

// LimitWith returns middleware that asks l about each request, passes the admitted ones to next
// and answers the others with 429 Too Many Requests, Retry-After and Date, as [Limit] does.
//
// When the key function or l fails, the request is answered as [WithFailOpen] says. LimitWith
// does not change l, which may serve other middleware at the same time.
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
	if l == nil {
		panic("retryafter: LimitWith(nil)")
	}
	c := newConfig(opts)
	fields := newQuotaFields(&c, l)
	names := fields.exposed()
	allowed := newExposeList(names...)
	refused := newExposeList(append([]string{header.RetryAfter, header.Date}, names...)...)
	return func(next http.Handler) http.Handler {
		h := &limitHandler{next: next, limiter: l, c: c, fields: fields, exposeAllowed: allowed}
		h.bucket, _ = l.(*TokenBucket)
		h.emit.expose = refused
		return h
	}
}

// limitHandler is the handler the middleware of [LimitWith] wraps around next.
type limitHandler struct {
	next          http.Handler
	limiter       Limiter
	bucket        *TokenBucket // limiter, when it is one: called directly, which is faster
	c             config
	emit          emitter
	fields        quotaFields
	exposeAllowed exposeList // names an admitted response exposes (the rate-limit fields)
	cors          corsOrderWatch
}

func (h *limitHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if isPreflight(r) {
		h.cors.serve(h.next, w, r, h.c.onError)
		return
	}
	now := h.c.now()
	key, err := h.c.key(r)
	if err != nil {
		h.fail(w, r, now, http.StatusInternalServerError, err)
		return
	}
	cost := 1
	if h.c.cost != nil {
		cost = max(1, h.c.cost(r))
	}
	var d Decision
	if h.bucket != nil {
		h.bucket.decide(key, cost, now, &d, h.fields.set != 0)
	} else if d, err = h.limiter.Decide(r.Context(), key, cost, now); err != nil {
		h.fail(w, r, now, http.StatusServiceUnavailable, err)
		return
	}
	var lines *header.Lines
	if h.fields.set != 0 {
		lines = new(header.Lines)
		hdr := w.Header()
		h.fields.write(hdr, d, lines)
		if d.Allowed && hasOrigin(r) {
			h.exposeAllowed.expose(hdr, lines)
		}
	}
	if d.Allowed {
		if hasOrigin(r) {
			h.cors.serve(h.next, w, r, h.c.onError)
			return
		}
		h.next.ServeHTTP(w, r)
		return
	}
	if h.c.onLimited != nil {
		h.c.onLimited(r, key, d)
	}
	h.emit.refuse(w, r, h.c.respond, http.StatusTooManyRequests, now, d.RetryAfter, lines)
}

// failClosedWait is the Retry-After of the 503 that answers a limiter error when failing
// closed: short, since a store that is down is usually back soon.
const failClosedWait = time.Second

// fail reports err and then admits r or refuses it with status, as configured.
func (h *limitHandler) fail(w http.ResponseWriter, r *http.Request, now time.Time, status int, err error) {
	if h.c.onError != nil {
		h.c.onError(r, err)
	}
	if h.c.failOpen {
		h.next.ServeHTTP(w, r)
		return
	}
	var wait time.Duration
	if status == http.StatusServiceUnavailable {
		wait = failClosedWait
	}
	h.emit.refuse(w, r, h.c.respond, status, now, wait, nil)
}
