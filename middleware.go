package retryafter

import (
	"net/http"
	"time"

	"golang.org/x/time/rate"
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
// middleware passes to next are next's own: it adds no header to them, and net/http's server
// adds Date to each when it writes it, as it does without the middleware.
//
// Limit panics if limit is negative or burst is below 1. It reads every option that
// [NewTokenBucket] and [LimitWith] read. The returned middleware is safe for concurrent use.
func Limit(limit rate.Limit, burst int, opts ...Option) func(http.Handler) http.Handler {
	return LimitWith(NewTokenBucket(limit, burst, opts...), opts...)
}

// LimitWith returns middleware that asks l about each request, passes the admitted ones to next
// and answers the others with 429 Too Many Requests, Retry-After and Date, as [Limit] does.
//
// When the key function or l fails, the request is answered as [WithFailOpen] says. It reads
// [WithClock], [WithKeyFunc], [WithResponder], [WithErrorHook] and [WithFailOpen].
func LimitWith(l Limiter, opts ...Option) func(http.Handler) http.Handler {
	if l == nil {
		panic("retryafter: LimitWith(nil)")
	}
	c := newConfig(opts)
	return func(next http.Handler) http.Handler {
		return &limitHandler{next: next, limiter: l, c: c}
	}
}

// limitHandler is the handler the middleware of [LimitWith] wraps around next.
type limitHandler struct {
	next    http.Handler
	limiter Limiter
	c       config
	emit    emitter
}

func (h *limitHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	now := h.c.now()
	key, err := h.c.key(r)
	if err != nil {
		h.fail(w, r, now, http.StatusInternalServerError, err)
		return
	}
	d, err := h.limiter.Decide(r.Context(), key, 1, now)
	if err != nil {
		h.fail(w, r, now, http.StatusServiceUnavailable, err)
		return
	}
	if d.Allowed {
		h.next.ServeHTTP(w, r)
		return
	}
	h.emit.refuse(w, r, h.c.respond, http.StatusTooManyRequests, now, d.RetryAfter)
}

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
		wait = h.c.errorWait
	}
	h.emit.refuse(w, r, h.c.respond, status, now, wait)
}
