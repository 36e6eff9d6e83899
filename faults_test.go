package retryafter

import (
	"math"
	"net/http"
	"testing"
	"time"

	"golang.org/x/time/rate"
)

// The faults an adversarial run found, each held by a test that failed on the code before it.

// TestChargeSaturates charges a request past the largest int, in two calls and in one: the
// total saturates, so the key goes into its deepest debt and its next request is refused. The
// total once wrapped to a negative number, which charged nothing: the next request went free.
func TestChargeSaturates(t *testing.T) {
	for _, charges := range [][]int{{math.MaxInt, math.MaxInt}, {math.MaxInt}, {math.MaxInt - 1, 2}, {math.MaxInt / 3 * 2}} {
		b := NewTokenBucket(rate.Every(time.Second), 100)
		h := LimitWith(ChargedAfter(b), WithClock(func() time.Time { return t0 }))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			for _, c := range charges {
				Charge(r, c)
			}
		}))
		if w := serve(h, "GET", "192.0.2.1:1"); w.Code != http.StatusOK {
			t.Fatalf("%v: the charged request: %d", charges, w.Code)
		}
		d := decide(t, b, "192.0.2.1", 0, t0)
		if d.Allowed || d.RetryAfter < time.Hour {
			t.Fatalf("%v charged: the key's next decision %+v, want refused for a long time", charges, d)
		}
		if w := serve(h, "GET", "192.0.2.1:1"); w.Code != http.StatusTooManyRequests {
			t.Fatalf("%v charged: the next request: %d, want 429", charges, w.Code)
		}
	}
}

// TestChargedWhenTheHandlerPanics charges requests whose handler panics after reporting its
// cost, as httputil.ReverseProxy does with http.ErrAbortHandler when the client hangs up mid
// body: the cost is charged, and the panic reaches the server unchanged. The charge once ran
// only after a handler that returned, so a client could make a streamed request free by
// disconnecting.
func TestChargedWhenTheHandlerPanics(t *testing.T) {
	b := NewTokenBucket(rate.Every(time.Second), 100)
	h := LimitWith(ChargedAfter(b), WithClock(func() time.Time { return t0 }))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		Charge(r, 1000)
		panic(http.ErrAbortHandler)
	}))
	func() {
		defer func() {
			if v := recover(); v != http.ErrAbortHandler {
				t.Fatalf("the panic reached the server as %v, want http.ErrAbortHandler", v)
			}
		}()
		serve(h, "GET", "192.0.2.1:1")
	}()
	for i := range 4 {
		if w := serve(h, "GET", "192.0.2.1:1"); w.Code != http.StatusTooManyRequests {
			t.Fatalf("request %d after the one that panicked: %d, want 429: it was not charged", i+2, w.Code)
		}
	}
	if d := decide(t, b, "192.0.2.1", 0, t0); d.Allowed || d.RetryAfter != 900*time.Second-slack {
		t.Fatalf("after a request charged 1,000 that panicked: %+v, want refused for 900 s", d)
	}
}
