package retryafter

import (
	"math"
	"net/http"
	"time"

	"golang.org/x/time/rate"

	"github.com/retryafter/retryafter/internal/door"
	"github.com/retryafter/retryafter/internal/header"
)

// An emitter writes refusals: the Retry-After and Date fields, then the responder's status and
// body. It keeps the last Date and HTTP-date it formatted, which change at most once a second.
// The zero value is ready to use; it is safe for concurrent use.
type emitter struct {
	date   header.DateCache
	until  header.DateCache
	expose exposeList // names a refusal exposes to cross-origin scripts; zero: Retry-After and Date
}

// setDelay sets Retry-After to wait in delay-seconds, rounded up and at least 1, and returns the
// seconds, taking its value from lines, when the fields are on, or from l. A wait of
// [rate.InfDuration] or more, which no client can honour, removes Retry-After instead and
// returns 0.
func setDelay(h http.Header, wait time.Duration, l *header.Few, lines *header.Lines) int64 {
	if wait >= rate.InfDuration {
		delete(h, header.RetryAfter)
		return 0
	}
	s := header.DelaySeconds(wait)
	if lines != nil {
		h[header.RetryAfter] = lines.Int(s) // 100 or more: in the one text of the fields' numbers
	} else {
		h[header.RetryAfter] = l.Int(s)
	}
	return s
}

// refuse answers r with f through respond (nil: the default plain text), after setting Date to
// now and Retry-After to f.RetryAfter (none when it is 0 or never), and, when r has an Origin,
// naming them in Access-Control-Expose-Headers; respond is told the wait that Retry-After
// states. It takes the header values from lines, those of the rate-limit fields, or, when
// lines is nil, from a header.Few, which holds them in a quarter of the bytes.
func (e *emitter) refuse(w http.ResponseWriter, r *http.Request, respond Responder, f Refusal, now time.Time, lines *header.Lines) {
	var l *header.Few
	if lines != nil {
		l = &lines.Few
	} else {
		l = new(header.Few)
	}
	h := w.Header()
	h[header.Date] = l.Line(e.date.Format(now))
	if door.HasOrigin(r) {
		e.exposeRefusal(h, l)
	}
	var secs int64
	if f.RetryAfter > 0 {
		secs = setDelay(h, f.RetryAfter, l, lines)
	} else {
		delete(h, header.RetryAfter)
	}
	lines.Done()
	f.RetryAfter = time.Duration(min(secs, math.MaxInt64/int64(time.Second))) * time.Second
	if respond != nil {
		respond(w, r, f)
		return
	}
	writePlain(w, h, r, f.Status, l)
}

// refuseUntil answers r with f through respond (nil: the default plain text), after setting
// Date to now and Retry-After to the HTTP-date until, rounded up to the whole second. The
// responder is told the wait that a client measuring the date against Date computes: never
// below until - now, and at least one second when until is after now.
func (e *emitter) refuseUntil(w http.ResponseWriter, r *http.Request, respond Responder, f Refusal, now, until time.Time) {
	l := new(header.Few)
	h := w.Header()
	h[header.Date] = l.Line(e.date.Format(now))
	if door.HasOrigin(r) {
		e.exposeRefusal(h, l)
	}
	t := header.RoundUpDate(until)
	h[header.RetryAfter] = l.Line(e.until.Format(t))
	f.RetryAfter = t.Sub(now.Truncate(time.Second))
	if respond != nil {
		respond(w, r, f)
		return
	}
	writePlain(w, h, r, f.Status, l)
}

// exposeRefusal names the refusal's fields in Access-Control-Expose-Headers, for a request with
// an Origin.
func (e *emitter) exposeRefusal(h http.Header, l *header.Few) {
	if e.expose.names != nil {
		e.expose.expose(h, l)
	} else {
		refusalExposed.expose(h, l)
	}
}
