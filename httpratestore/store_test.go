package httpratestore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-chi/httprate"
	"golang.org/x/time/rate"

	"github.com/retryafter/retryafter"
)

var (
	slidingWindows = []time.Duration{time.Second, 10 * time.Second, time.Minute, 250 * time.Millisecond}
	slidingLimits  = []int{1, 3, 10, 100}
)

// slidingArrivals returns the gaps between the requests of a random arrival pattern over
// window w with limit requests per window. It runs in phases: bursts of up to one and a half
// times the limit; one to two times the limit of gaps half the limit's pace on average;
// and up to 20 of a mix of gaps anywhere in
// the window, past it, on quarter windows (where httprate's estimate lands on halves) and of a
// few nanoseconds.
func slidingArrivals(rng *rand.Rand, w time.Duration, limit int) func() time.Duration {
	var phase, left int
	pace := int64(w / time.Duration(limit))
	return func() time.Duration {
		if left == 0 {
			switch phase = rng.IntN(3); phase {
			case 0:
				left = 1 + rng.IntN(limit*3/2+1)
			case 1:
				left = limit + rng.IntN(limit+1)
			default:
				left = 1 + rng.IntN(20)
			}
		}
		left--
		switch phase {
		case 0:
			return 0
		case 1:
			return time.Duration(rng.Int64N(pace + 1))
		}
		switch rng.IntN(5) {
		case 0:
			return time.Duration(rng.Int64N(int64(w)))
		case 1:
			return time.Duration(rng.Int64N(int64(3 * w)))
		case 2:
			return time.Duration(rng.IntN(5)) * w / 4
		case 3:
			return time.Duration(rng.Int64N(1000))
		}
		return 0
	}
}

// TestAgreesWithHTTPRate runs httprate's own middleware and a Store side
// by side, each on its own counter of the same kind, on the same request instants of many
// arrival patterns, and checks that they admit and refuse the same requests. httprate reads
// time.Now itself, so both run in a synctest bubble, whose clock moves only by time.Sleep.
//
// After a refusal the client sometimes retries exactly RetryAfter later, which httprate must
// admit, or a nanosecond earlier, which httprate must refuse: the wait is httprate's own
// earliest admission instant, to the nanosecond.
func TestAgreesWithHTTPRate(t *testing.T) {
	for _, kind := range []string{"WithLimitCounter", "default counter"} {
		for _, w := range slidingWindows {
			for _, limit := range slidingLimits {
				for seed := range uint64(3) {
					name := fmt.Sprintf("%s/%v/%d/%d", kind, w, limit, seed)
					t.Run(name, func(t *testing.T) {
						synctest.Test(t, func(t *testing.T) {
							agree(t, kind == "default counter", w, limit, seed)
						})
					})
				}
			}
		}
	}
}

func agree(t *testing.T, defaultCounter bool, w time.Duration, limit int, seed uint64) {
	// httprate aligns the windows of its default counter to the instant its limiter is built;
	// the bubble starts at midnight UTC, on a wall-clock window boundary, so they coincide.
	if start := time.Now(); !start.Truncate(w).Equal(start) {
		t.Fatalf("the bubble starts at %v, inside a window of %v", start, w)
	}
	key := func(r *http.Request) (string, error) { return r.RemoteAddr, nil }
	var theirs http.Handler
	var ours *Store
	if defaultCounter {
		theirs = httprate.LimitBy(limit, w, key)(ok)
		ours = New(limit, w, nil)
	} else {
		theirs = httprate.LimitBy(limit, w, key, httprate.WithLimitCounter(httprate.NewLocalLimitCounter(w)))(ok)
		ours = New(limit, w, httprate.NewLocalLimitCounter(w))
	}

	rng := rand.New(rand.NewPCG(seed, uint64(w)+uint64(limit)))
	clients := []string{"192.0.2.1:1", "192.0.2.2:1", "192.0.2.3:1"}
	start := time.Now()
	var probes, refusals int
	type expectation int
	const (
		none expectation = iota
		admit
		refuse
	)
	client, expect, nextGap := clients[0], none, time.Duration(-1)
	gap := slidingArrivals(rng, w, limit)
	for i := range 400 {
		now := time.Now()
		rec := serve(theirs, http.MethodGet, client)
		theirOK := rec.Code == http.StatusOK
		d, err := ours.Decide(context.Background(), client, 1, now)
		if err != nil {
			t.Fatal(err)
		}
		at := fmt.Sprintf("request %d from %s at %v", i, client, now.Sub(start))
		if d.Allowed != theirOK {
			t.Fatalf("%s: Store allowed=%v, httprate answered %d", at, d.Allowed, rec.Code)
		}
		switch {
		case expect == admit && !theirOK:
			t.Fatalf("%s: httprate refused a retry exactly RetryAfter after a refusal", at)
		case expect == refuse && theirOK:
			t.Fatalf("%s: httprate admitted a retry 1ns before RetryAfter: the wait is not the earliest", at)
		}
		// httprate's X-RateLimit-Remaining is what it had left minus this request; it goes
		// negative when refusing past the limit, where Remaining stops at 0.
		if got, _ := strconv.Atoi(rec.Header().Get("X-RateLimit-Remaining")); max(got, 0) != d.Remaining {
			t.Fatalf("%s: Remaining = %d, httprate's X-RateLimit-Remaining = %d", at, d.Remaining, got)
		}

		expect = none
		switch {
		case nextGap >= 0:
			time.Sleep(nextGap)
			nextGap, expect = -1, admit
			continue
		case !d.Allowed && d.RetryAfter == rate.InfDuration:
			t.Fatalf("%s: refused forever a cost of 1 under a limit of %d", at, limit)
		case !d.Allowed:
			refusals++
			if d.RetryAfter <= 0 {
				t.Fatalf("%s: refused with RetryAfter %v", at, d.RetryAfter)
			}
			switch rng.IntN(3) {
			case 0:
				probes++
				time.Sleep(d.RetryAfter)
				expect = admit
				continue
			case 1:
				probes++
				time.Sleep(d.RetryAfter - 1)
				expect, nextGap = refuse, 1
				continue
			}
		}
		if rng.IntN(limit+2) == 0 { // now and then another client, whose bursts are its own
			client = clients[rng.IntN(len(clients))]
		}
		time.Sleep(gap())
	}
	if refusals == 0 || probes == 0 {
		t.Fatalf("%d refusals, %d probes in 400 requests: the pattern does not test anything", refusals, probes)
	}
}

// TestRoundTrip drives Stores through the middleware on an injected clock:
// on every 429, Retry-After parses to whole seconds, a retry exactly that much later is
// admitted, and one a second earlier is not. Sub-second windows included: never a 0.
func TestRoundTrip(t *testing.T) {
	for _, w := range slidingWindows {
		for _, limit := range slidingLimits {
			t.Run(fmt.Sprint(w, "/", limit), func(t *testing.T) {
				clk := newClock(t0.Add(time.Duration(limit) * 7 * time.Millisecond)) // mid-window
				h := retryafter.LimitWith(New(limit, w, nil), retryafter.WithClock(clk.Now))(ok)
				rng := rand.New(rand.NewPCG(uint64(w), uint64(limit)))
				n := checkRoundTrip(t, h, clk, 600, slidingArrivals(rng, w, limit))
				if n == 0 {
					t.Fatal("no request was refused: the pattern does not test anything")
				}
			})
		}
	}
}

// TestExactWaits checks hand-computed waits, each derived from httprate's formula
// rate = prev × (W − elapsed)/W + curr, admitted when round(rate) + 1 ≤ limit, and checks each
// against httprate's own middleware too.
func TestExactWaits(t *testing.T) {
	tests := []struct {
		name    string
		window  time.Duration
		limit   int
		history []time.Duration // admitted request instants, from t0 (a window boundary)
		at      time.Duration   // the refused request, from t0
		wait    time.Duration
		header  string
		cost    int // of the refused request and its retries; 0 means 1
	}{
		// 7 requests in the first minute, 9 in the second: refused at 1m51s. Within the
		// window, 7 × (60 s − x)/60 s + 9 < 9.5 once x > 55.714285714 s, 4.714 s later:
		// Retry-After 5, where httprate says 60.
		{"60s window, within it", time.Minute, 10, append(repeat(0, 7), repeat(time.Minute+50*time.Second, 9)...),
			time.Minute + 51*time.Second, 4714285715 * time.Nanosecond, "5", 1},
		// The same with 6 in the first minute: 6 × 5 s/60 s + 9 is exactly 9.5, which rounds
		// up; admitted one nanosecond after 55 s.
		{"60s window, the half rounds up", time.Minute, 10, append(repeat(0, 6), repeat(time.Minute+50*time.Second, 9)...),
			time.Minute + 51*time.Second, 4*time.Second + 1, "5", 1},
		// 3 in a 10 s window, refused 1 s in. The count stays 3 to the end of the window;
		// in the next, 3 × (10 s − x)/10 s < 2.5 once x > 1.6667 s: 10.667 s, Retry-After 11.
		// httprate's Retry-After 10 would be refused.
		{"10s window, into the next", 10 * time.Second, 3, repeat(0, 3),
			time.Second, 10*time.Second + 666666667, "11", 1},
		// 1 request per 250 ms, refused 10 ms later: next window, (250 − x)/250 < 0.5 once
		// x > 125 ms: 365 ms, Retry-After 1, where httprate says 0.
		{"250ms window", 250 * time.Millisecond, 1, repeat(0, 1),
			10 * time.Millisecond, 365*time.Millisecond + 1, "1", 1},
		// One request at the end of the previous window, one at the start of this: refused
		// 200 ms in, as 1 × (1 s − x)/1 s + 1 stays at 1.5 or above for half the window.
		{"1s window, previous weighs", time.Second, 2, []time.Duration{999 * time.Millisecond, 1000 * time.Millisecond},
			1200 * time.Millisecond, 300*time.Millisecond + 1, "1", 1},
		// 25 in the first second, then a cost of 11 at 1.41 s, which needs the estimate under
		// 14.5. 25 × (1 s − 420 ms)/1 s is exactly 14.5 in httprate's order of operations
		// (25 × ((1 s − x)/1 s) would give 14.499999999999998 and round down): refused
		// until 420 ms and 1ns.
		{"1s window, a half only httprate's float order keeps", time.Second, 25, repeat(0, 25),
			1410 * time.Millisecond, 10*time.Millisecond + 1, "1", 11},
	}
	for _, tt := range tests {
		// httprate itself, in a synctest bubble, which starts on a window boundary as t0 is.
		t.Run(tt.name+"/httprate", func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				start := time.Now()
				h := httprate.LimitBy(tt.limit, tt.window, httprate.Key("k"),
					httprate.WithLimitCounter(httprate.NewLocalLimitCounter(tt.window)))(ok)
				sleepUntil := func(at time.Duration) { time.Sleep(time.Until(start.Add(at))) }
				cost := max(tt.cost, 1)
				for _, at := range tt.history {
					sleepUntil(at)
					if w := serve(h, http.MethodGet, "192.0.2.1:1"); w.Code != http.StatusOK {
						t.Fatalf("history request at %v refused by httprate", at)
					}
				}
				for _, probe := range []struct {
					at   time.Duration
					code int
				}{{tt.at, 429}, {tt.at + tt.wait - 1, 429}, {tt.at + tt.wait, 200}} {
					sleepUntil(probe.at)
					r := httptest.NewRequest(http.MethodGet, "/", nil)
					r = r.WithContext(httprate.WithIncrement(r.Context(), cost))
					w := httptest.NewRecorder()
					if h.ServeHTTP(w, r); w.Code != probe.code {
						t.Fatalf("httprate answered %d at %v, want %d", w.Code, probe.at, probe.code)
					}
				}
			})
		})
		t.Run(tt.name, func(t *testing.T) {
			cost := max(tt.cost, 1)
			s := New(tt.limit, tt.window, nil)
			for _, at := range tt.history {
				if d, _ := s.Decide(context.Background(), "k", 1, t0.Add(at)); !d.Allowed {
					t.Fatalf("history request at %v refused: %+v", at, d)
				}
			}
			d, err := s.Decide(context.Background(), "k", cost, t0.Add(tt.at))
			if err != nil || d.Allowed || d.RetryAfter != tt.wait {
				t.Fatalf("Decide at %v = %+v, %v; want refused with RetryAfter %v", tt.at, d, err, tt.wait)
			}
			if cost == 1 {
				clk := newClock(t0.Add(tt.at))
				key := retryafter.WithKeyFunc(func(*http.Request) (string, error) { return "k", nil })
				w := serve(retryafter.LimitWith(s, retryafter.WithClock(clk.Now), key)(ok), http.MethodGet, "192.0.2.1:1")
				if got := w.Header().Get("Retry-After"); w.Code != http.StatusTooManyRequests || got != tt.header {
					t.Fatalf("middleware answered %d with Retry-After %q, want 429 with %q", w.Code, got, tt.header)
				}
			}
			if d, _ := s.Decide(context.Background(), "k", cost, t0.Add(tt.at+tt.wait-1)); d.Allowed {
				t.Fatalf("admitted 1ns before RetryAfter")
			}
			if d, _ := s.Decide(context.Background(), "k", cost, t0.Add(tt.at+tt.wait)); !d.Allowed {
				t.Fatalf("refused at RetryAfter: %+v", d)
			}
		})
	}
}

func repeat(at time.Duration, n int) []time.Duration {
	s := make([]time.Duration, n)
	for i := range s {
		s[i] = at
	}
	return s
}

// TestSearch checks the search for the first admitting instant against a scan of
// every nanosecond of short windows, from guesses anywhere in the bracket, so that the
// galloping and the halving both run far from the crossing.
func TestSearch(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		limit := 1 + rng.IntN(20)
		s := New(limit, time.Duration(100+rng.IntN(2000)), nil)
		prev, curr, cost := 1+rng.IntN(limit+5), rng.IntN(limit+1), 1+rng.IntN(limit)
		first := s.window
		for x := range s.window {
			if s.admits(prev, curr, cost, x) {
				first = x
				break
			}
		}
		if first == 0 || first == s.window {
			continue // no bracket to search
		}
		lo := time.Duration(rng.Int64N(int64(first)))
		hi := first + time.Duration(rng.Int64N(int64(s.window-first)))
		guess := lo + 1 + time.Duration(rng.Int64N(int64(hi-lo)))
		if got := s.search(prev, curr, cost, lo, hi, guess); got != first {
			t.Fatalf("search(%d, %d, %d, %v, %v, %v) over %v = %v, want %v", prev, curr, cost, lo, hi, guess, s.window, got, first)
		}
		if got := s.firstAdmit(prev, curr, cost, lo); got != first {
			t.Fatalf("firstAdmit(%d, %d, %d, %v) over %v = %v, want %v", prev, curr, cost, lo, s.window, got, first)
		}
	}
}

// TestCost checks costs other than 1: a cost above the limit is refused forever
// and counts nothing; a cost the counts leave no room for waits, and the refusal costs nothing.
func TestCost(t *testing.T) {
	s := New(5, time.Second, nil)
	ctx := context.Background()
	if d, _ := s.Decide(ctx, "k", 6, t0); d.Allowed || d.RetryAfter != rate.InfDuration {
		t.Fatalf("cost 6 under a limit of 5: %+v, want refused forever", d)
	}
	if d, _ := s.Decide(ctx, "k", 5, t0); !d.Allowed {
		t.Fatalf("cost 5 after a refusal: %+v, want allowed (the refusal cost nothing)", d)
	}
	// 5 in the window from t0: a cost of 2 needs 5 × (1 s − x)/1 s < 3.5, x > 300 ms, in the
	// next window; a cost of 5 needs the estimate under 0.5: x > 900 ms.
	if d, _ := s.Decide(ctx, "k", 2, t0.Add(500*time.Millisecond)); d.Allowed || d.RetryAfter != 800*time.Millisecond+1 {
		t.Fatalf("cost 2: %+v, want a wait of 800.000001ms", d)
	}
	if d, _ := s.Decide(ctx, "k", 5, t0.Add(500*time.Millisecond)); d.Allowed || d.RetryAfter != 1400*time.Millisecond+1 {
		t.Fatalf("cost 5: %+v, want a wait of 1.400000001s", d)
	}
}

// TestWaitTwoWindowsAhead checks the waits that end in the window after next, where both
// counts are zero: they need the previous window's weight to keep the request out for all of
// the next window, which takes windows of a few nanoseconds (or counts in the billions). With
// a limit of 1 per nanosecond, a request at t0 fills the window; in the next one it still
// weighs 1 × (1 − 0)/1, so the next request waits two windows. Then, on random requests over
// windows of 1 to 8 ns, every refusal's RetryAfter and every Reset is checked on a replica: a
// request exactly then is admitted, and one a nanosecond earlier is not.
func TestWaitTwoWindowsAhead(t *testing.T) {
	ctx := context.Background()
	s := New(1, time.Nanosecond, nil)
	want := retryafter.Decision{Allowed: true, Limit: 1, Remaining: 0, Reset: 2}
	if d, _ := s.Decide(ctx, "k", 1, t0); withoutPolicy(d) != want {
		t.Fatalf("first request: %+v, want %+v", d, want)
	}
	want = retryafter.Decision{RetryAfter: 2, Limit: 1, Remaining: 0, Reset: 2}
	if d, _ := s.Decide(ctx, "k", 1, t0); withoutPolicy(d) != want {
		t.Fatalf("second request at t0: %+v, want %+v", d, want)
	}
	if d, _ := s.Decide(ctx, "k", 1, t0.Add(1)); d.Allowed {
		t.Fatalf("admitted 1ns after t0, in the next window: %+v", d)
	}
	if d, _ := s.Decide(ctx, "k", 1, t0.Add(2)); !d.Allowed {
		t.Fatalf("refused 2ns after t0, two windows on: %+v", d)
	}

	type event struct {
		at   time.Time
		cost int
	}
	rng := rand.New(rand.NewPCG(5, 6))
	var reached int
	for w := time.Duration(1); w <= 8; w++ {
		for limit := 1; limit <= 3; limit++ {
			var history []event
			replica := func() *Store {
				r := New(limit, w, nil)
				for _, e := range history {
					if d, _ := r.Decide(ctx, "k", e.cost, e.at); !d.Allowed {
						t.Fatalf("replay refused %+v", e)
					}
				}
				return r
			}
			admitsAt := func(cost int, at time.Time) bool {
				d, _ := replica().Decide(ctx, "k", cost, at)
				return d.Allowed
			}
			s, now := New(limit, w, nil), t0
			for range 200 {
				now = now.Add(time.Duration(rng.Int64N(int64(3 * w))))
				for len(history) > 0 && history[0].at.Before(now.Truncate(w).Add(-w)) {
					history = history[1:] // no longer counted: the replicas need not replay it
				}
				cost := 1 + rng.IntN(limit)
				d, _ := s.Decide(ctx, "k", cost, now)
				afterNext := now.Truncate(w).Add(2 * w)
				if now.Add(d.RetryAfter).Equal(afterNext) || now.Add(d.Reset).Equal(afterNext) {
					reached++
				}
				if d.Allowed {
					history = append(history, event{now, cost})
				} else {
					if !admitsAt(cost, now.Add(d.RetryAfter)) || admitsAt(cost, now.Add(d.RetryAfter-1)) {
						t.Fatalf("%v/%d at %v: cost %d refused with RetryAfter %v, not the first instant it is admitted", w, limit, now.Sub(t0), cost, d.RetryAfter)
					}
				}
				if d.Reset > 0 && (!admitsAt(limit, now.Add(d.Reset)) || admitsAt(limit, now.Add(d.Reset-1))) {
					t.Fatalf("%v/%d at %v: Reset %v is not the first instant the whole limit is admitted", w, limit, now.Sub(t0), d.Reset)
				}
			}
		}
	}
	if reached == 0 {
		t.Fatal("no wait went past the next window: the pattern does not test anything")
	}
}

// TestQuota checks the mapping of Limit, Remaining and Reset on random patterns:
// after each decision, a request of cost n at the same instant would be admitted exactly when
// n ≤ Remaining, and a request of cost Limit exactly Reset later would be admitted and one
// 1ns earlier would not. Each "would" is asked of a replica rebuilt from the admitted history.
func TestQuota(t *testing.T) {
	ctx := context.Background()
	for _, w := range slidingWindows {
		for _, limit := range slidingLimits {
			type event struct {
				at   time.Time
				cost int
			}
			var history []event
			replica := func() *Store {
				r := New(limit, w, nil)
				for _, e := range history {
					if d, _ := r.Decide(ctx, "k", e.cost, e.at); !d.Allowed {
						t.Fatalf("replay refused %+v", e)
					}
				}
				return r
			}
			s := New(limit, w, nil)
			rng := rand.New(rand.NewPCG(uint64(w), uint64(limit)))
			now, gap := t0, slidingArrivals(rng, w, limit)
			for range 60 {
				now = now.Add(gap())
				cost := 1 + rng.IntN(limit)
				d, _ := s.Decide(ctx, "k", cost, now)
				if d.Allowed {
					history = append(history, event{now, cost})
				}
				if d.Limit != limit || d.Remaining < 0 || d.Remaining > limit {
					t.Fatalf("%v/%d at %v: %+v", w, limit, now.Sub(t0), d)
				}
				n := d.Remaining + rng.IntN(2) // the largest admitted cost, or one above it
				if n >= 1 && n <= limit {
					if got, _ := replica().Decide(ctx, "k", n, now); got.Allowed != (n <= d.Remaining) {
						t.Fatalf("%v/%d at %v: Remaining %d, but a cost of %d is allowed=%v", w, limit, now.Sub(t0), d.Remaining, n, got.Allowed)
					}
				}
				if d.Remaining == limit {
					if d.Reset != 0 {
						t.Fatalf("%v/%d: Remaining is the Limit with Reset %v", w, limit, d.Reset)
					}
					continue
				}
				if got, _ := replica().Decide(ctx, "k", limit, now.Add(d.Reset)); !got.Allowed {
					t.Fatalf("%v/%d at %v: cost Limit refused Reset (%v) later", w, limit, now.Sub(t0), d.Reset)
				}
				if got, _ := replica().Decide(ctx, "k", limit, now.Add(d.Reset-1)); got.Allowed {
					t.Fatalf("%v/%d at %v: cost Limit admitted before Reset (%v)", w, limit, now.Sub(t0), d.Reset)
				}
			}
		}
	}
}

// TestQuotaOverLimit shares a counter with a limiter of a larger limit, so that
// the counts exceed this one's limit: Remaining stays at 0, and Reset is when they have decayed.
func TestQuotaOverLimit(t *testing.T) {
	counter := httprate.NewLocalLimitCounter(time.Second)
	big := New(10, time.Second, counter)
	small := New(3, time.Second, counter)
	for range 10 {
		big.Decide(context.Background(), "k", 1, t0)
	}
	// In the next window a cost of 1 needs 10 × (1 s − x)/1 s < 2.5, x > 750 ms; the whole
	// limit needs it under 0.5, x > 950 ms.
	d, _ := small.Decide(context.Background(), "k", 1, t0)
	if want := (retryafter.Decision{RetryAfter: 1750*time.Millisecond + 1, Limit: 3, Remaining: 0, Reset: 1950*time.Millisecond + 1}); withoutPolicy(d) != want {
		t.Fatalf("Decide = %+v, want %+v", d, want)
	}
}

// TestQuotaAlwaysReported checks that Limit, Remaining and Reset are filled without being
// asked for, on an admission and on a refusal alike. (It replaces the old check that they stayed
// zero unless the quota was asked for: there is no such switch any more.) One request in the
// window from t0 leaves nothing of a limit of 1; in the next window 1 × (1 s − x)/1 s < 0.5
// once x > 500 ms, 1.5 s and a nanosecond after t0.
func TestQuotaAlwaysReported(t *testing.T) {
	s := New(1, time.Second, nil)
	for i, want := range []retryafter.Decision{
		{Allowed: true, Limit: 1, Remaining: 0, Reset: 1500*time.Millisecond + 1},
		{RetryAfter: 1500*time.Millisecond + 1, Limit: 1, Remaining: 0, Reset: 1500*time.Millisecond + 1},
	} {
		if d, _ := s.Decide(context.Background(), "k", 1, t0); withoutPolicy(d) != want {
			t.Fatalf("request %d: %+v, want %+v", i, d, want)
		}
	}
}

// TestNegativeCost checks that a negative cost is an error wrapping retryafter.ErrNegativeCost,
// with a zero Decision, and that the counter is neither asked nor incremented.
func TestNegativeCost(t *testing.T) {
	ledger := newWindowLedger(time.Second)
	s := New(1, time.Second, ledger)
	for _, cost := range []int{-1, -5} {
		d, err := s.Decide(context.Background(), "k", cost, t0)
		if !errors.Is(err, retryafter.ErrNegativeCost) {
			t.Fatalf("cost %d: error %v, want one wrapping ErrNegativeCost", cost, err)
		}
		if d != (retryafter.Decision{}) {
			t.Fatalf("cost %d: %+v with the error, want a zero Decision", cost, d)
		}
	}
	if !ledger.latest.IsZero() || len(ledger.added) != 0 {
		t.Fatalf("a negative cost reached the counter: latest window %v, added %v", ledger.latest, ledger.added)
	}
	if d, _ := s.Decide(context.Background(), "k", 1, t0); !d.Allowed {
		t.Fatalf("cost 1 after negative costs refused: %+v, want allowed (they counted nothing)", d)
	}
	ledger.check(t, 1)
}

// TestCostZeroPeeks checks that a cost of 0 spends nothing: it reports the quota, is admitted
// while the counts are within the limit (a full key included), and is refused with the wait for
// the estimate to come back to the limit when a shared counter holds more than the limit.
func TestCostZeroPeeks(t *testing.T) {
	ctx := context.Background()
	ledger := newWindowLedger(time.Second)
	s := New(2, time.Second, ledger)
	for i := range 3 {
		if d, _ := s.Decide(ctx, "k", 0, t0); withoutPolicy(d) != (retryafter.Decision{Allowed: true, Limit: 2, Remaining: 2}) {
			t.Fatalf("peek %d at an unused key: %+v, want allowed with the whole limit remaining", i, d)
		}
	}
	if n := ledger.added[ledgerEntry{"k", t0}]; n != 0 {
		t.Fatalf("peeks counted %d", n)
	}
	if d, _ := s.Decide(ctx, "k", 2, t0); !d.Allowed {
		t.Fatalf("cost 2 after peeks refused: %+v, want allowed (the peeks spent nothing)", d)
	}
	// 2 in the window from t0: the whole limit needs 2 × (1 s − x)/1 s < 0.5 in the next
	// window, x > 750 ms.
	want := retryafter.Decision{Allowed: true, Limit: 2, Remaining: 0, Reset: 1750*time.Millisecond + 1}
	for i := range 3 {
		if d, _ := s.Decide(ctx, "k", 0, t0); withoutPolicy(d) != want {
			t.Fatalf("peek %d at a full key: %+v, want %+v", i, d, want)
		}
	}
	if n := ledger.added[ledgerEntry{"k", t0}]; n != 2 {
		t.Fatalf("counted %d after a cost of 2 and peeks, want 2", n)
	}
	if d, _ := s.Decide(ctx, "k", 1, t0); d.Allowed {
		t.Fatalf("cost 1 at a full key admitted: %+v", d)
	}
	ledger.check(t, 2)

	// A counter shared with a limit of 10 holds 10, over this limit of 2: a peek is refused
	// until the estimate rounds to 2, 10 × (1 s − x)/1 s < 2.5 in the next window, x > 750 ms;
	// and it still spends nothing.
	counter := httprate.NewLocalLimitCounter(time.Second)
	big := New(10, time.Second, counter)
	small := New(2, time.Second, counter)
	for range 10 {
		big.Decide(ctx, "k", 1, t0)
	}
	wait := 1750*time.Millisecond + 1
	for i := range 2 {
		if d, _ := small.Decide(ctx, "k", 0, t0); withoutPolicy(d) != (retryafter.Decision{RetryAfter: wait, Limit: 2, Remaining: 0, Reset: wait + 200*time.Millisecond}) {
			t.Fatalf("peek %d over the limit: %+v, want refused for %v", i, d, wait)
		}
	}
	if d, _ := small.Decide(ctx, "k", 0, t0.Add(wait-1)); d.Allowed {
		t.Fatalf("peek admitted 1ns before RetryAfter: %+v", d)
	}
	if d, _ := small.Decide(ctx, "k", 0, t0.Add(wait)); !d.Allowed {
		t.Fatalf("peek refused at RetryAfter: %+v", d)
	}
	if curr, prev, err := counter.Get("k", t0.Add(time.Second), t0); err != nil || curr != 0 || prev != 10 {
		t.Fatalf("counts after the peeks: %d in the window at 1s, %d in the one at 0s, %v; want 0 and 10", curr, prev, err)
	}
}

// TestConcurrent sends many requests for one key at one instant from many
// goroutines: exactly the limit is admitted, since the read and the increment of a key are
// one step.
func TestConcurrent(t *testing.T) {
	const limit = 50
	s := New(limit, time.Minute, yieldingCounter{httprate.NewLocalLimitCounter(time.Minute)})
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				if d, _ := s.Decide(context.Background(), "k", 1, t0); d.Allowed {
					admitted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if n := admitted.Load(); n != limit {
		t.Fatalf("%d admitted at one instant, want %d", n, limit)
	}
}

// TestStaleInstant replays a request whose clock reading is older than the
// window other keys are already counted in, as when a goroutine reads the clock and is
// preempted before Decide. httprate's in-memory counter rotates its windows for all keys at
// once and clears every count when it is given a window that is neither its current one nor
// the one after, so deciding such a request in its own window would give every key its limit
// again. It must instead be decided at the latest instant, and its waits stretched by the lag.
func TestStaleInstant(t *testing.T) {
	ctx := context.Background()
	s := New(3, time.Minute, nil)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	for _, d := range []time.Duration{60 * time.Second, 61 * time.Second, 62 * time.Second} {
		if got, _ := s.Decide(ctx, "a", 1, at(d)); !got.Allowed {
			t.Fatalf("a at %v refused: %+v", d, got)
		}
	}
	// 3 in the window from 60 s: refused until the next window, where 3 × (60 s − x)/60 s
	// < 2.5 once x > 10 s, at 130 s and a nanosecond.
	if got, _ := s.Decide(ctx, "a", 1, at(65*time.Second)); got.Allowed || got.RetryAfter != 65*time.Second+1 {
		t.Fatalf("a at 65s: %+v, want refused for 65.000000001s", got)
	}
	// A reading from the window before, taken before the requests above were decided.
	if got, _ := s.Decide(ctx, "b", 1, at(60*time.Second-1)); !got.Allowed {
		t.Fatalf("b at 60s-1ns refused: %+v", got)
	}
	for i := range 3 {
		if got, _ := s.Decide(ctx, "a", 1, at(66*time.Second)); got.Allowed || got.RetryAfter != 64*time.Second+1 {
			t.Fatalf("a at 66s, try %d, after a stale request for b: %+v, want refused for 64.000000001s", i, got)
		}
	}
	// A stale reading for a itself, 7 s behind the latest: decided at 66 s, with the waits
	// from 59 s. The whole limit needs 3 × (60 s − x)/60 s < 0.5: x > 50 s, at 170 s.
	got, _ := s.Decide(ctx, "a", 1, at(59*time.Second))
	if want := (retryafter.Decision{RetryAfter: 71*time.Second + 1, Limit: 3, Remaining: 0, Reset: 111*time.Second + 1}); withoutPolicy(got) != want {
		t.Fatalf("a at 59s after 66s: %+v, want %+v", got, want)
	}
	if got, _ := s.Decide(ctx, "a", 1, at(130*time.Second)); got.Allowed {
		t.Fatalf("a admitted 1ns before 59s + RetryAfter: %+v", got)
	}
	if got, _ := s.Decide(ctx, "a", 1, at(130*time.Second+1)); !got.Allowed {
		t.Fatalf("a refused at 59s + RetryAfter: %+v", got)
	}
}

// TestStaleInstantDecidedLater checks the instant a stale reading is decided at:
// the request reached Decide after the later reading was taken, so the present is at least
// that late. A reading from a window before the latest one is decided at the latest window's
// start, if its part has seen nothing later, and not extrapolated back from it; a reading
// before the latest instant its part has seen is decided at that instant.
func TestStaleInstantDecidedLater(t *testing.T) {
	ctx := context.Background()
	s := New(3, time.Minute, nil)
	// Keys b0…b9 count 2 each in the window from t0; a opens the window from 60 s. At 60 s
	// each b has 2 × 60 s/60 s = 2, and one more fits; weighted as at 30 s into the window
	// from 60 s they would have 2 × 90 s/60 s = 3, and none. Some b is in another part than a.
	for i := range 10 {
		for range 2 {
			if d, _ := s.Decide(ctx, fmt.Sprint("b", i), 1, t0); !d.Allowed {
				t.Fatalf("b%d at 0s refused: %+v", i, d)
			}
		}
	}
	if d, _ := s.Decide(ctx, "a", 1, t0.Add(60*time.Second)); !d.Allowed {
		t.Fatalf("a at 60s refused: %+v", d)
	}
	for i := range 10 {
		d, _ := s.Decide(ctx, fmt.Sprint("b", i), 1, t0.Add(30*time.Second))
		// Reset: the whole limit needs the estimate under 0.5, in the window from 120 s,
		// where this request weighs (60 s − x)/60 s: x > 30 s, at 150 s, 120 s after 30 s.
		if want := (retryafter.Decision{Allowed: true, Limit: 3, Remaining: 0, Reset: 120*time.Second + 1}); withoutPolicy(d) != want {
			t.Fatalf("b%d at 30s after a at 60s: %+v, want %+v", i, d, want)
		}
	}

	// a counts 3 at 0 s, then 1 at 100 s, where 3 × 20 s/60 s + 1 = 2 leaves room for one
	// more; at 85 s, 3 × 35 s/60 s + 1 = 2.75 would leave none.
	s = New(3, time.Minute, nil)
	for range 3 {
		s.Decide(ctx, "a", 1, t0)
	}
	if d, _ := s.Decide(ctx, "a", 1, t0.Add(100*time.Second)); !d.Allowed {
		t.Fatalf("a at 100s refused: %+v", d)
	}
	if d, _ := s.Decide(ctx, "a", 1, t0.Add(85*time.Second)); !d.Allowed {
		t.Fatalf("a at 85s after 100s refused, as if decided at 85s: %+v", d)
	}
}

// TestClockStepsBack steps the wall clock back under a Store, as a time daemon or an operator
// may: by an hour, by a few seconds, and by less than a window. Before the step a client spent
// its limit; after it, that client is not sent away for the length of the step. A fresh client
// then polls ten times a window for sixty windows, and from two windows after the step on, it
// is decided exactly as by a Store that was new at some instant within those two windows and
// only ever knew the clock after the step. The in-memory counter, which clears every key when
// it is given an older window, is given one at most once.
func TestClockStepsBack(t *testing.T) {
	for _, w := range []time.Duration{time.Second, 10 * time.Second} {
		for _, step := range []time.Duration{time.Hour, 3 * time.Second, w / 2} {
			t.Run(fmt.Sprint(w, "/", step), func(t *testing.T) { clockStepsBack(t, w, step) })
		}
	}
}

func clockStepsBack(t *testing.T, w, step time.Duration) {
	const limit, polls, perWindow = 5, 600, 10
	ctx := context.Background()
	counter := &windowsBack{LimitCounter: httprate.NewLocalLimitCounter(w)}
	s := New(limit, w, counter)
	before := t0.Add(time.Hour + 7*w/10) // 70% into a window
	for range limit {
		if d, _ := s.Decide(ctx, "busy", 1, before); !d.Allowed {
			t.Fatalf("busy refused before the step: %+v", d)
		}
	}
	// The client at its limit asks again just after the step, and once more when told to.
	after := before.Add(-step)
	busy, _ := s.Decide(ctx, "busy", 1, after)
	if busy.Allowed || busy.RetryAfter > 4*w {
		t.Errorf("busy just after the step: %+v, want refused for at most 4 windows", busy)
	}
	retry := after.Add(busy.RetryAfter)

	poll := func(i int) time.Time { return after.Add(time.Duration(i) * w / perWindow) }
	got := make([]retryafter.Decision, polls)
	admitted := 0
	for i := range polls {
		if !busy.Allowed && !retry.After(poll(i)) {
			if busy, _ = s.Decide(ctx, "busy", 1, retry); !busy.Allowed {
				t.Errorf("busy refused when it came back as told, %v after the step: %+v", retry.Sub(after), busy)
			}
			busy.Allowed = true
		}
		d, err := s.Decide(ctx, "fresh", 1, poll(i))
		if err != nil {
			t.Fatal(err)
		}
		got[i] = d
		if d.Allowed {
			admitted++
		}
	}
	// A Store new at poll k, for each k in the first two windows; the first to agree with s on
	// every poll from two windows on is where s counted normally again.
	resumed := -1
	for k := 0; k <= 2*perWindow && resumed < 0; k++ {
		ref, same := New(limit, w, nil), true
		for i := k; i < polls && same; i++ {
			d, _ := ref.Decide(ctx, "fresh", 1, poll(i))
			same = i < 2*perWindow || d == got[i]
		}
		if same {
			resumed = k
		}
	}
	ref, refAdmitted := New(limit, w, nil), 0
	for i := range polls {
		if d, _ := ref.Decide(ctx, "fresh", 1, poll(i)); d.Allowed {
			refAdmitted++
		}
	}
	t.Logf("step back %v, window %v: the client at its limit told to wait %v; the fresh client admitted %d times in %d polls, %d by a Store new at the step", step, w, retry.Sub(after), admitted, polls, refAdmitted)
	if resumed < 0 {
		t.Errorf("from two windows after the step on, the fresh client is not decided as by any Store new in those two windows")
	} else {
		t.Logf("decided as by a Store new %v after the step", poll(resumed).Sub(after))
	}
	if counter.back > 1 {
		t.Errorf("the counter was given an older window than the one before %d times, want at most once", counter.back)
	}
}

// TestStalledRequests has single requests reach Decide up to an hour after they read the
// clock, each between requests on time, as from goroutines stalled that long. They are not a
// step of the clock: each is decided at the latest instant, like any request late to the lock,
// with its waits lengthened by two windows at most, and the counter is never given an older
// window, nor counts a key past the limit in one.
func TestStalledRequests(t *testing.T) {
	const w, limit = time.Second, 5
	ledger := newWindowLedger(w)
	s := New(limit, w, ledger)
	rng := rand.New(rand.NewPCG(3, 4))
	clock := t0
	var stalled int
	for i := range 2000 {
		clock = clock.Add(time.Duration(rng.Int64N(int64(w / 20))))
		now := clock
		if i%2 == 1 && rng.IntN(2) == 0 {
			now = now.Add(-time.Duration(rng.Int64N(int64(time.Hour))))
			stalled++
		}
		key := []string{"a", "b", "c"}[rng.IntN(3)]
		d, err := s.Decide(context.Background(), key, 1, now)
		if err != nil {
			t.Fatal(err)
		}
		if !d.Allowed && (d.RetryAfter <= 0 || d.RetryAfter > 4*w) {
			t.Fatalf("refused %s at %v with RetryAfter %v", key, now.Sub(t0), d.RetryAfter)
		}
	}
	ledger.check(t, limit)
	if stalled == 0 {
		t.Fatal("no request stalled: the pattern does not test anything")
	}
}

// windowsBack is a LimitCounter that counts the calls naming an older window than the call
// before it did.
type windowsBack struct {
	httprate.LimitCounter
	mu     sync.Mutex
	latest time.Time
	back   int
}

func (c *windowsBack) see(window time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if window.Before(c.latest) {
		c.back++
	}
	c.latest = window
}

func (c *windowsBack) Get(key string, curr, prev time.Time) (int, int, error) {
	c.see(curr)
	return c.LimitCounter.Get(key, curr, prev)
}

func (c *windowsBack) IncrementBy(key string, curr time.Time, n int) error {
	c.see(curr)
	return c.LimitCounter.IncrementBy(key, curr, n)
}

// TestStaleInstants decides requests for a few busy keys and a stream of new
// ones at readings up to two windows stale, one after another, and checks on a ledger of the
// counter's calls that the windows it is given never go back and that no key is counted past
// the limit in any window. Without the guard, some of these readings reset httprate's
// in-memory counter for every key.
func TestStaleInstants(t *testing.T) {
	for seed := range uint64(20) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { staleInstants(t, seed) })
	}
}

func staleInstants(t *testing.T, seed uint64) {
	const w, limit = time.Second, 5
	ledger := newWindowLedger(w)
	s := New(limit, w, ledger)
	rng := rand.New(rand.NewPCG(seed, 7))
	clock := t0
	var refused int
	for i := range 2000 {
		clock = clock.Add(time.Duration(rng.Int64N(int64(w / 20))))
		now := clock
		if rng.IntN(4) == 0 {
			now = now.Add(-time.Duration(rng.Int64N(int64(2 * w))))
		}
		key := []string{"a", "b", "c"}[rng.IntN(3)]
		if rng.IntN(3) == 0 {
			key = fmt.Sprint("new", i)
		}
		d, err := s.Decide(context.Background(), key, 1, now)
		if err != nil {
			t.Fatal(err)
		}
		if !d.Allowed {
			refused++
			if d.RetryAfter <= 0 {
				t.Fatalf("refused %s at %v with RetryAfter %v", key, now.Sub(t0), d.RetryAfter)
			}
		}
	}
	ledger.check(t, limit)
	if refused == 0 {
		t.Fatalf("nothing refused: the pattern does not test anything")
	}
}

// TestConcurrentWindows runs goroutines on the real clock over many short
// windows, each reading the clock and then yielding before Decide, so that readings often
// reach Decide after later ones. Whatever the scheduling, the counter's ledger must show
// windows that never go back and no key counted past the limit in a window (the window
// being the one the limiter decided in, which it hands the counter). It is one-sided: a
// loaded machine interleaves less, which can hide the fault but not invent one.
func TestConcurrentWindows(t *testing.T) {
	const w, limit = 20 * time.Millisecond, 5
	ledger := newWindowLedger(w)
	s := New(limit, w, yieldingCounter{ledger})
	deadline := time.Now().Add(200 * time.Millisecond)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := 0; time.Now().Before(deadline); i++ {
				key := []string{"a", "b"}[(g+i)%2]
				if i%3 == 0 {
					key = fmt.Sprint("new", g, "-", i)
				}
				now := time.Now()
				runtime.Gosched()
				if _, err := s.Decide(context.Background(), key, 1, now); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	ledger.check(t, limit)
}

// windowLedger is a LimitCounter, httprate's in-memory one, that also records what was added
// per key and window, and every call that named a window older than one named before.
type windowLedger struct {
	counter httprate.LimitCounter
	mu      sync.Mutex
	latest  time.Time
	added   map[ledgerEntry]int
	back    []string
}

type ledgerEntry struct {
	key    string
	window time.Time
}

func newWindowLedger(w time.Duration) *windowLedger {
	return &windowLedger{counter: httprate.NewLocalLimitCounter(w), added: make(map[ledgerEntry]int)}
}

func (l *windowLedger) Config(limit int, w time.Duration) { l.counter.Config(limit, w) }

func (l *windowLedger) Increment(key string, curr time.Time) error {
	return l.IncrementBy(key, curr, 1)
}

func (l *windowLedger) Get(key string, curr, prev time.Time) (int, int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.see("Get", key, curr)
	return l.counter.Get(key, curr, prev)
}

func (l *windowLedger) IncrementBy(key string, curr time.Time, n int) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.see("IncrementBy", key, curr)
	l.added[ledgerEntry{key, curr}] += n
	return l.counter.IncrementBy(key, curr, n)
}

// see records a call for window curr; l.mu is held.
func (l *windowLedger) see(call, key string, curr time.Time) {
	if curr.Before(l.latest) {
		if len(l.back) < 5 {
			l.back = append(l.back, fmt.Sprintf("%s(%q) for the window at %v after one at %v", call, key, curr.Sub(t0), l.latest.Sub(t0)))
		}
		return
	}
	l.latest = curr
}

// check fails t if a call went back a window or a key was counted past limit in a window.
func (l *windowLedger) check(t *testing.T, limit int) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, b := range l.back {
		t.Errorf("counter called back in time: %s", b)
	}
	over := 0
	for e, n := range l.added {
		if n > limit {
			if over++; over <= 5 {
				t.Errorf("%q counted %d times in the window at %v, over the limit of %d", e.key, n, e.window.Sub(t0), limit)
			}
		}
	}
	if over > 5 {
		t.Errorf("and %d more windows over the limit", over-5)
	}
}

// yieldingCounter is a LimitCounter that lets other goroutines run after every read, as a
// counter across a network would, so that a read and an increment not made one step interleave.
type yieldingCounter struct{ httprate.LimitCounter }

func (c yieldingCounter) Get(key string, curr, prev time.Time) (int, int, error) {
	a, b, err := c.LimitCounter.Get(key, curr, prev)
	runtime.Gosched()
	return a, b, err
}

// failingCounter is a LimitCounter whose Get or IncrementBy fails on demand.
type failingCounter struct {
	httprate.LimitCounter
	failGet, failIncrement bool
	configured             [2]int64
}

var errCounter = errors.New("counter down: secret detail")

func (c *failingCounter) Config(limit int, w time.Duration) {
	c.configured = [2]int64{int64(limit), int64(w)}
	c.LimitCounter.Config(limit, w)
}

func (c *failingCounter) Get(key string, curr, prev time.Time) (int, int, error) {
	if c.failGet {
		return 0, 0, errCounter
	}
	return c.LimitCounter.Get(key, curr, prev)
}

func (c *failingCounter) IncrementBy(key string, curr time.Time, n int) error {
	if c.failIncrement {
		return errCounter
	}
	return c.LimitCounter.IncrementBy(key, curr, n)
}

// TestCounterErrors checks that a counter's errors come back from Decide, that
// the middleware answers them 503 without their text, and that nothing is counted meanwhile.
func TestCounterErrors(t *testing.T) {
	c := &failingCounter{LimitCounter: httprate.NewLocalLimitCounter(time.Second)}
	s := New(1, time.Second, c)
	if c.configured != [2]int64{1, int64(time.Second)} {
		t.Fatalf("Config got %v, want the limit and window", c.configured)
	}
	var hooked []error
	h := retryafter.LimitWith(s, retryafter.WithClock(func() time.Time { return t0 }), retryafter.WithErrorHook(func(_ *http.Request, err error) { hooked = append(hooked, err) }))(ok)
	for _, fail := range []struct{ get, inc bool }{{true, false}, {false, true}} {
		c.failGet, c.failIncrement = fail.get, fail.inc
		if _, err := s.Decide(context.Background(), "k", 1, t0); !errors.Is(err, errCounter) {
			t.Fatalf("%+v: Decide error %v, want the counter's", fail, err)
		}
		w := serve(h, http.MethodGet, "192.0.2.1:1")
		wantRefusal(t, w, http.StatusServiceUnavailable, t0)
		if body := w.Body.String(); body != "Service Unavailable\n" {
			t.Fatalf("body %q", body)
		}
	}
	if len(hooked) != 2 {
		t.Fatalf("error hook saw %v", hooked)
	}
	c.failGet, c.failIncrement = false, false
	if d, _ := s.Decide(context.Background(), "k", 1, t0); !d.Allowed {
		t.Fatalf("first request after the counter recovered refused: the failures were counted")
	}
}

// panickingCounter is a LimitCounter whose Get or IncrementBy panics once, as a counter with a
// bug might: the server recovers the handler's panic and goes on serving.
type panickingCounter struct {
	httprate.LimitCounter
	call  string // "Get" or "IncrementBy"
	armed bool
}

var errCounterBug = errors.New("counter bug")

func (c *panickingCounter) Get(key string, curr, prev time.Time) (int, int, error) {
	if c.call == "Get" && c.armed {
		c.armed = false
		panic(errCounterBug)
	}
	return c.LimitCounter.Get(key, curr, prev)
}

func (c *panickingCounter) IncrementBy(key string, curr time.Time, n int) error {
	if c.call == "IncrementBy" && c.armed {
		c.armed = false
		panic(errCounterBug)
	}
	return c.LimitCounter.IncrementBy(key, curr, n)
}

// TestCounterPanics has the counter panic once in each of its calls. The panic must reach
// Decide's caller as it was (net/http recovers it), and leave no part of the key space locked:
// the same key, the next windows (moving to them locks every part) and other keys are then
// decided as if the panicking request had not come. A lock left held would hang them, so they
// run under a deadline that only a hang reaches.
func TestCounterPanics(t *testing.T) {
	ctx := context.Background()
	for _, call := range []string{"Get", "IncrementBy"} {
		t.Run(call, func(t *testing.T) {
			c := &panickingCounter{LimitCounter: httprate.NewLocalLimitCounter(time.Second), call: call}
			s := New(2, time.Second, c)
			if d, _ := s.Decide(ctx, "k", 1, t0); !d.Allowed {
				t.Fatalf("first request refused: %+v", d)
			}
			c.armed = true
			func() {
				defer func() {
					if r := recover(); r != errCounterBug {
						t.Fatalf("Decide recovered %v, want the counter's own panic", r)
					}
				}()
				d, err := s.Decide(ctx, "k", 1, t0)
				t.Fatalf("Decide returned %+v, %v; want the counter's panic", d, err)
			}()
			for i := range s.parts {
				if !s.parts[i].mu.TryLock() {
					t.Fatalf("part %d is still locked after the counter panicked", i)
				}
				s.parts[i].mu.Unlock()
			}

			done := make(chan string)
			go func() {
				defer close(done)
				// The panicking request counted nothing: one more fits at t0, then none.
				for i, want := range []bool{true, false} {
					if d, _ := s.Decide(ctx, "k", 1, t0); d.Allowed != want {
						done <- fmt.Sprintf("k at t0, request %d after the panic: %+v, want allowed=%v", i, d, want)
						return
					}
				}
				// Two windows on, every count has decayed.
				for _, key := range []string{"k", "other", "k"} {
					if d, _ := s.Decide(ctx, key, 1, t0.Add(2*time.Second)); !d.Allowed {
						done <- fmt.Sprintf("%s two windows after the panic: %+v", key, d)
						return
					}
				}
			}()
			select {
			case msg, ok := <-done:
				if ok {
					t.Fatal(msg)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Decide still blocked 10s after the counter's panic: a lock was left held")
			}
		})
	}
}

func TestNewPanics(t *testing.T) {
	for _, tt := range []struct {
		limit  int
		window time.Duration
	}{{0, time.Second}, {-1, time.Second}, {1, 0}, {1, -time.Second}, {1, maxWindow + 1}} {
		func() {
			defer func() {
				if msg, _ := recover().(string); !strings.HasPrefix(msg, "httpratestore: ") {
					t.Errorf("New(%d, %v) panicked with %q, want a panic starting %q", tt.limit, tt.window, msg, "httpratestore: ")
				}
			}()
			New(tt.limit, tt.window, nil)
		}()
	}
}

func BenchmarkDecide(b *testing.B) {
	ctx := context.Background()
	b.Run("allowed", func(b *testing.B) {
		s := New(1<<30, time.Minute, nil)
		b.ReportAllocs()
		for b.Loop() {
			s.Decide(ctx, "192.0.2.1", 1, t0)
		}
	})
	b.Run("refused", func(b *testing.B) {
		s := New(100, time.Minute, nil)
		for range 100 {
			s.Decide(ctx, "192.0.2.1", 1, t0)
		}
		b.ReportAllocs()
		for b.Loop() {
			if d, _ := s.Decide(ctx, "192.0.2.1", 1, t0.Add(30*time.Second)); d.Allowed {
				b.Fatal("allowed")
			}
		}
	})
}

// TestFieldsThroughLimitWith gives the rate-limit options to retryafter.LimitWith only: the
// Store reports its quota all the same, so the fields appear.
func TestFieldsThroughLimitWith(t *testing.T) {
	clk := newClock(t0)
	h := retryafter.LimitWith(New(3, time.Minute, nil), retryafter.WithClock(clk.Now), retryafter.WithLegacyRateLimitFields(true))(ok)
	w := serve(h, "GET", "192.0.2.9:1")
	if got := w.Header().Get("X-RateLimit-Limit"); got != "3" {
		t.Fatalf("X-RateLimit-Limit = %q, want 3", got)
	}
	if got := w.Header().Get("X-RateLimit-Remaining"); got != "2" {
		t.Fatalf("X-RateLimit-Remaining = %q, want 2", got)
	}
}

// TestHugeCostThroughLimitWith sends 100 requests at 10 a minute whose cost comes from a
// header, as a batch size does: one of the largest int after the first request wrapped the
// key's count negative, after which every request was admitted. Only the 10 of cost 1 that fit
// may be.
func TestHugeCostThroughLimitWith(t *testing.T) {
	clk := newClock(t0)
	cost := func(r *http.Request) int {
		n, err := strconv.Atoi(r.Header.Get("Batch"))
		if err != nil {
			return 1
		}
		return n
	}
	h := retryafter.LimitWith(New(10, time.Minute, nil), retryafter.WithClock(clk.Now), retryafter.WithCost(cost))(ok)
	admitted := 0
	for i := range 100 {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = "192.0.2.9:1"
		if i%10 == 1 {
			r.Header.Set("Batch", strconv.Itoa(math.MaxInt-i/10))
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code == http.StatusOK {
			admitted++
		}
		clk.Advance(10 * time.Millisecond)
	}
	if admitted != 10 {
		t.Fatalf("100 requests at 10 a minute, some of a cost near the largest int: %d admitted, want 10", admitted)
	}
}

// TestCountsNearMaxInt decides random costs on limits from half the largest int to the
// largest, over instants that cross windows, so that the previous window weighs: after every
// admission the current window's count lies between the cost and the limit (it never wraps),
// and a request admitted is one whose cost fits the room the counts leave, which Remaining
// then reports from 0 to the limit.
func TestCountsNearMaxInt(t *testing.T) {
	rng := rand.New(rand.NewPCG(55, 3))
	ctx := context.Background()
	for range 200 {
		limit := math.MaxInt - rng.IntN(math.MaxInt/2)
		if rng.IntN(4) == 0 {
			limit = math.MaxInt - rng.IntN(4096)
		}
		w := time.Duration(1 + rng.Int64N(int64(time.Hour)))
		counter := httprate.NewLocalLimitCounter(w)
		s := New(limit, w, counter)
		now := t0.Truncate(w)
		remaining := limit
		for range 20 {
			var cost int
			switch rng.IntN(5) {
			case 0:
				cost = math.MaxInt - rng.IntN(1024)
			case 1:
				cost = max(0, remaining+rng.IntN(4097)-2048)
			case 2:
				cost = rng.IntN(limit) + 1
			case 3:
				cost = 1 + rng.IntN(1<<20)
			default:
				cost = limit - rng.IntN(2048)
			}
			d, err := s.Decide(ctx, "k", cost, now)
			if err != nil {
				t.Fatal(err)
			}
			remaining = d.Remaining
			if d.Remaining < 0 || d.Remaining > limit {
				t.Fatalf("limit %d, cost %d: Remaining %d outside 0 to the limit", limit, cost, d.Remaining)
			}
			window := now.UTC().Truncate(w)
			curr, _, err := counter.Get("k", window, window.Add(-w))
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed && cost > 0 && (curr < cost || curr > limit) {
				t.Fatalf("limit %d, cost %d admitted: the window's count is %d, outside the cost to the limit", limit, cost, curr)
			}
			if rng.IntN(3) == 0 {
				now = now.Add(time.Duration(rng.Int64N(int64(2 * w))))
			}
		}
	}
}
