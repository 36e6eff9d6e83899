package retryafter

import (
	"context"
	"net/http"

	"golang.org/x/time/rate"

	"github.com/retryafter/retryafter/edge"
	"github.com/retryafter/retryafter/internal/door"
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
	core          *edge.Core[*http.Request]
	after         afterCharger // the limiter, when it has layers charged after the request
	c             config
	emit          emitter
	fields        quotaFields
	exposeAllowed exposeList // names an admitted response exposes (the rate-limit fields)
	cors          corsOrderWatch
	preflights    door.Shared // what the nexts of its handlers do with requests shaped as preflights
}

// NewMiddleware returns a [Middleware] that asks l, configured by opts. It panics if l is nil.
func NewMiddleware(l Limiter, opts ...Option) *Middleware {
	if l == nil {
		panic("retryafter: nil Limiter")
	}
	m := &Middleware{c: newConfig(opts)}
	m.c.Quota = m.c.fields != 0
	m.core = edge.New(l, m.c.Config)
	if a, ok := l.(afterCharger); ok && a.deferred() {
		m.after = a
	}
	m.fields.set, m.fields.Fields = m.c.fields, edge.NewFields(m.c.policy)
	names := m.fields.exposed()
	m.exposeAllowed = newExposeList(names...)
	m.emit.expose = newExposeList(append([]string{header.RetryAfter, header.Date}, names...)...)
	return m
}

// Handler returns next behind the limiter, as [LimitWith] describes: the key function names
// the client, and admitted requests reach next. With chi: r.Use(m.Handler). The handlers it
// returns share what m learns of requests shaped as CORS preflights, but for the routes each
// next answers them to, so that a framework that wraps the middleware anew for each request
// (echo's WrapMiddleware) passes none on before it is decided but the first.
func (m *Middleware) Handler(next http.Handler) http.Handler {
	if next == nil {
		panic("retryafter: Middleware.Handler(nil)")
	}
	return &limitHandler{next: next, m: m, preflights: door.Memory{Shared: &m.preflights, Next: door.HandlerID(next)}}
}

// Allow decides r under key, rather than the key function's, and reports whether it was
// admitted; if not, it has written the refusal, as the middleware would have (the key function
// is not called, nor the exemption of [WithExempt]). The cost is the one [WithCost] gives r.
// When the limiter fails, it reports true if the Middleware fails open and otherwise writes the
// 503. A limiter with layers charged afterwards ([ChargedAfter]) is charged by the caller, which
// knows the key: with [Charger]'s Charge. In a dry run it reports true for a would-be refusal
// too, which the hooks of [WithDecisionHook] are told of as [edge.DryRunRefused] and which,
// since enforcing would not have served it, the caller should not charge.
func (m *Middleware) Allow(w http.ResponseWriter, r *http.Request, key string) bool {
	v := m.core.DecideKey(r.Context(), r, key)
	return m.answer(w, r, &v)
}

// limitHandler is the handler a Middleware wraps around next.
type limitHandler struct {
	next       http.Handler
	m          *Middleware
	preflights door.Memory // what next does with requests shaped as preflights
}

func (h *limitHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// Free when it is one, which only the answer tells: see package internal/door.
	preflight := door.IsPreflight(r)
	if preflight && h.passPreflight(w, r) {
		return
	}
	m := h.m
	v := m.core.Decide(r.Context(), r)
	if !m.answer(w, r, &v) {
		return
	}
	if m.after == nil || !v.Counted() {
		h.Serve(w, r)
	} else {
		h.serveCharged(w, r, v.Key)
	}
	if preflight {
		h.preflights.Learn(r, door.AnswersPreflight(w.Header()))
	}
}

// passPreflight passes r, shaped as a preflight, on uncounted and reports true when it is taken
// for one (see door.Memory.Pass). With layers charged afterwards, r goes with a charge slot,
// closed: Enter opens it if it counts r (one passed on to learn what next does, decided when
// next writes), and charges it once next has returned, so that Charge reports false for a
// preflight that goes free.
func (h *limitHandler) passPreflight(w http.ResponseWriter, r *http.Request) bool {
	if h.m.after == nil {
		return h.preflights.Pass(h, w, r)
	}
	slot := newChargeSlot(r.Context())
	slot.take()
	return h.preflights.Pass(h, w, r.WithContext(context.WithValue(r.Context(), chargeKey{}, slot)))
}

// serveCharged passes r to next and charges the layers of the limiter charged afterwards what
// the handler reports with Charge, whatever becomes of the handler, a panic included.
func (h *limitHandler) serveCharged(w http.ResponseWriter, r *http.Request, key string) {
	slot := newChargeSlot(r.Context())
	r = r.WithContext(context.WithValue(r.Context(), chargeKey{}, slot))
	defer h.m.chargeAfter(r, key, slot)
	h.Serve(w, r)
}

// Serve passes r to next, watching the order of CORS middleware when r is cross-origin.
func (h *limitHandler) Serve(w http.ResponseWriter, r *http.Request) {
	if door.HasOrigin(r) {
		h.m.cors.serve(h.next, w, r, h.m.c.OnError)
		return
	}
	h.next.ServeHTTP(w, r)
}

// Enter implements door.Door: r is decided as any request, and once next has returned charged
// what its handler reported in the layers charged afterwards, in the slot passPreflight gave it.
func (h *limitHandler) Enter(w http.ResponseWriter, r *http.Request) (func(), bool) {
	v := h.m.core.Decide(r.Context(), r)
	if !h.m.answer(w, r, &v) {
		return nil, false
	}
	slot, _ := r.Context().Value(chargeKey{}).(*chargeSlot)
	if h.m.after == nil || !v.Counted() || slot == nil || !slot.open() {
		return nil, true
	}
	return func() { h.m.chargeAfter(r, v.Key, slot) }, true
}

// chargeAfter charges the layers of m's limiter that are charged afterwards what r's handler
// reported in slot.
func (m *Middleware) chargeAfter(r *http.Request, key string, slot *chargeSlot) {
	cost := slot.take()
	if cost <= 0 {
		return
	}
	// The request's context may have ended with the handler; what it cost is still owed.
	ctx := context.WithoutCancel(r.Context())
	if err := m.after.chargeAfter(ctx, key, cost, m.core.Now()); err != nil {
		m.core.Errored(r, err)
	}
}

// answer writes what v says of r, the rate-limit fields or the refusal, and reports whether r
// may reach next. A request admitted with no fields to write, the usual one, costs no call.
func (m *Middleware) answer(w http.ResponseWriter, r *http.Request, v *edge.Verdict) bool {
	if v.Outcome == edge.Admitted && m.fields.set == 0 {
		return true
	}
	return m.write(w, r, v)
}

// write is answer for a request that is not admitted, or whose rate-limit fields are on.
func (m *Middleware) write(w http.ResponseWriter, r *http.Request, v *edge.Verdict) bool {
	switch v.Outcome {
	case edge.Exempt, edge.FailedOpen:
		return true
	case edge.FailedClosed:
		status := http.StatusServiceUnavailable
		if v.Failure == edge.KeyFailed {
			status = http.StatusInternalServerError
		}
		m.emit.refuse(w, r, m.c.respond, Refusal{Status: status, RetryAfter: v.Wait()}, v.Now, nil)
		return false
	}
	var lines *header.Lines
	if m.fields.set != 0 {
		lines = new(header.Lines)
		hdr := w.Header()
		m.fields.write(hdr, v.Decision, lines)
		if v.Outcome != edge.Refused && door.HasOrigin(r) {
			m.exposeAllowed.expose(hdr, &lines.Few)
		}
	}
	if v.Outcome != edge.Refused {
		return true
	}
	f := Refusal{Status: http.StatusTooManyRequests, RetryAfter: v.Decision.RetryAfter}
	if m.c.respond != nil { // the default plain text names no policy
		f.Violated = m.fields.Violated(v.Decision)
	}
	m.emit.refuse(w, r, m.c.respond, f, v.Now, lines)
	return false
}
