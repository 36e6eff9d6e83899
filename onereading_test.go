package retryafter

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"golang.org/x/time/rate"
)

// tickingClock moves a second and a half on every reading, and counts them: a response whose
// Date and Retry-After came from two readings shows it.
type tickingClock struct {
	mu    sync.Mutex
	t     time.Time
	reads int
}

func (c *tickingClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reads++
	t := c.t
	c.t = c.t.Add(1500 * time.Millisecond)
	return t
}

// TestOneClockReading checks that each refusal reads the clock once and writes Date from that
// reading, on the 429 path and on both forms of the 503 of a maintenance: a Date from a second
// reading would name an instant a second and a half later.
func TestOneClockReading(t *testing.T) {
	serveOnce := func(h http.Handler, clk *tickingClock) (*httptest.ResponseRecorder, time.Time) {
		before := clk.t
		reads := clk.reads
		w := serve(h, "GET", "192.0.2.1:1")
		if n := clk.reads - reads; n != 1 {
			t.Fatalf("the clock was read %d times for one request", n)
		}
		return w, before
	}
	clk := &tickingClock{t: t0}
	limit := Limit(rate.Every(time.Minute), 1, WithClock(clk.Now))(ok)
	serveOnce(limit, clk)
	w, at := serveOnce(limit, clk)
	if wait := wantRefusal(t, w, http.StatusTooManyRequests, at); wait != 59*time.Second {
		t.Fatalf("429: Retry-After %v, want 59s from the one reading", wait)
	}
	for _, date := range []bool{false, true} {
		clk := &tickingClock{t: t0}
		m := &Maintenance{Now: clk.Now, HTTPDate: date}
		m.Start(t0.Add(10 * time.Minute))
		w, at := serveOnce(m.Handler(ok), clk)
		if got, want := w.Header().Get("Date"), at.UTC().Format(http.TimeFormat); got != want {
			t.Fatalf("503 (date form %v): Date %q, want %q, the one reading", date, got, want)
		}
		if wait, ok := ParseRetryAfter(w.Header(), at); !ok || wait != 10*time.Minute {
			t.Fatalf("503 (date form %v): Retry-After %q reads %v, want 10m from the one reading", date, w.Header().Get("Retry-After"), wait)
		}
	}
}
