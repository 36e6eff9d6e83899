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

// TestClockReadAfterCost checks that the middleware reads its clock after the cost function,
// just before the limiter decides. Each slow request's cost function takes a second and a half
// (a body sent slowly), and quick requests of the same client are decided meanwhile and right
// after; the clock has no monotonic readings. Decided at a reading taken before its cost
// function, the slow request would look to the bucket like a step back of the clock, after which
// the same time is credited twice. So at 1/s with bursts of 1, no more requests are admitted
// than the rate allows over the time that passed, and every refusal's Date and Retry-After come
// from the reading its decision was made at.
func TestClockReadAfterCost(t *testing.T) {
	const client = "192.0.2.1:1"
	clk := newClock(t0)
	var h http.Handler
	var during *httptest.ResponseRecorder
	cost := func(r *http.Request) int {
		if r.Header.Get("X-Slow") != "" {
			clk.Advance(1500 * time.Millisecond)
			during = serve(h, "GET", client)
		}
		return 1
	}
	h = Limit(1, 1, WithClock(clk.Now), WithCost(cost))(ok)
	admitted := 0
	count := func(w *httptest.ResponseRecorder) {
		t.Helper()
		if w.Code == http.StatusOK {
			admitted++
			return
		}
		wantRefusal(t, w, http.StatusTooManyRequests, clk.Now())
	}
	for range 20 {
		slow := serveWith(h, "GET", client, "X-Slow", "yes")
		count(during)
		count(slow)
		count(serve(h, "GET", client))
	}
	if most := 1 + int(clk.Now().Sub(t0)/time.Second); admitted > most {
		t.Fatalf("%d requests admitted in %v at 1/s with bursts of 1, want at most %d", admitted, clk.Now().Sub(t0), most)
	}
}
