package retryafter

import (
	"net/http"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"golang.org/x/time/rate"
)

// TestClockReadsTheSystemClock checks every reading of a clock, from several goroutines, against
// time.Now readings taken just before and after it: by the monotonic clock it falls between the
// two, and by the wall clock within 50 ms of them (time.Now reads its two clocks one after the
// other, so a base read across a preemption carries the gap between them; a wall time off by
// a renewal period or more would still fail). Now and then a goroutine ages the clock's base, so
// renewals happen throughout.
func TestClockReadsTheSystemClock(t *testing.T) {
	const slop = 50 * time.Millisecond
	var c clock
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 5000 {
				if i%97 == g {
					old := time.Now().Add(-clockResync)
					c.base.Store(&old)
				}
				before := time.Now()
				r := c.now()
				after := time.Now()
				if r.Before(before) || r.After(after) {
					t.Errorf("reading %v not between %v and %v by the monotonic clock", r, before, after)
					return
				}
				wall := r.Round(0)
				if wall.Before(before.Round(0).Add(-slop)) || wall.After(after.Round(0).Add(slop)) {
					t.Errorf("reading %v not between %v and %v by the wall clock", wall, before.Round(0), after.Round(0))
					return
				}
			}
		})
	}
	wg.Wait()
}

// TestClockRenews checks when a clock reads time.Now again: once its base is clockResync old,
// or ahead of the monotonic clock (a base from elsewhere), and not before.
func TestClockRenews(t *testing.T) {
	for _, tc := range []struct {
		name  string
		age   time.Duration
		renew bool
	}{
		{"fresh", 0, false},
		{"just under", clockResync - 10*time.Millisecond, false},
		{"due", clockResync, true},
		{"stale", time.Hour, true},
		{"ahead", -time.Second, true},
	} {
		var c clock
		base := time.Now().Add(-tc.age)
		c.base.Store(&base)
		r := c.now()
		if time.Since(base) >= clockResync && !tc.renew {
			continue // the machine stalled past the age under test: nothing to check
		}
		if renewed := c.base.Load() != &base; renewed != tc.renew {
			t.Errorf("%s: base %v old, renewed %v, want %v", tc.name, tc.age, renewed, tc.renew)
		}
		if r.Round(0).Sub(time.Now().Round(0)) > time.Millisecond {
			t.Errorf("%s: reading %v is ahead of time.Now", tc.name, r)
		}
	}
}

// TestClockInBubble checks that a clock, even one last read outside, reads a synctest bubble's
// fake time inside it, as time.Now does.
func TestClockInBubble(t *testing.T) {
	var c clock
	c.now()
	synctest.Test(t, func(t *testing.T) {
		first := c.now()
		if want := time.Now(); !first.Equal(want) {
			t.Fatalf("in a bubble: %v, want the bubble's %v", first, want)
		}
		time.Sleep(time.Hour)
		second := c.now()
		if want := time.Now(); !second.Equal(want) || second.Sub(first) != time.Hour {
			t.Fatalf("an hour on in a bubble: %v, want %v", second, want)
		}
	})
}

// TestDefaultClockRoundTrip runs the round trip on the middleware's default clock, in a synctest
// bubble: a refusal's Date is the bubble's time, and a client that sleeps the Retry-After it
// parses is admitted, at a rate whose waits are not whole seconds. Requests come in pairs, 30 ms
// before a second turns and 30 ms after, so that a clock that lagged behind by less than its
// renewal period would write the wrong second.
func TestDefaultClockRoundTrip(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := Limit(rate.Every(1300*time.Millisecond), 2)(ok)
		refused := 0
		try := func(i int) {
			w := serve(h, http.MethodGet, "192.0.2.1:1234")
			if w.Code == http.StatusOK {
				return
			}
			refused++
			if got, want := w.Header().Get("Date"), time.Now().UTC().Format(http.TimeFormat); got != want {
				t.Fatalf("pair %d: Date %q, want the bubble's %q", i, got, want)
			}
			wait, ok := ParseRetryAfter(w.Header(), time.Now())
			if !ok {
				t.Fatalf("pair %d: Retry-After %q", i, w.Header().Get("Retry-After"))
			}
			time.Sleep(wait)
			if w := serve(h, http.MethodGet, "192.0.2.1:1234"); w.Code != http.StatusOK {
				t.Fatalf("pair %d: refused again after waiting the Retry-After %v", i, wait)
			}
		}
		for i := range 40 {
			time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second - 30*time.Millisecond)))
			try(i)
			time.Sleep(60 * time.Millisecond)
			try(i)
		}
		if refused < 40 {
			t.Fatalf("%d refusals checked, want at least 40", refused)
		}
	})
}
