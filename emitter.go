package retryafter

import (
	"math"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

// A Responder writes the status line and body of a response the package refuses a request with:
// 429 from the rate limiter, 503 from maintenance or from a limiter that failed closed, 500 from
// a key function that failed. When it is called, Retry-After (when there is one) and Date are
// already set on w's header; retryAfter is the wait that Retry-After states, in whole seconds,
// or 0 when none was sent. A Responder must call w.WriteHeader(status) and should write no
// body to a HEAD request.
//
// The default writes http.StatusText(status) as text/plain, like [http.Error];
// [ProblemDetails.Respond] writes RFC 9457 problem objects to the clients that ask for them.
type Responder func(w http.ResponseWriter, r *http.Request, status int, retryAfter time.Duration)

// Header names, canonical so that setting them skips canonicalisation.
const (
	headerRetryAfter  = "Retry-After"
	headerDate        = "Date"
	headerContentType = "Content-Type"
)

var (
	plainText = []string{"text/plain; charset=utf-8"}
	noSniff   = []string{"nosniff"}
)

// writeRefusal is the default [Responder].
func writeRefusal(w http.ResponseWriter, r *http.Request, status int, _ time.Duration) {
	h := w.Header()
	delete(h, "Content-Length")
	h[headerContentType] = plainText
	h["X-Content-Type-Options"] = noSniff
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

// refusalBody returns the default body for status without allocating for the usual ones. The
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

// delaySeconds returns wait rounded UP to whole seconds and at least 1: the delay-seconds a
// response states so that a client that waits exactly that long is not early. A wait too long
// for a Duration saturates.
func delaySeconds(wait time.Duration) int64 {
	if wait <= 0 {
		return 1
	}
	s := int64(wait / time.Second)
	if wait%time.Second != 0 {
		s++
	}
	return s
}

// retryAfterDate returns until rounded UP to the next whole second, in UTC: an IMF-fixdate
// carries no fraction, and a truncated date would send a client back early.
func retryAfterDate(until time.Time) time.Time {
	t := until.Truncate(time.Second)
	if t.Before(until) {
		t = t.Add(time.Second)
	}
	return t.UTC()
}

// An emitter writes the Retry-After and Date fields. It keeps the last Date line and the last
// HTTP-date Retry-After line it formatted, since they change at most once a second, and the
// delay-seconds lines of the first hour, so that refusing a request does not allocate for its
// headers. It is safe for concurrent use.
//
// The header values it sets are shared between responses: they are never written to by this
// package, and appending to them copies (their capacity is their length).
type emitter struct {
	date   atomic.Pointer[dateLine]
	until  atomic.Pointer[dateLine]
	expose exposeList // names a refusal exposes to cross-origin scripts; zero: Retry-After and Date
}

type dateLine struct {
	unix  int64
	value []string
}

// cachedSeconds is how many delay-seconds lines are formatted ahead.
const cachedSeconds = 3600

// secondsLines[n] is the header value []string{"n"}, for 1 <= n <= cachedSeconds.
var secondsLines = func() (lines [cachedSeconds + 1][]string) {
	for n := range lines {
		lines[n] = []string{strconv.Itoa(n)}
	}
	return lines
}()

// setDate sets Date to now, truncated to the second, in IMF-fixdate.
func (e *emitter) setDate(h http.Header, now time.Time) {
	unix := now.Unix()
	if d := e.date.Load(); d != nil && d.unix == unix {
		h[headerDate] = d.value
		return
	}
	d := &dateLine{unix: unix, value: []string{now.UTC().Format(http.TimeFormat)}}
	e.date.Store(d)
	h[headerDate] = d.value
}

// setDelay sets Retry-After to wait in delay-seconds, rounded up and at least 1. A wait of
// [rate.InfDuration] or more, which no client can honour, removes Retry-After instead.
func (e *emitter) setDelay(h http.Header, wait time.Duration) int64 {
	if wait >= rate.InfDuration {
		delete(h, headerRetryAfter)
		return 0
	}
	s := delaySeconds(wait)
	if s <= cachedSeconds {
		h[headerRetryAfter] = secondsLines[s]
	} else {
		h[headerRetryAfter] = []string{strconv.FormatInt(s, 10)}
	}
	return s
}

// setUntil sets Retry-After to the HTTP-date until, rounded up to the whole second, and returns
// that second.
func (e *emitter) setUntil(h http.Header, until time.Time) time.Time {
	t := retryAfterDate(until)
	unix := t.Unix()
	if d := e.until.Load(); d != nil && d.unix == unix {
		h[headerRetryAfter] = d.value
		return t
	}
	d := &dateLine{unix: unix, value: []string{t.Format(http.TimeFormat)}}
	e.until.Store(d)
	h[headerRetryAfter] = d.value
	return t
}

// refuse answers r with status through respond, after setting Date to now and Retry-After to
// wait (none when wait is 0 or never), and, when r has an Origin, naming them in
// Access-Control-Expose-Headers.
func (e *emitter) refuse(w http.ResponseWriter, r *http.Request, respond Responder, status int, now time.Time, wait time.Duration) {
	h := w.Header()
	e.setDate(h, now)
	if hasOrigin(r) {
		if e.expose.names != nil {
			e.expose.expose(h)
		} else {
			refusalExposed.expose(h)
		}
	}
	var secs int64
	if wait > 0 {
		secs = e.setDelay(h, wait)
	} else {
		delete(h, headerRetryAfter)
	}
	respond(w, r, status, time.Duration(min(secs, math.MaxInt64/int64(time.Second)))*time.Second)
}

// refuseUntil answers r with status through respond, after setting Date to now and Retry-After
// to the HTTP-date until, rounded up to the whole second. The responder is told the wait that a
// client measuring the date against Date computes: never below until - now, and at least one
// second when until is after now.
func (e *emitter) refuseUntil(w http.ResponseWriter, r *http.Request, respond Responder, status int, now, until time.Time) {
	h := w.Header()
	e.setDate(h, now)
	t := e.setUntil(h, until)
	respond(w, r, status, t.Sub(now.Truncate(time.Second)))
}
