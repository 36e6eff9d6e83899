package retryafter

import (
	"net/http"
)

// A request shaped as a CORS preflight (OPTIONS with Origin and Access-Control-Request-Method)
// is free when it is one: when CORS middleware answers it, mounted after the limiter, as its
// preflight. Whether it is, only the answer tells, so the middleware passes it to next and looks
// at the response before its header goes out: a preflight answer (Access-Control-Allow-Methods
// or Access-Control-Allow-Headers set) goes out uncounted; any other is decided first, as the
// request it is, and answered 429 in its place when the limiter refuses it. So an OPTIONS that
// no CORS middleware answers, behind a handler that serves every method, is counted and limited
// like a GET. (Its handler has then run; it is its answer that the client does not get.)

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
		if !answersPreflight(w.ResponseWriter.Header()) && !w.admit() {
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
