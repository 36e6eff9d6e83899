package retryafter

import (
	"math"
	"net/http"
	"time"

	"golang.org/x/time/rate"

	"github.com/retryafter/retryafter/internal/header"
)

// A Responder writes the status line and body of a refusal: 429 from the rate limiter, 503 from
// a [Maintenance] or from a limiter that failed closed, 500 from a key function that failed.
// When it is called, Retry-After (when there is one) and Date are already set on w's header;
// retryAfter is the wait that Retry-After states, in whole seconds, or 0 when none was sent.
// A Responder must call w.WriteHeader(status) and should write no body to a HEAD request.
//
// The default writes http.StatusText(status) as text/plain, like [http.Error];
// [ProblemDetails.Respond] writes RFC 9457 problem objects to the clients that ask for them.
type Responder func(w http.ResponseWriter, r *http.Request, status int, retryAfter time.Duration)

const (
	plainText = "text/plain; charset=utf-8"
	noSniff   = "nosniff"
)

// writeRefusal is the default plain text as a [Responder], for responders that fall back to it.
func writeRefusal(w http.ResponseWriter, r *http.Request, status int, _ time.Duration) {
	writePlain(w, r, status, nil)
}

// writePlain writes the default refusal, taking its header values from l (nil: from a Lines of
// its own).
func writePlain(w http.ResponseWriter, r *http.Request, status int, l *header.Lines) {
	if l == nil {
		l = new(header.Lines)
	}
	h := w.Header()
	delete(h, "Content-Length")
	h[header.ContentType] = l.Line(plainText)
	h["X-Content-Type-Options"] = l.Line(noSniff)
	w.WriteHeader(status)
	if r.Method != http.MethodHead {
		w.Write(refusalBody(status))
	}
}

// The default bodies, as bytes so that writing one to a ResponseWriter without a WriteString
// method does not allocate.
var (
	body429 = []byte("Too Many Requests\n")
	body500 = []byte("Internal Server Error\n")
	body503 = []byte("Service Unavailable\n")
)

// refusalBody returns the default body for status, without allocating for the usual ones. The
// caller must not modify it.
func refusalBody(status int) []byte {
	switch status {
	case http.StatusTooManyRequests:
		return body429
	case http.StatusServiceUnavailable:
		return body503
	case http.StatusInternalServerError:
		return body500
	}
	return []byte(http.StatusText(status) + "\n")
}

// An emitter writes refusals: the Retry-After and Date fields, then the responder's status and
// body. It keeps the last Date and HTTP-date it formatted, which change at most once a second.
// The zero value is ready to use; it is safe for concurrent use.
type emitter struct {
	date    header.DateCache
	until   header.DateCache
	expose  exposeList      // names a refusal exposes to cross-origin scripts; zero: Retry-After and Date
	problem *ProblemDetails // answers when the responder is nil, naming the violated policies
}

// setDelay sets Retry-After to wait in delay-seconds, rounded up and at least 1, and returns the
// seconds. A wait of [rate.InfDuration] or more, which no client can honour, removes
// Retry-After instead and returns 0.
func setDelay(h http.Header, wait time.Duration, l *header.Lines) int64 {
	if wait >= rate.InfDuration {
		delete(h, header.RetryAfter)
		return 0
	}
	s := header.DelaySeconds(wait)
	h[header.RetryAfter] = l.Int(s)
	return s
}

// refuse answers r with status through respond (nil: the default plain text), after setting
// Date to now and Retry-After to wait (none when wait is 0 or never), and, when r has an
// Origin, naming them in Access-Control-Expose-Headers. It takes the header values from l, or
// from a Lines of its own when l is nil.
func (e *emitter) refuse(w http.ResponseWriter, r *http.Request, respond Responder, status int, now time.Time, wait time.Duration, l *header.Lines) {
	e.refuseFor(w, r, respond, status, now, wait, l, nil)
}

// refuseFor is refuse for a refusal of the limiter's, which violated the named policies, for
// the problem details.
func (e *emitter) refuseFor(w http.ResponseWriter, r *http.Request, respond Responder, status int, now time.Time, wait time.Duration, l *header.Lines, violated []string) {
	if l == nil {
		l = new(header.Lines)
	}
	h := w.Header()
	h[header.Date] = l.Line(e.date.Format(now))
	e.exposeRefusal(h, r, l)
	var secs int64
	if wait > 0 {
		secs = setDelay(h, wait, l)
	} else {
		delete(h, header.RetryAfter)
	}
	l.Done()
	e.respond(w, r, respond, status, time.Duration(min(secs, math.MaxInt64/int64(time.Second)))*time.Second, l, violated)
}

// refuseUntil answers r with status through respond (nil: the default plain text), after
// setting Date to now and Retry-After to the HTTP-date until, rounded up to the whole second.
// The responder is told the wait that a client measuring the date against Date computes: never
// below until - now, and at least one second when until is after now.
func (e *emitter) refuseUntil(w http.ResponseWriter, r *http.Request, respond Responder, status int, now, until time.Time) {
	l := new(header.Lines)
	h := w.Header()
	h[header.Date] = l.Line(e.date.Format(now))
	e.exposeRefusal(h, r, l)
	t := header.RoundUpDate(until)
	h[header.RetryAfter] = l.Line(e.until.Format(t))
	e.respond(w, r, respond, status, t.Sub(now.Truncate(time.Second)), l, nil)
}

// exposeRefusal names the refusal's fields in Access-Control-Expose-Headers when r has an Origin.
func (e *emitter) exposeRefusal(h http.Header, r *http.Request, l *header.Lines) {
	if !hasOrigin(r) {
		return
	}
	if e.expose.names != nil {
		e.expose.expose(h, l)
	} else {
		refusalExposed.expose(h, l)
	}
}

// respond calls respond, or, when it is nil, writes e's problem details or the default plain
// text.
func (e *emitter) respond(w http.ResponseWriter, r *http.Request, respond Responder, status int, retryAfter time.Duration, l *header.Lines, violated []string) {
	switch {
	case respond != nil:
		respond(w, r, status, retryAfter)
	case e.problem != nil:
		e.problem.respond(w, r, status, retryAfter, violated)
	default:
		writePlain(w, r, status, l)
	}
}
