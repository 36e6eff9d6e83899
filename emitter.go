package retryafter

import (
	"math"
	"net/http"
	"time"

	"golang.org/x/time/rate"

	"github.com/retryafter/retryafter/internal/door"
	"github.com/retryafter/retryafter/internal/header"
)

// values hands out the header values of one response: a *header.Lines, or a *header.Few for a
// refusal that formats no text.
type values interface {
	Line(v string) []string
	Int(n int64) []string
}

// An emitter writes refusals: the Retry-After and Date fields, then the responder's status and
// body. It keeps the last Date and HTTP-date it formatted, which change at most once a second.
// The zero value is ready to use; it is safe for concurrent use.
type emitter struct {
	date   header.DateCache
	until  header.DateCache
	expose exposeList // names a refusal exposes to cross-origin scripts; zero: Retry-After and Date
}

// setDelay sets Retry-After to wait in delay-seconds, rounded up and at least 1, and returns the
// seconds. A wait of [rate.InfDuration] or more, which no client can honour, removes
// Retry-After instead and returns 0.
func setDelay(h http.Header, wait time.Duration, l values) int64 {
	if wait >= rate.InfDuration {
		delete(h, header.RetryAfter)
		return 0
	}
	s := header.DelaySeconds(wait)
	h[header.RetryAfter] = l.Int(s)
	return s
}

// refuse answers r with f through respond (nil: the default plain text), after setting Date to
// now and Retry-After to f.RetryAfter (none when it is 0 or never), and, when r has an Origin,
// naming them in Access-Control-Expose-Headers; respond is told the wait that Retry-After
// states. It takes the header values from lines, those of the rate-limit fields, or, when
// lines is nil, from a header.Few, which holds those of a refusal in a quarter of the bytes.
func (e *emitter) refuse(w http.ResponseWriter, r *http.Request, respond Responder, f Refusal, now time.Time, lines *header.Lines) {
	var l values = lines
	if lines == nil {
		l = new(header.Few)
	}
	h := w.Header()
	h[header.Date] = l.Line(e.date.Format(now))
	e.exposeRefusal(h, r, l)
	var secs int64
	if f.RetryAfter > 0 {
		secs = setDelay(h, f.RetryAfter, l)
	} else {
		delete(h, header.RetryAfter)
	}
	lines.Done()
	f.RetryAfter = time.Duration(min(secs, math.MaxInt64/int64(time.Second))) * time.Second
	e.respond(w, r, respond, f, l)
}

// refuseUntil answers r with f through respond (nil: the default plain text), after setting
// Date to now and Retry-After to the HTTP-date until, rounded up to the whole second. The
// responder is told the wait that a client measuring the date against Date computes: never
// below until - now, and at least one second when until is after now.
func (e *emitter) refuseUntil(w http.ResponseWriter, r *http.Request, respond Responder, f Refusal, now, until time.Time) {
	l := new(header.Few)
	h := w.Header()
	h[header.Date] = l.Line(e.date.Format(now))
	e.exposeRefusal(h, r, l)
	t := header.RoundUpDate(until)
	h[header.RetryAfter] = l.Line(e.until.Format(t))
	f.RetryAfter = t.Sub(now.Truncate(time.Second))
	e.respond(w, r, respond, f, l)
}

// exposeRefusal names the refusal's fields in Access-Control-Expose-Headers when r has an Origin.
func (e *emitter) exposeRefusal(h http.Header, r *http.Request, l values) {
	if !door.HasOrigin(r) {
		return
	}
	if e.expose.names != nil {
		e.expose.expose(h, l)
	} else {
		refusalExposed.expose(h, l)
	}
}

// respond calls respond, or, when it is nil, writes the default plain text from l.
func (e *emitter) respond(w http.ResponseWriter, r *http.Request, respond Responder, f Refusal, l values) {
	if respond != nil {
		respond(w, r, f)
		return
	}
	writePlain(w, r, f.Status, l)
}
