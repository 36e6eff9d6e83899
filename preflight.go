package retryafter

import (
	"hash/maphash"
	"net/http"
	"sync/atomic"
)

// A request shaped as a CORS preflight (OPTIONS with Origin and Access-Control-Request-Method)
// is free when it is one: when CORS middleware answers it as its preflight. Whether it is, only
// the answer tells, and the limit is there to protect the handler, which must not run for a
// client more often than the limit admits. So the handler a Middleware wraps around next learns
// what next does with such requests:
//
//   - One sent where next has answered a preflight as one (the same host, path and Origin) is
//     passed on uncounted.
//   - Until next has answered one other than as a preflight, one at a time of the others is
//     passed to next uncounted, and its answer looked at before its header goes out: a
//     preflight answer (Access-Control-Allow-Methods or Access-Control-Allow-Headers set, or
//     Vary naming Access-Control-Request-Method) goes out, and its host, path and Origin are
//     remembered; any other is decided first, as the request it is, and answered 429 in its
//     place when the limiter refuses it.
//   - Any other is decided first, as any request, and reaches next only when admitted. When
//     next then answers it as a preflight, its host, path and Origin are remembered.
//
// A request that CORS middleware before the limiter answered and passes on (go-chi/cors's
// OptionsPassthrough), its preflight answer set already, is passed on uncounted.
//
// So behind CORS middleware on every route, on either side of the limiter, no preflight is
// counted or refused once its route and origin are remembered; before, one at a time is passed
// on uncounted, and one sent at the same moment to a route and origin not yet remembered is
// counted. Behind a handler that serves every method and no CORS middleware, a request shaped
// as a preflight reaches the handler only when admitted, except the first such request next is
// ever sent, which reaches it before it is decided: if its client is over its limit, the
// handler runs once more than the limit admits, once for the life of the middleware. Behind a
// router with CORS middleware on some routes or origins only, a preflight to a route and origin
// not remembered is counted, and refused to a client over its limit, until one is admitted.
// The Origin is part of what is remembered because CORS middleware answers the preflights of
// the origins it allows and may pass others on to next. The routes remembered are a fixed
// number (answeredRoutes), so that no flood of routes grows the memory, and one is replaced
// only when next answers a preflight to another route as one: once next has answered one other
// than as a preflight, only an admitted request can do that.

// answeredRoutes is how many routes whose preflights next answers a preflightMemory remembers.
const answeredRoutes = 64

// A preflightMemory is what the handler of a Middleware has learned of what next does with
// requests shaped as preflights. It is safe for concurrent use; its seed is set before use.
type preflightMemory struct {
	seed     maphash.Seed
	handled  atomic.Bool                   // next has answered one other than as a preflight
	probing  atomic.Bool                   // one is passed on uncounted to learn what next does
	answered [answeredRoutes]atomic.Uint64 // hashes of routes next answered preflights to, one a slot
}

// answers reports whether next is taken to answer r, shaped as a preflight, as CORS middleware
// does: next answered a preflight to its route as one.
func (p *preflightMemory) answers(r *http.Request) bool {
	k := p.route(r)
	return p.answered[(k>>1)%answeredRoutes].Load() == k
}

// probe reports whether r, shaped as a preflight, is to be passed on uncounted to learn what
// next does with it: while next has answered none other than as a preflight, and no other is
// being passed on so. The caller that is told true calls probed when next has answered.
func (p *preflightMemory) probe() bool {
	return !p.handled.Load() && p.probing.CompareAndSwap(false, true)
}

// probed ends what probe began.
func (p *preflightMemory) probed() { p.probing.Store(false) }

// learn records whether next answered r, shaped as a preflight, as a preflight.
func (p *preflightMemory) learn(r *http.Request, preflight bool) {
	k := p.route(r)
	slot := &p.answered[(k>>1)%answeredRoutes]
	if preflight {
		slot.Store(k)
		return
	}
	p.handled.Store(true)
	slot.CompareAndSwap(k, 0)
}

// route returns the hash of r's route, its host and path, and its Origin: never 0, which is an
// empty slot.
func (p *preflightMemory) route(r *http.Request) uint64 {
	var h maphash.Hash
	h.SetSeed(p.seed)
	h.WriteString(r.Host)
	h.WriteByte(0)
	h.WriteString(r.URL.Path)
	h.WriteByte(0)
	h.WriteString(r.Header.Get(headerOrigin))
	return h.Sum64() | 1
}

// passPreflight passes r, shaped as a preflight, to next uncounted and reports true when it is
// taken for one: answered by CORS middleware before the limiter, or sent where next is taken to
// answer preflights. Otherwise it reports false, and r is to be decided first.
func (h *limitHandler) passPreflight(w http.ResponseWriter, r *http.Request) bool {
	switch {
	case answersPreflight(w.Header()):
		h.serve(w, r)
	case h.preflights.answers(r):
		h.servePreflight(w, r)
	case h.preflights.probe():
		defer h.preflights.probed()
		h.servePreflight(w, r)
	default:
		return false
	}
	return true
}

// servePreflight passes r, shaped as a preflight, to next through a preflightWriter.
func (h *limitHandler) servePreflight(w http.ResponseWriter, r *http.Request) {
	pw := &preflightWriter{ResponseWriter: w, h: h, r: r, saved: w.Header().Clone()}
	h.serve(pw, r)
	pw.check() // a handler that wrote nothing: net/http sends 200, which is no preflight answer
}

// A preflightWriter holds back the response to a preflight-shaped request until it shows what
// it is.
type preflightWriter struct {
	http.ResponseWriter
	h     *limitHandler
	r     *http.Request
	saved http.Header // the header before next: a refusal starts from it
	state uint8       // 0 undecided, passing, or refused
}

const (
	preflightPassing = 1 + iota
	preflightRefused
)

// check decides, the first time, whether the response may go out, and reports it.
func (w *preflightWriter) check() bool {
	if w.state == 0 {
		w.state = preflightPassing
		answered := answersPreflight(w.ResponseWriter.Header())
		w.h.preflights.learn(w.r, answered)
		if !answered && !w.admit() {
			w.state = preflightRefused
		}
	}
	return w.state == preflightPassing
}

// answersPreflight reports whether h is the header of CORS middleware's answer to a preflight:
// it allows methods or headers, or varies by Access-Control-Request-Method, as go-chi/cors and
// rs/cors set on every preflight they answer, those they turn down included.
func answersPreflight(h http.Header) bool {
	_, methods := h[headerAllowMethods]
	_, headers := h[headerAllowHeaders]
	return methods || headers || listHas(h["Vary"], headerRequest)
}

// admit decides the request as any other and reports whether its response may go out; if not,
// it has answered 429 (or 500, 503) in its place, from the header as it was before next.
func (w *preflightWriter) admit() bool {
	m, rw, r := w.h.m, w.ResponseWriter, w.r
	h := rw.Header()
	theirs := h.Clone()
	restore(h, w.saved)
	var ok bool
	if key, passed := m.key(rw, r); passed {
		ok = m.decide(rw, r, key)
	} else {
		ok = m.c.failOpen
	}
	if ok {
		for k, v := range theirs {
			h[k] = v
		}
	}
	return ok
}

// restore makes h what saved is.
func restore(h, saved http.Header) {
	for k := range h {
		delete(h, k)
	}
	for k, v := range saved {
		h[k] = v
	}
}

func (w *preflightWriter) WriteHeader(code int) {
	if w.check() {
		w.ResponseWriter.WriteHeader(code)
	}
}

func (w *preflightWriter) Write(b []byte) (int, error) {
	if !w.check() {
		return len(b), nil // the refusal is written: what next writes goes nowhere
	}
	return w.ResponseWriter.Write(b)
}

// Flush implements [http.Flusher].
func (w *preflightWriter) Flush() {
	if w.check() {
		http.NewResponseController(w.ResponseWriter).Flush()
	}
}

// Unwrap returns the ResponseWriter underneath, for [http.ResponseController].
func (w *preflightWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
