// Package testkit holds what the tests of several packages of this repository share: a clock
// the test moves by hand, and the round trip every refusal of the middleware is held to.
package testkit

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/retryafter/retryafter/internal/header"
)

// T0 is the instant the tests start their clocks at.
var T0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

// A Clock is a clock the test moves by hand. It is safe for concurrent use.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// NewClock returns a Clock that reads t.
func NewClock(t time.Time) *Clock { return &Clock{t: t} }

// Now returns the clock's reading.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Set sets the clock to t.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

// Advance moves the clock by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// Serve sends one request from remote (host:port) through h and returns what h answered.
func Serve(h http.Handler, method, remote string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, "/", nil)
	r.RemoteAddr = remote
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// WantRefusal checks that w is a refusal with status, a Date of now and a Retry-After that the
// strict parser reads as whole seconds, at least one, and returns the wait it states.
func WantRefusal(t testing.TB, w *httptest.ResponseRecorder, status int, now time.Time) time.Duration {
	t.Helper()
	if w.Code != status {
		t.Fatalf("status = %d, want %d", w.Code, status)
	}
	if got, want := w.Header().Get("Date"), now.UTC().Format(http.TimeFormat); got != want {
		t.Fatalf("Date = %q, want %q", got, want)
	}
	wait, ok := header.ParseRetryAfter(w.Header(), now)
	if !ok {
		t.Fatalf("Retry-After %q does not parse", w.Header().Get("Retry-After"))
	}
	if wait < time.Second || wait%time.Second != 0 {
		t.Fatalf("Retry-After %q is not a whole number of seconds >= 1", w.Header().Get("Retry-After"))
	}
	return wait
}

// RoundTrip drives one client through h on clk with the arrival pattern next and checks the
// promise on every 429: Date is the clock reading, Retry-After parses to whole seconds, a retry
// exactly that much later is admitted, and one a second earlier is not. It returns how many
// refusals it checked.
func RoundTrip(t testing.TB, h http.Handler, clk *Clock, requests int, next func() time.Duration) int {
	t.Helper()
	const client = "192.0.2.1:1234"
	refusals := 0
	for range requests {
		clk.Advance(next())
		w := Serve(h, "GET", client)
		if w.Code == http.StatusOK {
			continue
		}
		now := clk.Now()
		wait := WantRefusal(t, w, http.StatusTooManyRequests, now)
		refusals++

		clk.Set(now.Add(wait - time.Second))
		if w := Serve(h, "GET", client); w.Code != http.StatusTooManyRequests {
			t.Fatalf("refused at %v with Retry-After %v, but admitted %v later: the header is padded",
				now, wait, wait-time.Second)
		}
		clk.Set(now.Add(wait))
		if w := Serve(h, "GET", client); w.Code != http.StatusOK {
			t.Fatalf("refused at %v with Retry-After %v, and refused again (%d, Retry-After %q) after waiting exactly that",
				now, wait, w.Code, w.Header().Get("Retry-After"))
		}
	}
	return refusals
}
