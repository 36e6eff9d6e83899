// Package retryclient is the client side of Retry-After: a [Backoff] that turns a response into
// the wait before the next try, the server's when it said one, and a [Transport] that retries
// 429 and 503 responses (and GitHub's rate-limited 403), waiting as the Backoff says.
//
//	client := &http.Client{Transport: &retryclient.Transport{}}
//
// It reads Retry-After the way the server evidently meant it: both forms, all three HTTP-date
// formats, dates measured against the response's own Date so that clock skew cancels, and the
// forms real servers send that retryafter.ParseRetryAfter, the strict reader, refuses (a date in
// UTC, "1.5", a 0 that stands for less than a second). Without a usable Retry-After it reads the
// rate-limit reset fields (retry-after-ms, RateLimit, X-RateLimit-Reset, OpenAI's and Anthropic's
// resets) as the gateway package does. A value it cannot use gets the client's own backoff, never an immediate retry; a wait
// above the cap is not waited at all, and the response goes back to the caller at once.
package retryclient

import (
	"context"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"github.com/retryafter/retryafter/internal/header"
)

// Defaults of [Backoff] and [Transport].
const (
	defaultBackoffBase = 500 * time.Millisecond
	defaultBackoffMax  = 30 * time.Second
	defaultBackoffCap  = 5 * time.Minute
	defaultMaxAttempts = 4
	// maxDrain bounds how much of a discarded response body is read so that
	// its connection can be reused; a longer body is closed unread.
	maxDrain = 64 << 10
)

// Backoff turns a response and its attempt number into the wait before the
// next try.
//
// On a 429 Too Many Requests or a 503 Service Unavailable (or a 403 Forbidden
// that GitHub's API sends for a rate limit: with X-RateLimit-Remaining 0, or
// with Retry-After beside X-RateLimit-Remaining) with a usable Retry-After,
// the wait is the server's, plus a random jitter of up to
// [Backoff.Jitter], which only ever adds. Retry-After is read generously, as
// its sender evidently meant it:
//
//   - delay-seconds, also with a leading "+" or a decimal fraction ("1.5"),
//     which is rounded up to whole seconds;
//   - an HTTP-date in any of its three formats, also in zone UTC, +0000 or
//     -0000 (Go's time.RFC1123, which sethvargo/go-limiter sends) or with its
//     day name missing or misspelled, measured against the response's Date
//     (also read so) and read as the end of the second it names: see
//     [Backoff.ExactDates];
//   - a 0, or a date equal to Date, means a wait under a second, as a server
//     that truncates its waits sends it: one second.
//
// When Retry-After is missing or unusable, the first of these that says when
// gives the server's wait: Retry-After-Ms (Azure, OpenAI) or
// X-Ms-Retry-After-Ms (Azure), in milliseconds; the t (or w) of the RateLimit
// policies with no quota left, r (or a) 0 (the rate-limit drafts);
// RateLimit-Reset; OpenAI's X-RateLimit-Reset-Requests and -Tokens, Go
// durations ("6m0s"); Anthropic's Anthropic-RateLimit-*-Reset, RFC 3339
// instants measured against Date; X-RateLimit-Reset, in delay-seconds or as
// a Unix time (GitHub, ulule/limiter, Tyk) when the number is more than half
// the Unix time of Date (in 2026, 28 years as a delay), measured against Date
// like a date. Of an API's several limits, the longest reset of those with no
// quota left gives the wait, or the longest of all when none says so.
//
// Retry-After on other statuses, any other 403 included, is not honoured. Otherwise (no Retry-After,
// or one that is negative, in exponent or hex form, a list, several lines
// that disagree, a date already past, garbage; another status; or no
// response at all) the wait is the client's own exponential backoff with
// jitter: for attempt n it is drawn uniformly from [c/10, c], where
// c = min(Base·2^(n−1), Max). That fallback is never zero and never
// negative. Every wait, the server's included, is at most [Backoff.Cap]; a
// server's wait above it is reported by [Backoff.Delay].
//
// The zero value is ready to use with the defaults given for each field. A
// Backoff is safe for concurrent use if Rand and Now are; its fields must
// not change while it is in use.
type Backoff struct {
	// Base is the ceiling of the first fallback wait; each later attempt
	// doubles it up to Max. If zero or negative, the default is 500ms.
	Base time.Duration

	// Max caps the ceiling of the exponential fallback. If zero or negative,
	// the default is 30s.
	Max time.Duration

	// Cap caps every wait, so that a bogus date cannot hold a worker for
	// days. A server that asks for more is not retried early, into a refusal
	// it announced: [Backoff.Delay] reports a *[WaitTooLongError] and
	// [Transport] returns its response at once. If zero or negative, the
	// default is 5 minutes.
	Cap time.Duration

	// Jitter is the most random time added to the server's Retry-After, to
	// spread out clients told the same instant. It only ever adds. If zero
	// or negative, the default is 0: the server's wait exactly.
	Jitter time.Duration

	// Rand returns a number in [0, 1) that drives both jitters; a value
	// outside [0, 1] is clamped. If nil, the default is
	// [math/rand/v2.Float64].
	Rand func() float64

	// Now reads the local clock, which is needed only when a date or a
	// Unix time comes without a valid Date field. If nil, the default is
	// [time.Now].
	Now func() time.Time

	// ExactDates waits until the very instant a Retry-After date (or a Unix
	// time in whole seconds) names. If false, the default, a date is read as
	// the end of the second it names, one second later: most servers cut the
	// instant they mean to the second (sethvargo/go-limiter, ulule/limiter,
	// anything formatted with time.Format), and a client sent back at the
	// start of that second arrives early about half the time, to be refused.
	// Set it for servers known to round their dates up, as
	// retryafter.Maintenance does, to spare their clients that second.
	ExactDates bool
}

// Wait returns how long to wait before the try after attempt, the 1-based
// number of the try that received resp: the wait of [Backoff.Delay], at most
// Cap. resp may be nil (the try failed without a response); an attempt
// below 1 counts as 1. Wait does not read or close resp.Body. A nil *Backoff
// uses the defaults.
func (b *Backoff) Wait(resp *http.Response, attempt int) time.Duration {
	d, _ := b.Delay(resp, attempt)
	return min(d, b.limit())
}

// Delay returns how long to wait before the try after attempt, as [Backoff.Wait]
// does, unless the server asked for a wait above Cap: then it returns that
// wait, uncapped and without jitter, and a *[WaitTooLongError] that says so.
// Retrying within Cap would be refused, as the server announced, and waiting
// longer is what Cap forbids: such a response is for the caller, which is
// why [Transport] returns it at once. A caller handed a 429 or 503 by the
// Transport calls Delay on it to learn whether that is why.
func (b *Backoff) Delay(resp *http.Response, attempt int) (time.Duration, error) {
	var c Backoff
	if b != nil {
		c = *b
	}
	limit := c.limit()
	if resp != nil && header.IsRefusal(resp.StatusCode, resp.Header) {
		now := time.Now
		if c.Now != nil {
			now = c.Now
		}
		mode := header.Refusal
		if c.ExactDates {
			mode |= header.ExactDates
		}
		if r := header.ReadWait(resp.Header, now(), mode); r.OK {
			if r.Wait > limit {
				return r.Wait, &WaitTooLongError{Wait: r.Wait, Cap: limit, Field: r.Field}
			}
			d := r.Wait
			if c.Jitter > 0 {
				d = addSaturating(d, scale(c.Jitter, c.random()))
			}
			return min(d, limit), nil
		}
	}
	return min(c.fallback(attempt), limit), nil
}

// limit returns the cap in force; a nil *Backoff has the default.
func (b *Backoff) limit() time.Duration {
	if b == nil {
		return defaultBackoffCap
	}
	return orDefault(b.Cap, defaultBackoffCap)
}

// A WaitTooLongError reports a response whose server asked for a wait above
// [Backoff.Cap]; [Backoff.Delay] returns it.
type WaitTooLongError struct {
	// Wait is the server's wait, as read from Field.
	Wait time.Duration

	// Cap is the cap it exceeds.
	Cap time.Duration

	// Field is the canonical name of the response's field that said so:
	// "Retry-After", or one of the reset fields that [Backoff] reads, as
	// "X-Ratelimit-Reset-Requests" or "Anthropic-Ratelimit-Tokens-Reset".
	Field string
}

// Error returns a sentence that names the field, the wait and the cap.
func (e *WaitTooLongError) Error() string {
	return "retryclient: " + e.Field + " asks for a wait of " + e.Wait.String() +
		", above the cap of " + e.Cap.String()
}

// fallback returns the client's own wait for attempt: uniform in
// [ceil/10, ceil] with ceil = min(Base·2^(attempt−1), Max), at least 1ns.
func (b Backoff) fallback(attempt int) time.Duration {
	base := orDefault(b.Base, defaultBackoffBase)
	ceil := orDefault(b.Max, defaultBackoffMax)
	// Double base attempt−1 times, stopping once it reaches Max.
	for n := 1; n < attempt && base < ceil; n++ {
		base = addSaturating(base, base)
	}
	ceil = min(base, ceil)
	floor := max(ceil/10, 1)
	return floor + scale(ceil-floor, b.random())
}

// random returns Rand() clamped to [0, 1].
func (b Backoff) random() float64 {
	r := rand.Float64
	if b.Rand != nil {
		r = b.Rand
	}
	x := r()
	switch {
	case x > 1:
		return 1
	case x >= 0:
		return x
	default: // negative or NaN
		return 0
	}
}

// scale returns span·r for r in [0, 1], never beyond span.
func scale(span time.Duration, r float64) time.Duration {
	x := float64(span) * r
	switch {
	case x >= float64(span):
		return span
	case x > 0:
		return time.Duration(x)
	}
	return 0
}

func addSaturating(a, b time.Duration) time.Duration {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// Transport is an [http.RoundTripper] that retries a request answered 429
// Too Many Requests or 503 Service Unavailable, or 403 Forbidden for GitHub's
// rate limits (see [Backoff]), waiting as [Backoff] says:
// the server's Retry-After when it has a usable one, else its own backoff.
// Use it as the Transport of an [http.Client].
//
// A request is retried only when it can be sent again safely: its body must
// be replayable (no body, [http.NoBody], or a GetBody function, which
// [http.NewRequest] sets for in-memory bodies), and Retryable must allow it.
// Transport never modifies the caller's request: each retry sends a clone.
// Each discarded response body is drained so that its connection can be
// reused, during the wait and no longer than it, and at most 64 KiB of it,
// then closed: a body that trickles is closed under its reader when the wait
// ends (Base's bodies must allow Close during a Read, as net/http's do).
// Errors from Base are returned as they are, without retrying.
//
// A 429 or 503 whose server asks for a wait above [Backoff.Cap] is returned
// at once, after that one try: retrying sooner would be refused, as the
// server announced. [Backoff.Delay] on it returns a *[WaitTooLongError].
//
// Waits respect the request's context. If the context is done during a
// wait, RoundTrip returns the context's error. If the context has a
// deadline that would pass before the wait ends, RoundTrip returns the last
// response at once rather than sleep into a failure.
//
// The zero value is ready to use with the defaults given for each field. A
// Transport is safe for concurrent use if its Base, Backoff and hooks are;
// its fields must not change once it is in use.
type Transport struct {
	// Base sends each attempt. If nil, the default is
	// [http.DefaultTransport].
	Base http.RoundTripper

	// Backoff chooses each wait. If nil, the default is a zero Backoff,
	// that is, all of its defaults.
	Backoff *Backoff

	// MaxAttempts is the most tries of one request, the first included; 1
	// turns retrying off. If zero or negative, the default is 4.
	MaxAttempts int

	// Retryable reports whether a request may be sent more than once. If
	// nil, the default allows the idempotent methods GET, HEAD, OPTIONS,
	// PUT and DELETE, and any request carrying a non-empty Idempotency-Key
	// header. A request whose body cannot be replayed is never retried,
	// whatever Retryable says.
	Retryable func(*http.Request) bool

	// OnRetry, if non-nil, is called before each wait with the response
	// about to be discarded, the 1-based number of the try that received
	// it, and the wait chosen. It must not read or close resp.Body. The
	// default is nil.
	OnRetry func(resp *http.Response, attempt int, wait time.Duration)
}

// RoundTrip implements [http.RoundTripper]. It sends req through Base and
// retries it as described on [Transport]. It returns either the last
// response received, whose body the caller must close as usual, or an
// error.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	base, maxAttempts := t.base(), t.maxAttempts()
	if maxAttempts == 1 || !replayable(req) || !t.retryable(req) {
		return base.RoundTrip(req)
	}

	ctx := req.Context()
	try := req
	for attempt := 1; ; attempt++ {
		resp, err := base.RoundTrip(try)
		if err != nil || resp == nil || attempt >= maxAttempts || !header.IsRefusal(resp.StatusCode, resp.Header) {
			return resp, err
		}
		wait, next, ok := t.nextTry(req, resp, attempt)
		if !ok {
			return resp, nil
		}
		if t.OnRetry != nil {
			t.OnRetry(resp, attempt, wait)
		}
		if err := pause(ctx, wait, resp.Body, next); err != nil {
			return nil, err
		}
		try = next
	}
}

// nextTry returns the wait before retrying req after its answer resp, the try numbered
// attempt, and the clone of req to send then. It returns false when resp is to be returned
// instead: the server asks for a wait above the cap, the wait would outlast the deadline of
// req's context, or req's body cannot be had again. The clone is made before resp is
// discarded, so that a body that cannot be had again still leaves an answer to return.
func (t *Transport) nextTry(req *http.Request, resp *http.Response, attempt int) (time.Duration, *http.Request, bool) {
	wait, err := t.Backoff.Delay(resp, attempt)
	if err != nil { // a wait above the cap: the caller's to know
		return 0, nil, false
	}
	if deadline, ok := req.Context().Deadline(); ok && !time.Now().Add(wait).Before(deadline) {
		return 0, nil, false
	}
	next := req.Clone(req.Context())
	if req.Body != nil && req.Body != http.NoBody {
		body, err := req.GetBody()
		if err != nil {
			return 0, nil, false
		}
		next.Body = body
	}
	return wait, next, true
}

// pause waits wait while body, the discarded response's, drains. When ctx is done first, it
// closes the body of next, the try that will not be sent, and returns ctx's error.
func pause(ctx context.Context, wait time.Duration, body io.ReadCloser, next *http.Request) error {
	stop := discard(body)
	timer := time.NewTimer(wait)
	select {
	case <-ctx.Done():
		timer.Stop()
		stop()
		if next.Body != nil {
			next.Body.Close()
		}
		return ctx.Err()
	case <-timer.C:
	}
	stop()
	return nil
}

// CloseIdleConnections closes the idle connections of Base, when it has
// such a method (as [http.Transport] does), so that
// [http.Client.CloseIdleConnections] reaches it.
func (t *Transport) CloseIdleConnections() {
	if c, ok := t.base().(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// maxAttempts returns MaxAttempts, or its default when it is zero or negative.
func (t *Transport) maxAttempts() int {
	if t.MaxAttempts <= 0 {
		return defaultMaxAttempts
	}
	return t.MaxAttempts
}

// base returns Base, or [http.DefaultTransport] when it is nil.
func (t *Transport) base() http.RoundTripper {
	if t.Base == nil {
		return http.DefaultTransport
	}
	return t.Base
}

func (t *Transport) retryable(req *http.Request) bool {
	if t.Retryable != nil {
		return t.Retryable(req)
	}
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodPut, http.MethodDelete:
		return true
	}
	return req.Header.Get("Idempotency-Key") != ""
}

// replayable reports whether req's body can be sent again.
func replayable(req *http.Request) bool {
	return req.Body == nil || req.Body == http.NoBody || req.GetBody != nil
}

// discard reads what is left of body, up to maxDrain bytes, and closes it,
// on a goroutine of its own so that a body that trickles holds nobody. The
// function it returns ends the drain: if it has not finished, body is closed
// under its reader, whose Read then fails and lets the goroutine end.
func discard(body io.ReadCloser) (stop func()) {
	if body == nil || body == http.NoBody {
		return func() {}
	}
	var once sync.Once
	closeBody := func() { once.Do(func() { body.Close() }) }
	done := make(chan struct{})
	go func() {
		defer close(done)
		io.CopyN(io.Discard, body, maxDrain)
		closeBody()
	}()
	return func() {
		select {
		case <-done:
		default:
			closeBody()
		}
	}
}
