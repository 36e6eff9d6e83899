package retryafter

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/retryafter/retryafter/edge"
	"golang.org/x/time/rate"
)

// waitResult is what became of one request of waitFlood: when it was served (or refused), its
// status and its Retry-After.
type waitResult struct {
	at         time.Duration
	status     int
	retryAfter string
}

// waitFlood sends n requests at once through h, from remote(i), and returns what became of each,
// timed from their start, inside a synctest bubble.
func waitFlood(h http.Handler, n int, remote func(i int) string) []waitResult {
	start := time.Now()
	res := make([]waitResult, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			w := serve(h, "GET", remote(i))
			res[i] = waitResult{time.Since(start), w.Code, w.Header().Get("Retry-After")}
		})
	}
	wg.Wait()
	return res
}

// checkQueue checks that 11 of res were served, one at each 100 ms from 0 to 1000 ms, within a
// millisecond of its place, and the 12th refused with Retry-After: 2, at once.
func checkQueue(t *testing.T, res []waitResult) {
	t.Helper()
	places := make(map[time.Duration]bool)
	refused := 0
	for _, r := range res {
		switch r.status {
		case http.StatusOK:
			place := r.at.Round(100 * time.Millisecond)
			if d := r.at - place; d < -time.Millisecond || d > time.Millisecond || places[place] {
				t.Errorf("served at %v: not within 1 ms of a free place", r.at)
			}
			places[place] = true
		case http.StatusTooManyRequests:
			refused++
			if r.at != 0 || r.retryAfter != "2" {
				t.Errorf("refused at %v with Retry-After %q, want at once with 2", r.at, r.retryAfter)
			}
		default:
			t.Errorf("status %d", r.status)
		}
	}
	if len(places) != 11 || refused != 1 {
		t.Errorf("%d served, %d refused; want 11 and 1", len(places), refused)
	}
}

// TestWaitQueue: 12 requests of one client at once at 10/s, bursts of 1, WithWait(1 s): 11
// are served at 0, 100, …, 1000 ms, the 12th refused with the Retry-After that admits it.
func TestWaitQueue(t *testing.T) {
	for name, l := range map[string]func() Limiter{
		"TokenBucket": func() Limiter { return NewTokenBucket(10, 1) },
		"All": func() Limiter {
			return All(NewTokenBucket(10, 1), Shared(NewTokenBucket(1000, 100), "all"))
		},
		"All of two": func() Limiter {
			return All(NewTokenBucket(1000, 100), Shared(NewTokenBucket(10, 1), "all"))
		},
		"Shared": func() Limiter { return Shared(NewTokenBucket(10, 1), "all") },
	} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := LimitWith(l(), WithWait(time.Second))(ok)
				checkQueue(t, waitFlood(h, 12, func(int) string { return "192.0.2.1:1" }))
				// The Retry-After of the refusal admits at once.
				time.Sleep(2 * time.Second)
				start := time.Now()
				if w := serve(h, "GET", "192.0.2.1:1"); w.Code != http.StatusOK || time.Since(start) != 0 {
					t.Errorf("after Retry-After: %d after %v, want 200 at once", w.Code, time.Since(start))
				}
			})
		})
	}
}

// TestWaitOffByDefault: without WithWait, the same 12 requests get one 200 and 11 refusals, at
// once.
func TestWaitOffByDefault(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := Limit(10, 1)(ok)
		served := 0
		for _, r := range waitFlood(h, 12, func(int) string { return "192.0.2.1:1" }) {
			if r.at != 0 {
				t.Errorf("answered after %v", r.at)
			}
			if r.status == http.StatusOK {
				served++
			}
		}
		if served != 1 {
			t.Errorf("%d served, want 1", served)
		}
	})
}

// TestWaitDeadline: a request whose context ends in 50 ms while its wait is 100 ms is refused at
// once, and spends nothing.
func TestWaitDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := Limit(10, 1, WithWait(time.Second))(ok)
		serve(h, "GET", "192.0.2.1:1")
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		r := newRequest("GET", "192.0.2.1:1").WithContext(ctx)
		if w := serveRequest(h, r); w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") != "1" {
			t.Errorf("a request that would outlive its deadline: %d, Retry-After %q; want 429, 1", w.Code, w.Header().Get("Retry-After"))
		}
		if ctx.Err() != nil {
			t.Error("not refused at once")
		}
		// Nothing was spent: the next request waits its 100 ms only.
		start := time.Now()
		if w := serve(h, "GET", "192.0.2.1:1"); w.Code != http.StatusOK || time.Since(start) != 100*time.Millisecond-slack {
			t.Errorf("then: %d after %v, want 200 after 100 ms", w.Code, time.Since(start))
		}
	})
}

// TestWaitHangUp: a waiting request whose client hangs up lets the next request to arrive be
// served 100 ms sooner; the one that hung up is reported as canceled.
func TestWaitHangUp(t *testing.T) {
	for name, l := range map[string]func() Limiter{
		"TokenBucket": func() Limiter { return NewTokenBucket(10, 1) },
		"All":         func() Limiter { return All(NewTokenBucket(10, 1), Shared(NewTokenBucket(10, 1), "all")) },
	} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var outcomes []Outcome
				var mu sync.Mutex
				hook := WithDecisionHook(func(_ *http.Request, o Outcome, _ Decision) {
					mu.Lock()
					outcomes = append(outcomes, o)
					mu.Unlock()
				})
				h := LimitWith(l(), WithWait(time.Second), hook)(ok)
				start := time.Now()
				serve(h, "GET", "192.0.2.1:1") // at 0
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan int)
				go func() { done <- serveRequest(h, newRequest("GET", "192.0.2.1:1").WithContext(ctx)).Code }()
				time.Sleep(50 * time.Millisecond)
				cancel()
				if code := <-done; code != http.StatusServiceUnavailable {
					t.Errorf("the request that hung up: %d", code)
				}
				time.Sleep(10 * time.Millisecond)
				serve(h, "GET", "192.0.2.1:1")
				if got := time.Since(start); got != 100*time.Millisecond-slack {
					t.Errorf("the next request was served at %v, want at 100 ms (its place given back)", got)
				}
				want := []Outcome{edge.Admitted, edge.FailedClosed, edge.Waited}
				if fmt.Sprint(outcomes) != fmt.Sprint(want) {
					t.Errorf("outcomes %v, want %v", outcomes, want)
				}
			})
		})
	}
}

// TestWaitCapAcrossKeys: under a flood of distinct clients that all wait for a shared limit, no
// more wait at once than WithMaxWaiting allows; the others are refused at once.
func TestWaitCapAcrossKeys(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var waitedHook atomic.Int64
		hook := WithDecisionHook(func(_ *http.Request, o Outcome, _ Decision) {
			if o == edge.Waited {
				waitedHook.Add(1)
			}
		})
		l := All(NewTokenBucket(1, 1), Shared(NewTokenBucket(100, 1), "all"))
		h := LimitWith(l, WithWait(time.Hour), WithMaxWaiting(5), hook)(ok)
		res := waitFlood(h, 200, func(i int) string { return fmt.Sprintf("198.51.%d.%d:1", i/250, i%250) })
		served, waited := 0, 0
		for _, r := range res {
			if r.status == http.StatusOK {
				served++
				if r.at > 0 {
					waited++
				}
			} else if r.at != 0 {
				t.Errorf("refused after %v", r.at)
			}
		}
		if waited > 5 || waited < 1 || served > 6 || int64(waited) != waitedHook.Load() {
			t.Errorf("%d served, %d of them after a wait (%d told as edge.Waited); want at most 5 waiting", served, waited, waitedHook.Load())
		}
	})
}

// TestWaitDryRun: in a dry run a request that would wait is served at once, reported as
// DryRunWaited, and spends nothing.
func TestWaitDryRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var got []Outcome
		hook := WithDecisionHook(func(_ *http.Request, o Outcome, _ Decision) { got = append(got, o) })
		h := Limit(10, 1, WithWait(150*time.Millisecond), WithDryRun(true), hook)(ok)
		for range 3 {
			if w := serve(h, "GET", "192.0.2.1:1"); w.Code != http.StatusOK {
				t.Errorf("dry run: %d", w.Code)
			}
		}
		want := []Outcome{edge.Admitted, edge.DryRunWaited, edge.DryRunWaited}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("outcomes %v, want %v", got, want)
		}
	})
}

// TestWaitFields: the RateLimit fields of a request served after a wait are those of when it is
// served: at 1/s, bursts of 1, three requests at once; the one served at 2 s is told a token is
// back in a second or so (t=2, rounded up from 1 s and the microsecond it is served early), not
// the 3 s its bucket owed when it began to wait. The hook is told the time each waited.
func TestWaitFields(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var waited []time.Duration
		hook := WithDecisionHook(func(_ *http.Request, o Outcome, d Decision) {
			if o == edge.Waited {
				mu.Lock()
				waited = append(waited, d.RetryAfter)
				mu.Unlock()
			}
		})
		h := Limit(1, 1, WithWait(3*time.Second), WithRateLimitFields(""), hook)(ok)
		start := time.Now()
		fields := make(map[time.Duration]string)
		var wg sync.WaitGroup
		for range 3 {
			wg.Go(func() {
				w := serve(h, "GET", "192.0.2.1:1")
				mu.Lock()
				fields[time.Since(start).Round(time.Second)] = w.Header().Get("RateLimit")
				mu.Unlock()
			})
		}
		wg.Wait()
		if got, want := fields[2*time.Second], `"default";r=0;t=2`; got != want {
			t.Errorf("served at 2 s: RateLimit %q, want %q (all: %q)", got, want, fields)
		}
		slices.Sort(waited)
		if want := []time.Duration{time.Second - slack, 2*time.Second - slack}; !slices.Equal(waited, want) {
			t.Errorf("hook told of waits %v, want %v", waited, want)
		}
	})
}

// BenchmarkWaitOnAllowed: an admitted request with WithWait on, which goes through the core's
// waiter; it allocates nothing.
func BenchmarkWaitOnAllowed(b *testing.B) {
	run(b, Limit(plentyRate, plentyBurst, WithKeyFunc(hostKey), WithWait(time.Second))(okBench), requests(1), http.StatusOK)
}

// apart is a TokenBucket that combines with none.
type apart struct{ *TokenBucket }

func (apart) Combine([]edge.Layer) (Limiter, bool) { return nil, false }

// reserver is a Limiter that promises places: edge.Reserver.
type reserver interface {
	Limiter
	Reserve(context.Context, string, int, time.Time, time.Duration) (Decision, error)
	Release(context.Context, string, int, time.Time) error
}

// reservers returns the Limiters of TestReserveProperty at limit and burst: a TokenBucket, an
// All of two combined, and an All of two decided one store after the other.
func reservers(t *testing.T, limit rate.Limit, burst int) []reserver {
	apartAll := All(NewTokenBucket(limit*3, burst), Shared(apart{NewTokenBucket(limit, burst)}, "all")).(*all)
	if len(apartAll.groups) != 2 {
		t.Fatalf("%d groups", len(apartAll.groups))
	}
	return []reserver{
		NewTokenBucket(limit, burst),
		All(NewTokenBucket(limit, burst), Shared(NewTokenBucket(limit*3, burst), "all")).(*all),
		apartAll,
	}
}

// TestReserveProperty: over random policies, costs, waits and instants, through a TokenBucket
// and an All of two, combined or not: Reserve admits at a place exactly when it is at most
// maxWait away, and otherwise refuses and spends nothing; Release of a place gives back what it
// spent.
func TestReserveProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(59, 1))
	for trial := range 2000 {
		l := reservers(t, rate.Limit(0.05+rng.Float64()*50), 1+rng.IntN(10))[trial%3]
		now := t0
		for step := range 20 {
			now = now.Add(time.Duration(rng.Int64N(int64(time.Second))))
			if err := reserveStep(l, rng, now); err != nil {
				t.Fatalf("trial %d step %d: %v", trial, step, err)
			}
		}
	}
}

// reserveStep asks l for a random cost at now: when it is refused at once with a wait, a bound
// a nanosecond short of the wait refuses with that wait and spends nothing, and a bound at or past it admits at
// that very place; it may then release the place, which must give back what it spent.
func reserveStep(l reserver, rng *rand.Rand, now time.Time) error {
	ctx := context.Background()
	before, _ := l.Decide(ctx, "k", 0, now)
	cost := 1 + rng.IntN(before.Limit)
	first, err := l.Reserve(ctx, "k", cost, now, 0)
	if err != nil || first.Allowed || first.RetryAfter >= rate.InfDuration {
		return err
	}
	before, _ = l.Decide(ctx, "k", 0, now)
	short, err := l.Reserve(ctx, "k", cost, now, first.RetryAfter-1)
	after, _ := l.Decide(ctx, "k", 0, now)
	if err != nil || short.Allowed || short.RetryAfter != first.RetryAfter || after.Remaining != before.Remaining || after.Reset != before.Reset {
		return fmt.Errorf("a nanosecond short of a wait of %v: %+v, %v; quota %+v then %+v", first.RetryAfter, short, err, before, after)
	}
	most := first.RetryAfter // the bound itself, or past it
	if rng.IntN(2) == 0 {
		most += time.Duration(rng.Int64N(int64(time.Second)))
	}
	d, err := l.Reserve(ctx, "k", cost, now, most)
	if err != nil || !d.Allowed || d.RetryAfter != first.RetryAfter {
		return fmt.Errorf("within %v of a place %v away: %+v, %v", most, first.RetryAfter, d, err)
	}
	if rng.IntN(2) == 0 {
		return nil
	}
	return releaseBack(l, cost, now, before)
}

// releaseBack releases a place of cost that l gave at now, and checks that l's quota is then as
// it was before, within the microsecond of float arithmetic.
func releaseBack(l reserver, cost int, now time.Time, before Decision) error {
	ctx := context.Background()
	if err := l.Release(ctx, "k", cost, now); err != nil {
		return err
	}
	back, _ := l.Decide(ctx, "k", 0, now)
	if back.Remaining != before.Remaining || (back.Reset-before.Reset).Abs() > time.Microsecond {
		return fmt.Errorf("released to %+v, want %+v", back, before)
	}
	return nil
}

// TestWaitSpreadBooksOnce: behind All(per client, Spread(service)) with WithWait, a request its
// own bucket would let wait but the service's Spread refuses is refused once the place is given
// back, with the wait it has without WithWait; the Spread, which books the second it tells, is
// not asked again for it, so no second is lost and the next client is told the next one.
func TestWaitSpreadBooksOnce(t *testing.T) {
	for _, wait := range []time.Duration{0, time.Second} {
		synctest.Test(t, func(t *testing.T) {
			l := All(NewTokenBucket(10, 1), Spread(Shared(NewTokenBucket(1, 1), "all"), 1, 1))
			h := LimitWith(l, WithWait(wait))(ok)
			if w := serve(h, "GET", "192.0.2.1:1"); w.Code != http.StatusOK {
				t.Fatalf("first: %d", w.Code)
			}
			// The same client at once: its own bucket has a place in 100 ms, within the wait;
			// the service refuses it for 1 s.
			w := serve(h, "GET", "192.0.2.1:1")
			if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") != "1" {
				t.Errorf("WithWait(%v): %d, Retry-After %q, want 429 and 1", wait, w.Code, w.Header().Get("Retry-After"))
			}
			// Another client, refused by the service alone, is spread to the next second.
			if got := serve(h, "GET", "192.0.2.2:1").Header().Get("Retry-After"); got != "2" {
				t.Errorf("WithWait(%v): the next client is told Retry-After %q, want 2", wait, got)
			}
		})
	}
}

// TestWaitDuringUnconfirmedStep: a place given while a step back of the clock is not yet
// confirmed is waited out by the server's own timer, which the step does not concern: it is
// at most maxWait away, and WithWait(1s) holds a request at most 1 s. The step, told to a
// refused client in case it comes back on the clock's old line, was added to places too, which
// held a request 3 s under WithWait(1s).
func TestWaitDuringUnconfirmedStep(t *testing.T) {
	ctx := context.Background()
	for _, step := range []time.Duration{1500 * time.Millisecond, 2 * time.Second, 3 * time.Second} {
		b := NewTokenBucket(1, 1)
		b.Decide(ctx, "k", 1, t0)
		if d, _ := b.Reserve(ctx, "k", 1, t0.Add(-step), time.Second); d.Allowed && d.RetryAfter > time.Second {
			t.Errorf("step back %v: a place %v ahead, beyond maxWait 1s", step, d.RetryAfter)
		}
		a := All(NewTokenBucket(1, 1), NewTokenBucket(10, 10)).(edge.Reserver)
		a.Reserve(ctx, "k", 1, t0, 0)
		if d, _ := a.Reserve(ctx, "k", 1, t0.Add(-step), time.Second); d.Allowed && d.RetryAfter > time.Second {
			t.Errorf("All, step back %v: a place %v ahead, beyond maxWait 1s", step, d.RetryAfter)
		}
	}
	synctest.Test(t, func(t *testing.T) {
		now := t0
		h := LimitWith(NewTokenBucket(1, 1), WithWait(time.Second), WithClock(func() time.Time { return now }))(ok)
		serve(h, "GET", "192.0.2.1:1")
		now = t0.Add(-2 * time.Second)
		start := time.Now()
		w := serve(h, "GET", "192.0.2.1:1")
		if held := time.Since(start); held > time.Second {
			t.Errorf("WithWait(1s): %d after holding the request %v", w.Code, held)
		}
	})
}
