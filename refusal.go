package retryafter

import (
	"net/http"
	"time"

	"github.com/retryafter/retryafter/internal/header"
)

// A Refusal describes a refused request to the [Responder] that answers it: 429 from the rate
// limiter, 503 from package overload's Concurrency at its limit, a [Maintenance] or a limiter
// that failed closed, 500 from a key function that failed. It is passed by value and holds no reference to
// the request.
type Refusal struct {
	// Status is the status code of the answer.
	Status int

	// RetryAfter is the wait that the response's Retry-After field states, in whole seconds,
	// or 0 when it has none (a request that can never be admitted, a failed key function).
	RetryAfter time.Duration

	// Type is the RFC 9457 problem type of the refusal, or "" for about:blank: the
	// [ProblemReducedCapacity] of a Concurrency at its limit.
	Type string

	// Violated names the policies a refusal of the rate limiter violated, as the RateLimit
	// fields name them, for the violated-policies of problem details
	// (draft-ietf-httpapi-ratelimit-headers-11 §5.1); nil for any other refusal.
	Violated []string
}

// A Responder writes the status line and body of a refusal. When it is called, Retry-After
// (when there is one) and Date are already set on w's header. A Responder must call
// w.WriteHeader(f.Status) and should write no body to a HEAD request.
//
// The default writes http.StatusText(f.Status) as text/plain, like [http.Error];
// [ProblemDetails.Respond] writes RFC 9457 problem objects to the clients that ask for them.
type Responder func(w http.ResponseWriter, r *http.Request, f Refusal)

const (
	plainText = "text/plain; charset=utf-8"
	noSniff   = "nosniff"
)

// writePlain writes the default refusal into h, w's header, taking its header values from l.
func writePlain(w http.ResponseWriter, h http.Header, r *http.Request, status int, l *header.Few) {
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

// Refuse answers r with the refusal f as the middleware answers its own: Date set to now,
// Retry-After to f.RetryAfter in delay-seconds, rounded up (none when it is 0 or
// rate.InfDuration), both named in Access-Control-Expose-Headers for a cross-origin request,
// then respond writes the status and body (nil: the default plain text). It is for a front door
// of one's own, such as package overload's Concurrency, so that its refusals read as the
// package's.
func Refuse(w http.ResponseWriter, r *http.Request, f Refusal, respond Responder, now time.Time) {
	refusals.refuse(w, r, respond, f, now, nil)
}

// refusals is the emitter of Refuse, shared: its Date, which changes once a second, is formatted
// once for all.
var refusals emitter
