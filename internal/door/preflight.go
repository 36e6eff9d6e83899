// Package door holds what the front doors of retryafter share (the handlers of the root
// package's Middleware and Maintenance, and of package overload's Concurrency): the one rule
// for requests shaped as CORS preflights.
package door

import (
	"encoding/binary"
	"hash/maphash"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
)

// Names of the CORS fields, canonical so that reading them is a plain map lookup.
const (
	HeaderRequest      = "Access-Control-Request-Method"
	HeaderAllowMethods = "Access-Control-Allow-Methods"
	HeaderAllowHeaders = "Access-Control-Allow-Headers"
	HeaderOrigin       = "Origin"
)

// A request shaped as a CORS preflight (OPTIONS with Origin and Access-Control-Request-Method)
// is free when it is one: when CORS middleware answers it as its preflight. Whether it is, only
// the answer tells, and a limit is there to protect the handler, which must not run for a
// client more often than the limit admits. So each front door (the handler of a Middleware, of a
// Concurrency, of a Maintenance: a Door) learns what next does with such requests, by one
// rule, where to be decided is to be counted by the limiter, to take a slot, or to be refused
// while maintenance is on:
//
//   - One sent where next has answered a preflight as one (the same host, path and Origin) is
//     passed on uncounted.
//   - Until next has answered one other than as a preflight, one at a time of the others is
//     passed to next uncounted, and its answer looked at before its header goes out: a
//     preflight answer (Access-Control-Allow-Methods or Access-Control-Allow-Headers set, or
//     Vary naming Access-Control-Request-Method) goes out, and its host, path and Origin are
//     remembered; any other is decided first, as the request it is, and answered 429 (503) in
//     its place when the door refuses it. A Maintenance learns while it is off, so that next
//     need not run to show what it does once maintenance is on.
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
// handler runs once more than the limit admits (or beside the Max requests of a Concurrency,
// or once while maintenance is on), once for the life of the door. Behind a
// router with CORS middleware on some routes or origins only, a preflight to a route and origin
// not remembered is counted, and refused to a client over its limit, until one is admitted.
// The Origin is part of what is remembered because CORS middleware answers the preflights of
// the origins it allows and may pass others on to next. The routes remembered are a fixed
// number (answeredRoutes), so that no flood of routes grows the memory, and one is replaced
// only when next answers a preflight to another route as one: once next has answered one other
// than as a preflight, only an admitted request can do that.

// answeredRoutes is how many routes whose preflights next answers a Memory remembers.
const answeredRoutes = 64

// A Memory is what the handler a door wraps around next (a Middleware's, a Maintenance's, a
// Concurrency's) has learned of what next does with requests shaped as preflights: what every
// handler of the door shares, in Shared, where the routes next answered them to are kept under
// next's identity (see HandlerID). It is safe for concurrent use once Shared is set.
type Memory struct {
	*Shared
	Next uint64 // next's identity (HandlerID)
}

// Shared is what the handlers of one door share: whether a next has answered a request shaped
// as a preflight other than as one, after which none is passed on to learn, and the one being
// passed on so; and the routes each next answered preflights to, under its identity. So a
// framework that wraps the middleware anew for each request (echo's WrapMiddleware) passes one
// on, not each as the first its handler is ever sent, and remembers its routes; and the routes
// one next answers preflights to free no request to another, which may serve them as any
// other. Its zero value is ready to use, and it is safe for concurrent use.
type Shared struct {
	seedOnce sync.Once
	seed     maphash.Seed
	handled  atomic.Bool                   // a next has answered one other than as a preflight
	probing  atomic.Bool                   // one is passed on uncounted to learn what next does
	answered [answeredRoutes]atomic.Uint64 // hashes of nexts and routes answered as preflights, one a slot
}

// HandlerID returns what tells next apart from the other handlers of a door: a pointer's address,
// a function's code (the same for the handlers a framework makes per request from one function
// literal, as echo's WrapMiddleware does), or else its type.
func HandlerID(next http.Handler) uint64 {
	v := reflect.ValueOf(next)
	switch v.Kind() {
	case reflect.Func, reflect.Pointer, reflect.Map, reflect.Chan, reflect.UnsafePointer:
		return uint64(v.Pointer())
	}
	return uint64(reflect.ValueOf(v.Type()).Pointer())
}

// answers reports whether next is taken to answer r, shaped as a preflight, as CORS middleware
// does: next answered a preflight to its route as one.
func (p *Memory) answers(r *http.Request) bool {
	k := p.route(r)
	return p.answered[(k>>1)%answeredRoutes].Load() == k
}

// probe reports whether r, shaped as a preflight, is to be passed on uncounted to learn what
// next does with it: while next has answered none other than as a preflight, and no other is
// being passed on so. The caller that is told true calls probed when next has answered.
func (p *Memory) probe() bool {
	return !p.handled.Load() && p.probing.CompareAndSwap(false, true)
}

// probed ends what probe began.
func (p *Memory) probed() { p.probing.Store(false) }

// Learn records whether next answered r, shaped as a preflight, as a preflight.
func (p *Memory) Learn(r *http.Request, preflight bool) {
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
// empty slot. The path is the escaped one, which routers match (Go's ServeMux and chi send
// /api%2Fx and /api/x to handlers apart), so that a request to one is not taken for the other.
func (p *Memory) route(r *http.Request) uint64 {
	p.seedOnce.Do(func() { p.seed = maphash.MakeSeed() })
	var h maphash.Hash
	h.SetSeed(p.seed)
	var id [8]byte
	binary.LittleEndian.PutUint64(id[:], p.Next)
	h.Write(id[:])
	h.WriteString(r.Host)
	h.WriteByte(0)
	h.WriteString(r.URL.EscapedPath())
	h.WriteByte(0)
	h.WriteString(r.Header.Get(HeaderOrigin))
	return h.Sum64() | 1
}

// A Door is a middleware that limits what reaches next (the root package's Limit's and
// Maintenance's, package overload's Concurrency's), as the preflight learning sees it: one
// rule for requests shaped as preflights serves them all.
type Door interface {
	// Serve passes r to next.
	Serve(w http.ResponseWriter, r *http.Request)

	// Enter decides r as the request it is. If it admits r, it returns true and what to call
	// once next has returned (nil: nothing); otherwise it has answered r and returns false.
	Enter(w http.ResponseWriter, r *http.Request) (leave func(), ok bool)
}

// Pass passes r, shaped as a preflight, to d's next uncounted and reports true when it is taken
// for one: answered by CORS middleware before d, or sent where next is taken to answer
// preflights, or passed on to learn what next does. Otherwise it reports false, and d decides r
// first, as any request, then calls Learn if next ran.
func (p *Memory) Pass(d Door, w http.ResponseWriter, r *http.Request) bool {
	switch {
	case AnswersPreflight(w.Header()):
		d.Serve(w, r)
	case p.answers(r):
		p.serve(d, w, r)
	case p.probe():
		defer p.probed()
		p.serve(d, w, r)
	default:
		return false
	}
	return true
}

// serve passes r, shaped as a preflight, to d's next through a preflightWriter.
func (p *Memory) serve(d Door, w http.ResponseWriter, r *http.Request) {
	pw := &preflightWriter{ResponseWriter: w, d: d, p: p, r: r, saved: w.Header().Clone()}
	defer pw.left()
	d.Serve(pw, r)
	pw.check() // a handler that wrote nothing: net/http sends 200, which is no preflight answer
}

// A preflightWriter holds back the response to a preflight-shaped request until it shows what
// it is.
type preflightWriter struct {
	http.ResponseWriter
	d     Door
	p     *Memory
	r     *http.Request
	saved http.Header // the header before next: a refusal starts from it
	leave func()      // what d's Enter asked to call once next has returned
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
		answered := AnswersPreflight(w.ResponseWriter.Header())
		w.p.Learn(w.r, answered)
		if !answered && !w.admit() {
			w.state = preflightRefused
		}
	}
	return w.state == preflightPassing
}

// left calls what d's Enter asked to call once next has returned.
func (w *preflightWriter) left() {
	if w.leave != nil {
		w.leave()
	}
}

// AnswersPreflight reports whether h is the header of CORS middleware's answer to a preflight:
// it allows methods or headers, or varies by Access-Control-Request-Method, as go-chi/cors and
// rs/cors set on every preflight they answer, those they turn down included.
func AnswersPreflight(h http.Header) bool {
	_, methods := h[HeaderAllowMethods]
	_, headers := h[HeaderAllowHeaders]
	return methods || headers || ListHas(h["Vary"], HeaderRequest)
}

// admit decides the request as any other and reports whether its response may go out; if not,
// the door has answered it in its place, from the header as it was before next.
func (w *preflightWriter) admit() bool {
	h := w.ResponseWriter.Header()
	theirs := h.Clone()
	restore(h, w.saved)
	leave, ok := w.d.Enter(w.ResponseWriter, w.r)
	if ok {
		w.leave = leave
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

// IsPreflight reports whether r is a CORS preflight request: OPTIONS with an Origin and a
// non-empty Access-Control-Request-Method. A browser's preflight always names a method (Fetch,
// "CORS-preflight fetch"), and CORS middleware (go-chi/cors, rs/cors) takes an empty one for an
// ordinary OPTIONS and passes it on; so must the limiter, or one such request would teach it
// that the chain does not answer preflights.
func IsPreflight(r *http.Request) bool {
	if r.Method != http.MethodOptions {
		return false
	}
	_, origin := r.Header[HeaderOrigin]
	return origin && r.Header.Get(HeaderRequest) != ""
}

// HasOrigin reports whether r is a cross-origin request as a browser sends it.
func HasOrigin(r *http.Request) bool {
	_, ok := r.Header[HeaderOrigin]
	return ok
}

// ListHas reports whether the comma-separated lines of a list-valued field hold name,
// compared case-insensitively, without allocating.
func ListHas(lines []string, name string) bool {
	for _, line := range lines {
		for line != "" {
			var item string
			item, line, _ = strings.Cut(line, ",")
			if strings.EqualFold(strings.Trim(item, " \t"), name) {
				return true
			}
		}
	}
	return false
}
