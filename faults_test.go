package retryafter

import (
	"context"
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

// TestReplanForgivesDebtBeyondAHundredYears puts a key in deep debt, then on a policy at whose
// rate the debt would take more than 100 years to repay: it is forgiven down to that, as Charge
// forgives it, and the key stays refused. Kept whole, a debt of 2^63 ns to repay made
// x/time/rate's wait wrap to a negative one, which admitted the key in debt (here at the
// instant the upgrade from a rate of 0 is first decided).
func TestReplanForgivesDebtBeyondAHundredYears(t *testing.T) {
	for _, c := range []struct{ from, to Policy }{
		{Policy{Limit: 0, Burst: 3}, Policy{Limit: 1e9, Burst: 2}},  // a debt never repaid, then repaid
		{Policy{Limit: 10, Burst: 3}, Policy{Limit: 0.1, Burst: 3}}, // 100 years at 10/s, 10,000 at 0.1/s
	} {
		plan := c.from
		b := NewTokenBucket(c.from.Limit, c.from.Burst, WithPolicyFunc(func(string) Policy { return plan }))
		if err := b.Charge(context.Background(), "k", math.MaxInt, t0); err != nil {
			t.Fatal(err)
		}
		plan = c.to
		now := t0.Add(time.Second)
		for i := range 3 {
			d := decide(t, b, "k", 1, now)
			if d.Allowed || d.RetryAfter > maxDebt+time.Minute { // 100 years and the request's own wait
				t.Fatalf("%v to %v, request %d: %+v, want refused with a wait of at most 100 years", c.from, c.to, i, plain(d))
			}
		}
	}
}

// TestResetFarAheadAdmitsTheBurst: a bucket that needs about 250 years to refill is told a
// Reset at which the whole burst is admitted. Past 2^62 ns a float64 step of the refill's time
// is over the microsecond of slack, and the Reset, a single division, fell short by up to 2 µs.
func TestResetFarAheadAdmitsTheBurst(t *testing.T) {
	b := NewTokenBucket(1e-9, 8)
	now := time.Unix(0, 1700494930587734161)
	decide(t, b, "k", 2, now)
	now = now.Add(103169412 * time.Nanosecond)
	decide(t, b, "k", 7, now) // refused: 6 left
	now = now.Add(43*time.Minute + 47150629791*time.Nanosecond)
	d := decide(t, b, "k", 6, now)
	if !d.Allowed || d.Reset >= rate.InfDuration {
		t.Fatalf("the 6 left: %+v", plain(d))
	}
	if e := decide(t, b, "k", 8, now.Add(d.Reset)); !e.Allowed {
		t.Fatalf("Reset %v; the whole burst at now+Reset: refused, %+v", d.Reset, plain(e))
	}
}
