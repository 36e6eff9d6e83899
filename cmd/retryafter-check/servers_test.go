package main

import (
	"io"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/retryafter/retryafter"
)

// The servers the probe is tested against, each answering the way a real system does. They
// read time.Now, which inside a testing/synctest bubble is the bubble's clock, so they must be
// built inside the bubble. Each serves one client, the probe.

// hello is the handler behind every limiter.
func hello() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "hello\n")
	})
}

// withCORS is CORS middleware mounted outside the limiter, as deployments do: it allows every
// origin and exposes the fields in expose ("" exposes none), as rs/cors or go-chi/cors do when
// so configured.
func withCORS(expose string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Origin") != "" {
			w.Header().Set("Access-Control-Allow-Origin", "*")
			if expose != "" {
				w.Header().Set("Access-Control-Expose-Headers", expose)
			}
		}
		next.ServeHTTP(w, r)
	})
}

// ours is this package's middleware, 1 request a second with bursts of 5, with the RateLimit
// fields, behind CORS middleware that exposes nothing itself.
func ours() http.Handler {
	return withCORS("", retryafter.Limit(1, 5, retryafter.WithRateLimitFields(""))(hello()))
}

// oursGETOnly limits GET only, as a router does whose limiter is mounted on the GET route
// alone: HEAD reaches the handler unlimited.
func oursGETOnly() http.Handler {
	limited := retryafter.Limit(1, 5)(hello())
	return withCORS("", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			limited.ServeHTTP(w, r)
			return
		}
		hello().ServeHTTP(w, r)
	}))
}

// maintenance is this package's Maintenance, on from now for end, announced in the HTTP-date
// form when httpDate is set. Unless overrun is set, the operator stops it at the announced end.
// The server's clock is skew off the bubble's.
func maintenance(httpDate bool, end, skew time.Duration, overrun bool) http.Handler {
	m := &retryafter.Maintenance{HTTPDate: httpDate}
	if skew != 0 {
		m.Now = func() time.Time { return time.Now().Add(skew) }
	}
	m.Start(time.Now().Add(skew + end))
	if !overrun {
		time.AfterFunc(end, m.Stop)
	}
	return withCORS("", m.Handler(hello()))
}

// maintenanceUnknownEnd is a Maintenance whose end is not known: Retry-After is its Wait.
func maintenanceUnknownEnd(wait time.Duration) http.Handler {
	m := &retryafter.Maintenance{Wait: wait}
	m.Start(time.Time{})
	return withCORS("", m.Handler(hello()))
}

// A slidingWindow counts as go-chi/httprate v0.16 does: limit requests per window, windows
// aligned to the limiter's creation, the rate estimated as the previous window's count,
// weighted by how much of it the sliding window still covers, plus the current one's, rounded;
// refused requests are not counted; Retry-After is the window's length in whole seconds,
// truncated (a window under a second sends 0).
type slidingWindow struct {
	limit  int
	window time.Duration
	offset time.Duration
	next   http.Handler

	mu     sync.Mutex
	counts map[time.Time]int
}

func newSlidingWindow(limit int, window time.Duration) *slidingWindow {
	start := time.Now().UTC()
	return &slidingWindow{limit: limit, window: window, offset: start.Sub(start.Truncate(window)),
		next: hello(), counts: make(map[time.Time]int)}
}

func (s *slidingWindow) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	now := time.Now().UTC()
	cur := now.Add(-s.offset).Truncate(s.window).Add(s.offset)
	h := w.Header()
	h.Set("X-RateLimit-Limit", strconv.Itoa(s.limit))
	h.Set("X-RateLimit-Reset", strconv.FormatInt(cur.Add(s.window).Unix(), 10))
	s.mu.Lock()
	est := float64(s.counts[cur.Add(-s.window)])*float64(s.window-now.Sub(cur))/float64(s.window) + float64(s.counts[cur])
	n := int(math.Round(est))
	if n+1 > s.limit {
		s.mu.Unlock()
		h.Set("X-RateLimit-Remaining", strconv.Itoa(s.limit-n))
		h.Set("Retry-After", strconv.Itoa(int(s.window.Seconds())))
		http.Error(w, http.StatusText(http.StatusTooManyRequests), http.StatusTooManyRequests)
		return
	}
	s.counts[cur]++
	s.mu.Unlock()
	h.Set("X-RateLimit-Remaining", strconv.Itoa(s.limit-n-1))
	s.next.ServeHTTP(w, r)
}

// An intervalBucket counts as sethvargo/go-limiter's memorystore and httplimit do: tokens per
// interval, the intervals starting at the key's first request, and Retry-After the start of
// the next interval formatted with time.RFC1123 in UTC, cut to the second.
type intervalBucket struct {
	tokens   int
	interval time.Duration
	next     http.Handler

	mu       sync.Mutex
	start    time.Time
	lastTick time.Duration
	left     int
}

func newIntervalBucket(tokens int, interval time.Duration) *intervalBucket {
	return &intervalBucket{tokens: tokens, interval: interval, next: hello()}
}

func (b *intervalBucket) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	now := time.Now()
	b.mu.Lock()
	if b.start.IsZero() {
		b.start, b.left = now, b.tokens
	}
	tick := now.Sub(b.start) / b.interval
	if tick > b.lastTick {
		b.left, b.lastTick = b.tokens, tick
	}
	reset := b.start.Add((tick + 1) * b.interval).UTC().Format(time.RFC1123)
	ok := b.left > 0
	if ok {
		b.left--
	}
	left := b.left
	b.mu.Unlock()
	h := w.Header()
	h.Set("X-RateLimit-Limit", strconv.Itoa(b.tokens))
	h.Set("X-RateLimit-Remaining", strconv.Itoa(left))
	h.Set("X-RateLimit-Reset", reset)
	if !ok {
		h.Set("Retry-After", reset)
		http.Error(w, http.StatusText(http.StatusTooManyRequests), http.StatusTooManyRequests)
		return
	}
	b.next.ServeHTTP(w, r)
}

// A tokenBucket is a hand-written token bucket of 1 token a second and bursts of 5, with the
// ways of answering that real limiters have: by default exact (Retry-After the time until a
// whole token is back, rounded up, a refusal costs nothing) and exposing Retry-After and Date.
type tokenBucket struct {
	// charge makes a refused request take its token too, into debt; Retry-After is then the
	// time until a whole token is back for a client that waits alone.
	charge bool
	// noDate suppresses Date on every response, as servers without a clock do.
	noDate bool
	// noRetryAfter refuses with no Retry-After, as ulule/limiter and didip/tollbooth do.
	noRetryAfter bool
	// fields writes RateLimit fields: "early" with t truncated, "old" in the syntax of the
	// drafts before 07; "draft06" the RateLimit-Limit, -Remaining and -Reset of the drafts up
	// to 06, Reset truncated; "x" X-RateLimit-Limit, -Remaining and -Reset, Reset the epoch
	// time of the next whole token, as ulule/limiter sends them; "openai" OpenAI's
	// x-ratelimit-reset-requests, a Go duration; "anthropic" Anthropic's requests reset, an
	// RFC 3339 instant to the nanosecond; "github" a 403 with X-RateLimit-Remaining 0 and
	// X-RateLimit-Reset the epoch time of the next whole token, rounded up.
	fields string

	mu     sync.Mutex
	tokens float64
	last   time.Time
}

func (b *tokenBucket) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	const rate, burst = 1.0, 5.0
	now := time.Now()
	b.mu.Lock()
	if b.last.IsZero() {
		b.tokens = burst
	} else {
		b.tokens = min(burst, b.tokens+now.Sub(b.last).Seconds()*rate)
	}
	b.last = now
	ok := b.tokens >= 1
	if ok || b.charge {
		b.tokens--
	}
	wait := time.Duration((1 - b.tokens) / rate * float64(time.Second))
	left := max(0, math.Floor(b.tokens))
	b.mu.Unlock()

	h := w.Header()
	if b.noDate {
		h["Date"] = nil // net/http then sends none
	}
	if r.Header.Get("Origin") != "" {
		h.Set("Access-Control-Expose-Headers", "Retry-After, Date")
	}
	if ok {
		b.next(w, r)
		return
	}
	secs := int64(math.Ceil(wait.Seconds()))
	switch b.fields {
	case "early":
		h.Set("RateLimit-Policy", `"default";q=5;w=5`)
		h.Set("RateLimit", `"default";r=`+strconv.Itoa(int(left))+`;t=`+strconv.FormatInt(int64(wait.Seconds()), 10))
	case "old":
		h.Set("RateLimit", "limit=5, remaining=0, reset="+strconv.FormatInt(secs, 10))
	case "draft06":
		h.Set("RateLimit-Limit", "5")
		h.Set("RateLimit-Remaining", strconv.Itoa(int(left)))
		h.Set("RateLimit-Reset", strconv.FormatInt(int64(wait.Seconds()), 10))
	case "x":
		h.Set("X-RateLimit-Limit", "5")
		h.Set("X-RateLimit-Remaining", strconv.Itoa(int(left)))
		h.Set("X-RateLimit-Reset", strconv.FormatInt(now.Add(wait).Unix(), 10))
	case "openai": // the APIs' resets, to the millisecond above the bucket's float arithmetic
		h.Set("X-Ratelimit-Remaining-Requests", "0")
		h.Set("X-Ratelimit-Reset-Requests", (wait.Truncate(time.Millisecond) + time.Millisecond).String())
	case "anthropic":
		h.Set("Anthropic-Ratelimit-Requests-Remaining", "0")
		h.Set("Anthropic-Ratelimit-Requests-Reset", now.Add(wait.Truncate(time.Millisecond)+time.Millisecond).UTC().Format(time.RFC3339Nano))
	case "github":
		h.Set("X-RateLimit-Remaining", "0")
		h.Set("X-RateLimit-Reset", strconv.FormatInt(now.Add(wait.Truncate(time.Millisecond)+time.Second).Unix(), 10))
	}
	if !b.noRetryAfter {
		h.Set("Retry-After", strconv.FormatInt(secs, 10))
	}
	status := http.StatusTooManyRequests
	if b.fields == "github" {
		status = http.StatusForbidden
	}
	http.Error(w, http.StatusText(status), status)
}

func (b *tokenBucket) next(w http.ResponseWriter, r *http.Request) { hello().ServeHTTP(w, r) }

// redirectElsewhere sends every request to another host.
func redirectElsewhere() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://elsewhere.test/v1/things", http.StatusFound)
	})
}

// A fixedWindow allows limit requests a window, the windows following one another from the
// first request, and answers a refusal with the end of the window as an IMF-fixdate and a Date
// of the same clock reading. Cut to the second, as many hand-written limiters write it, the
// date names an instant before the end: a client that retries at it by its own clock is
// refused. Rounded up, as a sender must write it, the date is never early.
type fixedWindow struct {
	limit   int
	window  time.Duration
	roundUp bool
	// cutSeconds answers with the time left in whole seconds, cut: "0" under a second.
	cutSeconds bool
	// says, if not nil, is the Retry-After of a refusal with left of the window to go.
	says func(left, window time.Duration) string

	mu    sync.Mutex
	start time.Time
	index time.Duration // the number of the current window
	count int
}

func (f *fixedWindow) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	now := time.Now()
	f.mu.Lock()
	if f.start.IsZero() {
		f.start = now
	}
	if i := now.Sub(f.start) / f.window; i != f.index {
		f.index, f.count = i, 0
	}
	end := f.start.Add((f.index + 1) * f.window)
	ok := f.count < f.limit
	if ok {
		f.count++
	}
	f.mu.Unlock()
	h := w.Header()
	h.Set("Date", now.UTC().Format(http.TimeFormat))
	if ok {
		hello().ServeHTTP(w, r)
		return
	}
	if f.says != nil {
		h.Set("Retry-After", f.says(end.Sub(now), f.window))
		http.Error(w, http.StatusText(http.StatusTooManyRequests), http.StatusTooManyRequests)
		return
	}
	if f.cutSeconds {
		h.Set("Retry-After", strconv.Itoa(int(end.Sub(now)/time.Second)))
		http.Error(w, http.StatusText(http.StatusTooManyRequests), http.StatusTooManyRequests)
		return
	}
	at := end.Truncate(time.Second)
	if f.roundUp && at.Before(end) {
		at = at.Add(time.Second)
	}
	h.Set("Retry-After", at.UTC().Format(http.TimeFormat))
	http.Error(w, http.StatusText(http.StatusTooManyRequests), http.StatusTooManyRequests)
}
