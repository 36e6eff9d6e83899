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

const (
	plainText = "text/plain; charset=utf-8"
	noSniff   = "nosniff"
)

// writeRefusal is the default plain text as a [Responder], for responders that fall back to it
// (the middleware itself writes it through writePlain, sharing the refusal's header array).
func writeRefusal(w http.ResponseWriter, r *http.Request, status int, _ time.Duration) {
	writePlain(w, r, status, nil)
}

// writePlain writes the default refusal, taking its header values from f (nil: from a
// fieldLines of its own).
func writePlain(w http.ResponseWriter, r *http.Request, status int, f *fieldLines) {
	if f == nil {
		f = new(fieldLines)
	}
	h := w.Header()
	delete(h, "Content-Length")
	h[headerContentType] = f.line(plainText)
	h["X-Content-Type-Options"] = f.line(noSniff)
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

// A fieldLines hands out header values from one allocation. Each value is a []string of its
// own, as a header value set with [http.Header.Set] is, so that a handler or middleware may
// write to it without touching any other response; taking them from one array lets a refusal
// set all its fields for a single allocation. A nil *fieldLines allocates each value apart.
type fieldLines struct {
	buf [10]string
	n   int
}

// line returns the header value []string{v}.
func (f *fieldLines) line(v string) []string {
	if f == nil || f.n == len(f.buf) {
		return []string{v}
	}
	f.buf[f.n] = v
	l := f.buf[f.n : f.n+1 : f.n+1]
	f.n++
	return l
}

// An emitter writes the Retry-After and Date fields. It keeps the last Date and the last
// HTTP-date Retry-After it formatted, since they change at most once a second, and the
// delay-seconds of the first hour are formatted ahead, so that refusing a request formats
// nothing. It is safe for concurrent use.
type emitter struct {
	date   atomic.Pointer[dateLine]
	until  atomic.Pointer[dateLine]
	expose exposeList // names a refusal exposes to cross-origin scripts; zero: Retry-After and Date
}

type dateLine struct {
	unix  int64
	value string
}

// cachedSeconds is how many delay-seconds values are formatted ahead.
const cachedSeconds = 3600

// secondsText[n] is n in decimal, for 0 <= n <= cachedSeconds. It is never written after
// initialisation.
var secondsText = func() (text [cachedSeconds + 1]string) {
	for n := range text {
		text[n] = strconv.Itoa(n)
	}
	return text
}()

// decimal returns n >= 0 in decimal, from secondsText when it is there.
func decimal(n int64) string {
	if n <= cachedSeconds {
		return secondsText[n]
	}
	return strconv.FormatInt(n, 10)
}

// setDate sets Date to now, truncated to the second, in IMF-fixdate.
func (e *emitter) setDate(h http.Header, now time.Time, f *fieldLines) {
	unix := now.Unix()
	d := e.date.Load()
	if d == nil || d.unix != unix {
		d = &dateLine{unix: unix, value: now.UTC().Format(http.TimeFormat)}
		e.date.Store(d)
	}
	h[headerDate] = f.line(d.value)
}

// setDelay sets Retry-After to wait in delay-seconds, rounded up and at least 1, and returns the
// seconds. A wait of [rate.InfDuration] or more, which no client can honour, removes
// Retry-After instead and returns 0.
func (e *emitter) setDelay(h http.Header, wait time.Duration, f *fieldLines) int64 {
	if wait >= rate.InfDuration {
		delete(h, headerRetryAfter)
		return 0
	}
	s := delaySeconds(wait)
	h[headerRetryAfter] = f.line(decimal(s))
	return s
}

// setUntil sets Retry-After to the HTTP-date until, rounded up to the whole second, and returns
// that second.
func (e *emitter) setUntil(h http.Header, until time.Time, f *fieldLines) time.Time {
	t := retryAfterDate(until)
	unix := t.Unix()
	d := e.until.Load()
	if d == nil || d.unix != unix {
		d = &dateLine{unix: unix, value: t.Format(http.TimeFormat)}
		e.until.Store(d)
	}
	h[headerRetryAfter] = f.line(d.value)
	return t
}

// refuse answers r with status through respond (nil: the default plain text), after setting
// Date to now and Retry-After to wait (none when wait is 0 or never), and, when r has an Origin,
// naming them in Access-Control-Expose-Headers. It takes the header values from f, or from a
// fieldLines of its own when f is nil.
func (e *emitter) refuse(w http.ResponseWriter, r *http.Request, respond Responder, status int, now time.Time, wait time.Duration, f *fieldLines) {
	if f == nil {
		f = new(fieldLines)
	}
	h := w.Header()
	e.setDate(h, now, f)
	e.exposeRefusal(h, r, f)
	var secs int64
	if wait > 0 {
		secs = e.setDelay(h, wait, f)
	} else {
		delete(h, headerRetryAfter)
	}
	e.respond(w, r, respond, status, time.Duration(min(secs, math.MaxInt64/int64(time.Second)))*time.Second, f)
}

// refuseUntil answers r with status through respond (nil: the default plain text), after setting
// Date to now and Retry-After to the HTTP-date until, rounded up to the whole second. The
// responder is told the wait that a client measuring the date against Date computes: never below
// until - now, and at least one second when until is after now.
func (e *emitter) refuseUntil(w http.ResponseWriter, r *http.Request, respond Responder, status int, now, until time.Time) {
	f := new(fieldLines)
	h := w.Header()
	e.setDate(h, now, f)
	e.exposeRefusal(h, r, f)
	t := e.setUntil(h, until, f)
	e.respond(w, r, respond, status, t.Sub(now.Truncate(time.Second)), f)
}

// exposeRefusal names the refusal's fields in Access-Control-Expose-Headers when r has an Origin.
func (e *emitter) exposeRefusal(h http.Header, r *http.Request, f *fieldLines) {
	if !hasOrigin(r) {
		return
	}
	if e.expose.names != nil {
		e.expose.expose(h, f)
	} else {
		refusalExposed.expose(h, f)
	}
}

// respond calls respond, or writes the default plain text when it is nil.
func (e *emitter) respond(w http.ResponseWriter, r *http.Request, respond Responder, status int, retryAfter time.Duration, f *fieldLines) {
	if respond == nil {
		writePlain(w, r, status, f)
		return
	}
	respond(w, r, status, retryAfter)
}
