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
// Limit(limit, burst, opts...) is shorthand for LimitWith(NewTokenBucket(limit, burst), opts...).
// It panics if limit is negative or not a number, or burst is below 1. The returned middleware
// is safe for concurrent use.
func Limit(limit rate.Limit, burst int, opts ...Option) func(http.Handler) http.Handler {
	return LimitWith(NewTokenBucket(limit, burst), opts...)
}

// LimitWith returns middleware that asks l about each request, passes the admitted ones to next
// and answers the others with 429 Too Many Requests, Retry-After and Date, as [Limit] does.
//
// When the key function or l fails, the request is answered as [WithFailOpen] says, except that
// a request whose own context ended while l decided (the client hung up, a deadline passed) is
// never admitted uncounted: it is answered 503 with Retry-After: 1, and not reported to the
// error hook, since the store did not fail. LimitWith does not change l, which may serve other
// middleware at the same time.
//
// On a request with an Origin field, a refusal names Retry-After, Date and the rate-limit fields
// in Access-Control-Expose-Headers, and so does an admitted response when rate-limit fields are
// on, merging with what CORS middleware mounted before it set there.
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
}

func (h *limitHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
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
		if r.Context().Err() != nil {
			// The request itself ended (the client hung up, a deadline passed): the store
			// did not fail, and a request that was not counted is not admitted for it.
			h.emit.refuse(w, r, h.c.respond, http.StatusServiceUnavailable, now, failClosedWait, nil)
			return
		}
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
