package redisstore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/time/rate"

	"github.com/retryafter/retryafter"
)

// decideLeased calls l.Decide and fails the test on an error.
func decideLeased(t *testing.T, l *Leased, key string, cost int, now time.Time) retryafter.Decision {
	t.Helper()
	d, err := l.Decide(context.Background(), key, cost, now)
	if err != nil {
		t.Fatalf("Leased.Decide(%q, %d, %v): %v", key, cost, now, err)
	}
	return d
}

// TestLeasedAgreesWithStore runs random requests, charges and refunds, on an injected clock,
// through one replica's Leased limiter and through a Store on keys of its own: every Decision must
// be the same, exactly (verdict, RetryAfter, Limit, Remaining, Reset, Policy), for every rate and
// burst of the property tests and lots of 1, 3 and 16, costs of 0, above the lot and above the
// burst included. So a replica alone admits what a single Store would, no more and no less, with
// the same waits, although it asks Redis only when its lease falls short.
func TestLeasedAgreesWithStore(t *testing.T) {
	client := newClient(t, sharedAddr(t))
	for _, c := range configs {
		for _, lot := range []int{1, 3, 16} {
			t.Run(fmt.Sprintf("%v/%d/lot %d", c.limit, c.burst, lot), func(t *testing.T) {
				opts := []Option{WithTimeout(testTimeout), withInjectedClock()}
				plain := New(client, c.limit, c.burst, append(opts, WithPrefix(testPrefix(t)))...)
				leased := New(client, c.limit, c.burst, append(opts, WithPrefix(testPrefix(t)))...).Leased(lot)
				rng := rand.New(rand.NewPCG(uint64(c.burst), uint64(lot)))
				step := max(2*plain.own.interval/int64(c.burst), 2)
				now := t0
				costs := []int{0, 1, 1, 1, 1, 2, lot, lot + 1, c.burst, c.burst + 1}
				requests, charges := 0, 0
				for i := range 600 {
					switch rng.IntN(20) {
					case 0:
						now = now.Add(time.Duration(rng.Int64N(plain.own.interval * int64(c.burst))))
					case 1, 2:
					default:
						now = now.Add(time.Duration(rng.Int64N(step)))
					}
					switch r := rng.IntN(20); {
					case r < 2: // a charge afterwards
						cost := 1 + rng.IntN(3)
						charge(t, plain, "k", cost, now)
						chargeLeased(t, leased, "k", cost, now)
						charges++
					case r < 4: // a refund, as All gives
						cost := -1 - rng.IntN(2)
						charge(t, plain, "k", cost, now)
						chargeLeased(t, leased, "k", cost, now)
						charges++
					default:
						cost := costs[rng.IntN(len(costs))]
						if rng.IntN(4) == 0 {
							cost = rng.IntN(c.burst + 2)
						}
						want := decide(t, plain, "k", cost, now)
						got := decideLeased(t, leased, "k", cost, now)
						if got != want {
							t.Fatalf("request %d, cost %d at %v: %+v, a Store says %+v", i, cost, now.Sub(t0), got, want)
						}
						requests++
					}
				}
				if trips := leased.RoundTrips(); trips > uint64(requests+charges) {
					t.Fatalf("%d round trips for %d requests and %d charges", trips, requests, charges)
				}
				t.Logf("%d requests and %d charges in %d round trips", requests, charges, leased.RoundTrips())
			})
		}
	}
}

// chargeLeased calls l.Charge and fails the test on an error.
func chargeLeased(t *testing.T, l *Leased, key string, cost int, now time.Time) {
	t.Helper()
	if err := l.Charge(context.Background(), key, cost, now); err != nil {
		t.Fatalf("Leased.Charge(%q, %d, %v): %v", key, cost, now, err)
	}
}

// TestLeasedLocal checks what a replica decides without Redis: the requests its lease covers,
// and, once it holds nothing, the refusals of a bucket that cannot hold their cost yet, with the
// exact wait; a negative cost is an error and asks nothing. The lease is taken with the first
// request, all or nothing for a cost above the lot.
func TestLeasedLocal(t *testing.T) {
	client := newClient(t, sharedAddr(t))
	const every, burst, lot = time.Second, 10, 4
	s := New(client, rate.Every(every), burst, WithPrefix(testPrefix(t)), WithTimeout(testTimeout), withInjectedClock())
	l := s.Leased(lot)
	if d := decideLeased(t, l, "k", 1, t0); !d.Allowed || d.Remaining != burst-1 || l.RoundTrips() != 1 {
		t.Fatalf("the first request: %+v after %d round trips, want admitted with %d left in 1", d, l.RoundTrips(), burst-1)
	}
	for i := range lot - 1 {
		if d := decideLeased(t, l, "k", 1, t0); !d.Allowed || d.Remaining != burst-2-i {
			t.Fatalf("request %d from the lease: %+v", i, d)
		}
	}
	if l.RoundTrips() != 1 {
		t.Fatalf("%d round trips for a lease of %d", l.RoundTrips(), lot)
	}
	// A cost above the lot is taken whole: 6 of the 6 tokens left.
	if d := decideLeased(t, l, "k", 6, t0); !d.Allowed || d.Remaining != 0 || l.RoundTrips() != 2 {
		t.Fatalf("a cost above the lot: %+v after %d round trips", d, l.RoundTrips())
	}
	// Empty bucket, empty lease: refused by the replica, exactly, until the wait is over.
	for _, c := range []struct {
		at   time.Duration
		cost int
		wait time.Duration
	}{{0, 1, every}, {300 * time.Millisecond, 1, 700 * time.Millisecond}, {time.Second / 2, 3, 5 * time.Second / 2}, {0, burst + 1, rate.InfDuration}} {
		if d := decideLeased(t, l, "k", c.cost, t0.Add(c.at)); d.Allowed || d.RetryAfter != c.wait {
			t.Fatalf("cost %d at +%v: %+v, want refused for %v", c.cost, c.at, d, c.wait)
		}
	}
	if l.RoundTrips() != 2 {
		t.Fatalf("%d round trips: the refusals asked Redis", l.RoundTrips())
	}
	if _, err := l.Decide(context.Background(), "k", -1, t0); !errors.Is(err, retryafter.ErrNegativeCost) || l.RoundTrips() != 2 {
		t.Fatalf("a negative cost: %v after %d round trips", err, l.RoundTrips())
	}
	if d := decideLeased(t, l, "k", 1, t0.Add(every)); !d.Allowed || l.RoundTrips() != 3 {
		t.Fatalf("at the end of the wait: %+v after %d round trips, want admitted by Redis", d, l.RoundTrips())
	}
}

// TestLeasedRelease checks that Release gives back what the replica holds: a Store on the same
// keys sees the bucket as if the leased tokens had never been taken.
func TestLeasedRelease(t *testing.T) {
	client := newClient(t, sharedAddr(t))
	const burst, lot = 20, 10
	prefix := testPrefix(t)
	s := New(client, rate.Every(time.Second), burst, WithPrefix(prefix), WithTimeout(testTimeout), withInjectedClock())
	l := s.Leased(lot)
	for _, key := range []string{"a", "b"} {
		decideLeased(t, l, key, 1, t0)
		if d := decide(t, s, key, 0, t0); d.Remaining != burst-lot {
			t.Fatalf("%s with a lease of %d: Redis holds %d, want %d", key, lot, d.Remaining, burst-lot)
		}
	}
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"a", "b"} {
		if d := decide(t, s, key, 0, t0); d.Remaining != burst-1 {
			t.Fatalf("%s after Release: Redis holds %d, want %d", key, d.Remaining, burst-1)
		}
	}
	// The Leased stays usable.
	if d := decideLeased(t, l, "a", 1, t0); !d.Allowed || d.Remaining != burst-2 {
		t.Fatalf("after Release: %+v", d)
	}
}

// TestLeasedRoundTrip sends requests through the middleware on an injected clock, from one
// client to one replica and, bounced at random, to three: every 429 carries a Date of now and a
// Retry-After in whole seconds, read by the bundled parser; waiting exactly that long gets the
// request through at any replica, and, with one replica, waiting a second less does not. With
// three, the replicas that refuse from what Redis last told them may be behind what the others
// spent since, and the client is then refused again: those retries are counted, and every refusal
// that Redis gave is held to the round trip.
func TestLeasedRoundTrip(t *testing.T) {
	addr := sharedAddr(t)
	for _, n := range []int{1, 3} {
		for _, c := range configs[:6] {
			t.Run(fmt.Sprintf("%d/%v/%d", n, c.limit, c.burst), func(t *testing.T) {
				clock := t0
				now := func() time.Time { return clock }
				prefix := testPrefix(t)
				var leases []*Leased
				var hs []http.Handler
				for range n {
					s := New(newClient(t, addr), c.limit, c.burst, WithPrefix(prefix), WithTimeout(testTimeout), withInjectedClock())
					l := s.Leased(max(c.burst/3, 1))
					leases = append(leases, l)
					hs = append(hs, retryafter.LimitWith(l, retryafter.WithClock(now))(okHandler))
				}
				trips := func() (n uint64) {
					for _, l := range leases {
						n += l.RoundTrips()
					}
					return n
				}
				rng := rand.New(rand.NewPCG(3, uint64(c.burst)))
				interval := time.Duration(float64(time.Second) / float64(c.limit))
				rounds, again := 0, 0
				for i := 0; rounds < 20 && i < 5000; i++ {
					clock = clock.Add(time.Duration(rng.Int64N(int64(interval) / int64(c.burst))))
					before := trips()
					w := get(hs[rng.IntN(n)], "192.0.2.1:1234")
					if w.Code == http.StatusOK {
						continue
					}
					byRedis := trips() > before
					wait := wantRefusal(t, w, clock)
					if n == 1 {
						clock = clock.Add(wait - time.Second)
						if w := get(hs[0], "192.0.2.1:1234"); w.Code != http.StatusTooManyRequests {
							t.Fatalf("a second short of Retry-After %v: %d, want 429", wait, w.Code)
						}
						clock = clock.Add(time.Second)
					} else {
						clock = clock.Add(wait)
					}
					for w := get(hs[rng.IntN(n)], "192.0.2.1:1234"); w.Code != http.StatusOK; w = get(hs[rng.IntN(n)], "192.0.2.1:1234") {
						if byRedis || n == 1 || again > 100 {
							t.Fatalf("after Retry-After %v of Redis's refusal: %d, want 200", wait, w.Code)
						}
						again++
						clock = clock.Add(wantRefusal(t, w, clock))
					}
					rounds++
				}
				if rounds < 20 {
					t.Fatalf("only %d round trips", rounds)
				}
				t.Logf("%d refusals waited out, %d refused again", rounds, again)
			})
		}
	}
}

// TestLeasedFleetBound runs 3 replicas (3 Stores, each on a client of its own) on one key, on an
// injected clock, with random costs, arrivals and replicas: the admitted cost over any stretch of
// time between two admissions is at most burst + rate × its length + the lot of each replica (the
// leases held at its start), and over the whole run from a fresh key at most burst + rate × its
// length; and the run must come near those bounds (within 2 lots a replica), so that they bind.
func TestLeasedFleetBound(t *testing.T) {
	addr := sharedAddr(t)
	const every, burst, lot, replicas = 10 * time.Millisecond, 20, 5, 3
	prefix := testPrefix(t)
	var leases []*Leased
	for range replicas {
		s := New(newClient(t, addr), rate.Every(every), burst, WithPrefix(prefix), WithTimeout(testTimeout), withInjectedClock())
		leases = append(leases, s.Leased(lot))
	}
	type admission struct {
		at   time.Duration
		cost int
	}
	var admitted []admission
	rng := rand.New(rand.NewPCG(11, 12))
	now := t0
	total := 0
	for range 3000 {
		now = now.Add(time.Duration(rng.Int64N(int64(every) / 2)))
		cost := 1 + rng.IntN(3)
		d := decideLeased(t, leases[rng.IntN(replicas)], "k", cost, now)
		if d.Allowed {
			admitted = append(admitted, admission{now.Sub(t0), cost})
			total += cost
		}
	}
	span := admitted[len(admitted)-1].at
	if bound := burst + int(span/every); total > bound || total < bound-2*lot*replicas {
		t.Fatalf("%d admitted in %v, want at most burst + rate × elapsed = %d, and near it", total, span, bound)
	}
	worst := -1 << 30
	for i := range admitted {
		sum := 0
		for j := i; j < len(admitted); j++ {
			sum += admitted[j].cost
			over := sum - (burst + int((admitted[j].at-admitted[i].at)/every))
			worst = max(worst, over)
			if over > lot*replicas {
				t.Fatalf("%d admitted in [%v, %v], %d over burst + rate × its length, more than %d", sum, admitted[i].at, admitted[j].at, over, lot*replicas)
			}
		}
	}
	t.Logf("%d admitted, most over burst + rate × a stretch: %d (bound %d)", total, worst, lot*replicas)
}

// inFlight is a redis.Scripter that counts the script calls in flight at once.
type inFlight struct {
	redis.Scripter
	now, most, calls atomic.Int64
}

func (c *inFlight) enter() {
	c.calls.Add(1)
	n := c.now.Add(1)
	for m := c.most.Load(); n > m && !c.most.CompareAndSwap(m, n); m = c.most.Load() {
	}
}

func (c *inFlight) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	c.enter()
	defer c.now.Add(-1)
	return c.Scripter.EvalSha(ctx, sha, keys, args...)
}

func (c *inFlight) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	c.enter()
	defer c.now.Add(-1)
	return c.Scripter.Eval(ctx, script, keys, args...)
}

// TestLeasedConcurrent has 3 replicas of 8 goroutines each flood one key for 300 ms, deciding by
// Redis's clock: each replica has at most one script call in flight at once (EVALSHA, or EVAL
// after it), makes fewer calls than it decides requests, and the fleet admits at most burst +
// rate × the run's length by Redis's clock (plus 1 for its microsecond), and at least the burst.
func TestLeasedConcurrent(t *testing.T) {
	addr := sharedAddr(t)
	clock := newClient(t, addr)
	const limit, burst, lot, replicas, workers, flood = 2000, 50, 10, 3, 8, 300 * time.Millisecond
	prefix := testPrefix(t)
	var leases []*Leased
	var clients []*inFlight
	for range replicas {
		c := &inFlight{Scripter: newClient(t, addr)}
		clients = append(clients, c)
		leases = append(leases, New(c, limit, burst, WithPrefix(prefix), WithTimeout(testTimeout)).Leased(lot))
	}
	var admitted, refused atomic.Int64
	requests := make([]atomic.Int64, replicas)
	var wg sync.WaitGroup
	begin := redisNow(t, clock)
	start := time.Now()
	for i, l := range leases {
		for range workers {
			wg.Go(func() {
				for n := 0; n < 1e6 && time.Since(start) < flood; n++ {
					requests[i].Add(1)
					d, err := l.Decide(context.Background(), "hot", 1, time.Now())
					switch {
					case err != nil:
						t.Error(err)
						return
					case d.Allowed:
						admitted.Add(1)
					default:
						refused.Add(1)
					}
				}
			})
		}
	}
	wg.Wait()
	elapsed := redisNow(t, clock).Sub(begin)
	if bound := burst + int64(limit*elapsed.Seconds()) + 1; admitted.Load() > bound || admitted.Load() < burst {
		t.Fatalf("%d admitted in %v, want at least the burst %d and at most burst + rate × elapsed + 1 = %d", admitted.Load(), elapsed, burst, bound)
	}
	for i, c := range clients {
		if c.most.Load() != 1 || c.calls.Load() >= requests[i].Load() {
			t.Fatalf("replica %d: %d script calls at once at most, %d calls for %d requests: want 1, and fewer", i, c.most.Load(), c.calls.Load(), requests[i].Load())
		}
	}
	t.Logf("%d admitted, %d refused in %v; script calls %d, %d, %d", admitted.Load(), refused.Load(), elapsed, clients[0].calls.Load(), clients[1].calls.Load(), clients[2].calls.Load())
}

// leaseTake answers as lease.lua does for a request of cost 1 admitted with a lease of 5 tokens,
// at 1 token a second: the bucket is full 5 s later.
func leaseTake(context.Context) *redis.Cmd {
	return redis.NewCmdResult([]any{int64(1), int64(5), int64(0), int64(5 * time.Second)}, nil)
}

// TestLeasedDown checks, on testing/synctest's clock, a Redis that stops answering: the lease the
// replica holds is still spent, without a call; then the requests that it does not cover, many at
// once, make one call, and every one of them fails with an error wrapping ErrUnavailable at the
// store's timeout exactly, the waiters too; once the store knows Redis is down, at once. No
// goroutine is left behind (synctest.Test waits for them all).
func TestLeasedDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const timeout = 150 * time.Millisecond
		fake := &fakeRedis{answer: leaseTake}
		l := New(fake, 1, 10, WithTimeout(timeout)).Leased(5)
		for i := range 5 {
			if d := decideLeased(t, l, "k", 1, time.Now()); !d.Allowed {
				t.Fatalf("request %d: %+v", i, d)
			}
		}
		if fake.calls.Load() != 1 {
			t.Fatalf("%d calls for a lease of 5", fake.calls.Load())
		}
		fake.set(frozen)
		for round := range downAfter {
			var wg sync.WaitGroup
			start := time.Now()
			for range 20 {
				wg.Go(func() {
					_, err := l.Decide(context.Background(), "k", 1, time.Now())
					if took := time.Since(start); !errors.Is(err, ErrUnavailable) || took != timeout {
						t.Errorf("round %d: %v after %v, want an error wrapping ErrUnavailable after %v", round, err, took, timeout)
					}
				})
			}
			wg.Wait()
			if want := int64(2 + round); fake.calls.Load() != want {
				t.Fatalf("round %d: %d calls, want %d: one a round", round, fake.calls.Load(), want)
			}
		}
		start := time.Now()
		if _, err := l.Decide(context.Background(), "k", 1, time.Now()); !errors.Is(err, ErrUnavailable) || time.Since(start) != 0 {
			t.Fatalf("once Redis is known to be down: %v after %v, want at once", err, time.Since(start))
		}
		// A caller's deadline sooner than the timeout is its own end, for the waiters too.
		time.Sleep(DefaultProbeInterval)
		ctx, cancel := context.WithTimeout(context.Background(), timeout/3)
		defer cancel()
		var wg sync.WaitGroup
		for range 5 {
			wg.Go(func() {
				start := time.Now()
				_, err := l.Decide(ctx, "k", 1, time.Now())
				if err == nil || errors.Is(err, ErrUnavailable) || time.Since(start) != timeout/3 {
					t.Errorf("with a deadline of %v: %v after %v, want the caller's own end", timeout/3, err, time.Since(start))
				}
			})
		}
		wg.Wait()
	})
}

// TestLeasedRealOutage takes a lease on a redis-server of the test's own, kills the server, and
// has 16 goroutines decide on the key: the lease is spent first, without Redis, then every
// request fails with an error wrapping ErrUnavailable, as the Store's would, and no goroutine is
// left behind once they have returned.
func TestLeasedRealOutage(t *testing.T) {
	srv := startServer(t)
	const lot = 8
	l := New(newClient(t, srv.Addr()), rate.Every(time.Second), 100, WithTimeout(100*time.Millisecond)).Leased(lot)
	if d := decideLeased(t, l, "k", 1, time.Now()); !d.Allowed {
		t.Fatalf("the first request: %+v", d)
	}
	srv.Stop(syscall.SIGKILL)
	goroutines := runtime.NumGoroutine()
	var admitted, failed atomic.Int64
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for range 4 {
				d, err := l.Decide(context.Background(), "k", 1, time.Now())
				switch {
				case err == nil && d.Allowed:
					admitted.Add(1)
				case errors.Is(err, ErrUnavailable):
					failed.Add(1)
				default:
					t.Errorf("Redis down: %+v, %v; want admitted from the lease, or ErrUnavailable", d, err)
				}
			}
		})
	}
	wg.Wait()
	if admitted.Load() != lot-1 || failed.Load() != 64-(lot-1) {
		t.Fatalf("%d admitted and %d failed, want the %d the lease held and the rest", admitted.Load(), failed.Load(), lot-1)
	}
	// go-redis's pool may still be closing connections: wait for the count, without sleeping
	// past it.
	for deadline := time.Now().Add(10 * time.Second); runtime.NumGoroutine() > goroutines; {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines, %d before the requests", runtime.NumGoroutine(), goroutines)
		}
		runtime.Gosched()
	}
}

// TestLeasedInAll puts a Leased shared layer in an All beside a per-client Store: a request that
// the per-client layer refuses is given back into the lease, without a round trip, so that the
// shared key's tokens in Redis and in the lease are as before; the replica's round trips are one
// per lease.
func TestLeasedInAll(t *testing.T) {
	client := newClient(t, sharedAddr(t))
	opts := []Option{WithTimeout(testTimeout), withInjectedClock()}
	perClient := New(client, rate.Every(time.Second), 1, append(opts, WithPrefix(testPrefix(t)))...)
	shared := New(client, rate.Every(time.Second), 50, append(opts, WithPrefix(testPrefix(t)))...)
	l := shared.Leased(10)
	limiter := retryafter.All(perClient, retryafter.Shared(l, "all"))
	ctx := context.Background()
	for i := range 5 {
		d, err := limiter.Decide(ctx, fmt.Sprint("client-", i), 1, t0)
		if err != nil || !d.Allowed {
			t.Fatalf("client %d's first request: %+v, %v", i, d, err)
		}
		d, err = limiter.Decide(ctx, fmt.Sprint("client-", i), 1, t0)
		if err != nil || d.Allowed || d.RetryAfter != time.Second {
			t.Fatalf("client %d's second request: %+v, %v; want refused by its own limit for 1s", i, d, err)
		}
	}
	if l.RoundTrips() != 1 {
		t.Fatalf("%d round trips for the shared layer, want 1", l.RoundTrips())
	}
	// 5 spent of the 10 leased: a peek gives the lease back and sees 50 − 5.
	if d := decideLeased(t, l, "all", 0, t0); d.Remaining != 45 {
		t.Fatalf("the shared key after 5 admitted and 5 given back: %+v, want 45 left", d)
	}
	if d := decide(t, shared, "all", 0, t0); d.Remaining != 45 {
		t.Fatalf("the shared key in Redis: %+v, want 45 left", d)
	}
}

// TestLeasedKeyBound checks that a Leased holds at most its bound of keys: the requests of keys
// beyond it are decided by the Store, as exactly, and once the keys it holds have refilled
// (the same as keys never seen) it forgets them at its next search, one every 64 requests
// beyond the bound, and leases new ones.
func TestLeasedKeyBound(t *testing.T) {
	client := newClient(t, sharedAddr(t))
	const bound, lot = 8, 4
	s := New(client, rate.Every(time.Second), 10, WithPrefix(testPrefix(t)), WithTimeout(testTimeout), withInjectedClock())
	l := s.Leased(lot)
	l.maxKeys = bound
	for k := range 3 * bound {
		key := fmt.Sprint("k", k)
		if d := decideLeased(t, l, key, 1, t0); !d.Allowed || d.Remaining != 9 {
			t.Fatalf("%s: %+v", key, d)
		}
		if d := decide(t, s, key, 0, t0); k < bound && d.Remaining != 10-lot || k >= bound && d.Remaining != 9 {
			t.Fatalf("%s in Redis: %d left, want %d with a lease and 9 without", key, d.Remaining, 10-lot)
		}
	}
	if n := l.n.Load(); n != bound {
		t.Fatalf("%d keys held, want %d", n, bound)
	}
	later := t0.Add(time.Hour) // every bucket full again
	for k := range evictEvery {
		key := fmt.Sprint("new", k)
		if d := decideLeased(t, l, key, 1, later); !d.Allowed {
			t.Fatalf("%s: %+v", key, d)
		}
	}
	// One search for keys to forget every evictEvery requests of keys beyond the bound.
	held := 0
	for k := range evictEvery {
		if _, ok := l.leases.Load(fmt.Sprint("new", k)); ok {
			held++
		}
	}
	if held != bound || l.n.Load() != bound {
		t.Fatalf("after the held keys refilled: %d new keys held, %d in all; want %d, all new", held, l.n.Load(), bound)
	}
	if _, ok := l.leases.Load("new0"); ok {
		t.Fatal("the first new key after the refill leased: a search for keys to forget before the 64th request beyond the bound")
	}
}

// TestLeasedOfPlans checks that a Store with a policy per key cannot be leased: a lease is of
// the Store's one rate and burst.
func TestLeasedOfPlans(t *testing.T) {
	s := New(keptKeys{nil}, 1, 1, WithPolicyFunc(func(string) retryafter.Policy { return retryafter.Policy{} }))
	defer func() {
		if r := fmt.Sprint(recover()); r != "redisstore: Leased of a Store with a policy per key" {
			t.Fatalf("Leased of a Store with plans: %v, want a panic", r)
		}
	}()
	s.Leased(8)
}

// TestLeasedWaitNeverShort is TestRememberedWaitNeverShort for a Leased: the wait of a refusal it
// answers itself, after Redis's refusal reached it a long one-way trip after the request was
// sent, is never shorter than Redis's.
func TestLeasedWaitNeverShort(t *testing.T) {
	client := newClient(t, sharedAddr(t))
	slow := &slowSends{Scripter: client, delay: 5 * time.Millisecond}
	l := New(slow, rate.Every(20*time.Millisecond), 1, WithPrefix(testPrefix(t)), WithTimeout(time.Second)).Leased(1)
	ctx := context.Background()
	decide := func() retryafter.Decision {
		t.Helper()
		d, err := l.Decide(ctx, "k", 1, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	checked := 0
	for round := range 3 {
		if d := decide(); !d.Allowed {
			time.Sleep(d.RetryAfter)
			continue
		}
		slow.slow.Store(true)
		refused := decide()
		slow.slow.Store(false)
		if refused.Allowed {
			continue // the bucket refilled meanwhile on a slow host
		}
		trips := l.RoundTrips()
		d := decide()
		if d.Allowed || l.RoundTrips() != trips {
			t.Fatalf("round %d: %+v after %d round trips, want refused without one", round, d, l.RoundTrips()-trips)
		}
		time.Sleep(d.RetryAfter)
		if d := decide(); !d.Allowed {
			t.Fatalf("round %d: refused %v after waiting out the replica's own wait: %+v", round, d.RetryAfter, d)
		}
		checked++
	}
	if checked == 0 {
		t.Fatal("no refusal was answered by the replica: the test checks nothing")
	}
}

// TestLeasedChargeLocal checks that a Leased's charge, while the store knows Redis to be down,
// charges the store's local fallback as Store.Charge does: the local bucket then refuses a
// request that it would have admitted without the charge.
func TestLeasedChargeLocal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		refused := func(context.Context) *redis.Cmd {
			return redis.NewCmdResult(nil, errors.New("dial tcp: connection refused"))
		}
		for _, charge := range []int{0, 5} {
			l := New(&fakeRedis{answer: refused}, 1, 10, WithLocalFallback(1)).Leased(4)
			for i := range downAfter {
				if _, err := l.Decide(context.Background(), fmt.Sprint("other", i), 1, time.Now()); err != nil {
					t.Fatalf("charge %d: a decision of the local fallback failed: %v", charge, err)
				}
			}
			if err := l.s.Down(); err == nil {
				t.Fatalf("charge %d: Redis not known down after %d failures", charge, downAfter)
			}
			if err := l.Charge(context.Background(), "k", charge, time.Now()); err != nil {
				t.Fatalf("charge %d while Redis is down: %v, want the local bucket charged", charge, err)
			}
			d, err := l.Decide(context.Background(), "k", 6, time.Now())
			if err != nil || d.Allowed != (charge == 0) {
				t.Fatalf("charge %d, then a request of 6 of the 10: %+v, %v, want admitted %v", charge, d, err, charge == 0)
			}
		}
	})
}

// keyedFailures fails every script, once down is set, with an error of its own naming the key,
// and records the errors in the order it returned them.
type keyedFailures struct {
	redis.Scripter
	down atomic.Bool
	mu   sync.Mutex
	errs []error
}

func (f *keyedFailures) fail(keys []string) *redis.Cmd {
	f.mu.Lock()
	defer f.mu.Unlock()
	err := fmt.Errorf("round trip %d, for %v: %w", len(f.errs), keys, syscall.ECONNREFUSED)
	f.errs = append(f.errs, err)
	return redis.NewCmdResult(nil, err)
}

func (f *keyedFailures) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	if f.down.Load() {
		return f.fail(keys)
	}
	return f.Scripter.Eval(ctx, script, keys, args...)
}

func (f *keyedFailures) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	if f.down.Load() {
		return f.fail(keys)
	}
	return f.Scripter.EvalSha(ctx, sha, keys, args...)
}

// TestLeasedReleaseFirstError has every give-back of Release fail, each with an error of its
// own: Release returns the first, as it says, not a later one.
func TestLeasedReleaseFirstError(t *testing.T) {
	client := newClient(t, sharedAddr(t))
	f := &keyedFailures{Scripter: keptKeys{client}}
	s := New(f, rate.Every(time.Second), 20, WithPrefix(testPrefix(t)), WithTimeout(testTimeout), withCallerClock())
	l := s.Leased(10)
	keys := []string{"a", "b", "c"}
	for _, key := range keys {
		decideLeased(t, l, key, 1, t0)
	}
	f.down.Store(true)
	err := l.Release(context.Background())
	f.mu.Lock()
	errs := f.errs
	f.mu.Unlock()
	if len(errs) < 2 {
		t.Fatalf("Release sent %d round trips while Redis failed (%v), want one per key of %v", len(errs), err, keys)
	}
	if !errors.Is(err, errs[0]) {
		t.Fatalf("Release returned %v, want the first error, %v", err, errs[0])
	}
}

// TestLeasedEarlierInstant asks a Leased, on the caller's clock, about a key at an instant a
// second before what it last learned of it: the request is decided as of what is known, and its
// Reset and RetryAfter count the second between its own instant and that one; a cost above the
// burst is refused forever, the second not added to rate.InfDuration.
func TestLeasedEarlierInstant(t *testing.T) {
	client := newClient(t, sharedAddr(t))
	const burst = 2
	s := New(client, rate.Every(time.Second), burst, WithPrefix(testPrefix(t)), WithTimeout(testTimeout), withInjectedClock())
	l := s.Leased(burst)
	t1 := t0.Add(time.Second)
	if d := decideLeased(t, l, "k", burst, t1); !d.Allowed {
		t.Fatalf("the first request, of the whole burst: %+v, want admitted", d)
	}
	known := decideLeased(t, l, "k", 1, t1)
	if known.Allowed || known.RetryAfter <= 0 {
		t.Fatalf("a request on the empty bucket: %+v, want refused", known)
	}
	trips := l.RoundTrips()
	earlier := decideLeased(t, l, "k", 1, t0)
	if earlier.Allowed || earlier.RetryAfter != known.RetryAfter+time.Second || earlier.Reset != known.Reset+time.Second {
		t.Fatalf("a second earlier: %+v, want the refusal %+v a second longer", earlier, known)
	}
	if d := decideLeased(t, l, "k", burst+1, t0); d.Allowed || d.RetryAfter != rate.InfDuration || d.Reset != known.Reset+time.Second {
		t.Fatalf("a cost above the burst, a second earlier: %+v, want refused for rate.InfDuration, Reset %v", d, known.Reset+time.Second)
	}
	if l.RoundTrips() != trips {
		t.Fatalf("%d round trips for the requests a second earlier, want them answered from what the replica knows", l.RoundTrips()-trips)
	}
}

// TestLeasedPeekRidesFlight checks, on a real Redis, that a peek (a cost of 0) of a Leased that
// waited for the key's round trip in flight, sent after the peek arrived, takes that round trip's
// answer as its own: it is answered with no round trip of its own.
func TestLeasedPeekRidesFlight(t *testing.T) {
	client := newClient(t, sharedAddr(t))
	g := newGate()
	client.AddHook(g)
	// On the caller's clock, so that the instants are the Unix epoch's nanoseconds.
	l := New(client, rate.Every(time.Second), 10, WithPrefix(testPrefix(t)), WithTimeout(testTimeout), withCallerClock()).Leased(4)
	var boarded atomic.Int64
	testHookBoarded = func(context.Context) { boarded.Add(1) }
	t.Cleanup(func() { testHookBoarded = nil })
	ctx := context.Background()
	g.shut.Store(true)
	first := make(chan result, 1)
	go func() {
		d, err := l.Decide(ctx, "k", 1, time.Now())
		first <- result{d: d, err: err}
	}()
	<-g.held
	peek := make(chan result, 1)
	go func() {
		d, err := l.Decide(ctx, "k", 0, time.Now())
		peek <- result{d: d, err: err}
	}()
	for boarded.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	close(g.release)
	if r := <-first; r.err != nil || !r.d.Allowed {
		t.Fatalf("the request in flight: %+v, %v; want admitted", r.d, r.err)
	}
	if r := <-peek; r.err != nil || !r.d.Allowed || r.d.Reset < 0 || r.d.Reset > 10*time.Second || l.RoundTrips() != 1 {
		t.Fatalf("the peek that waited for it: %+v, %v after %d round trips; want admitted, full within 10s, with no round trip of its own", r.d, r.err, l.RoundTrips())
	}
}

// TestLeasedWaitersShareFailure checks, on a real Redis, that the requests of a Leased that
// waited for the key's round trip share the failure of Redis it met (here a refused connection):
// each fails with it, without a round trip of its own.
func TestLeasedWaitersShareFailure(t *testing.T) {
	s := New(newClient(t, sharedAddr(t)), rate.Every(time.Second), 10, WithPrefix(testPrefix(t)), WithTimeout(testTimeout))
	h := &heldSends{Scripter: s.client, held: make(chan struct{}), release: make(chan struct{}), fail: syscall.ECONNREFUSED}
	s.client = h
	l := s.Leased(4)
	var boarded atomic.Int64
	testHookBoarded = func(context.Context) { boarded.Add(1) }
	t.Cleanup(func() { testHookBoarded = nil })
	h.hold.Store(true)
	lead := make(chan error, 1)
	go func() {
		_, err := l.Decide(context.Background(), "k", 1, time.Now())
		lead <- err
	}()
	<-h.held
	wait := make(chan result, 1)
	go func() {
		d, err := l.Decide(context.Background(), "k", 1, time.Now())
		wait <- result{d: d, err: err}
	}()
	for boarded.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	close(h.release)
	if err := <-lead; !errors.Is(err, ErrUnavailable) || !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("the request waited for: %v, want Redis's failure", err)
	}
	if r := <-wait; !errors.Is(r.err, ErrUnavailable) || !errors.Is(r.err, syscall.ECONNREFUSED) || h.calls.Load() != 1 {
		t.Fatalf("the request that waited: %+v, %v after %d calls; want Redis's failure, with no call of its own", r.d, r.err, h.calls.Load())
	}
}

// TestLeasedHugeCosts decides and charges through a Leased costs whose nanoseconds at the rate do
// not fit an int64: a cost far above the burst is refused, as the Store refuses it, and a charge
// far above it leaves the key in debt, refused. Multiplied out, both wrapped negative: the
// request was admitted from the lease, and the charge filled the lease with a whole burst.
func TestLeasedHugeCosts(t *testing.T) {
	client := newClient(t, sharedAddr(t))
	ctx := context.Background()
	s := New(client, rate.Every(time.Second), 5, WithPrefix(testPrefix(t)), WithTimeout(testTimeout), withCallerClock())
	l := s.Leased(2)
	big, charge := int64(18446744073), math.MaxInt64/int64(time.Second)+1 // at 1 s a token, big*1e9 wraps to -709551616 ns
	if int64(int(big)) != big {
		t.Skip("the costs that wrap are beyond a 32-bit int")
	}
	cost := int(big)
	if d, err := l.Decide(ctx, "new", cost, t0); err != nil || d.Allowed {
		t.Fatalf("a cost of %d, burst 5: %+v, %v; want refused", cost, d, err)
	}
	for i := range 5 { // the key's whole bucket, through the lease
		if d, err := l.Decide(ctx, "k", 1, t0); err != nil || !d.Allowed {
			t.Fatalf("request %d: %+v, %v", i, d, err)
		}
	}
	if err := l.Charge(ctx, "k", int(charge), t0); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if d, err := l.Decide(ctx, "k", 1, t0); err != nil || d.Allowed {
			t.Fatalf("request %d after a charge of 2^63 ns of tokens: %+v, %v; want refused", i, d, err)
		}
	}
	if err := l.Charge(ctx, "k", -math.MaxInt, t0); err != nil { // a refund past the burst: full
		t.Fatal(err)
	}
	if d, err := l.Decide(ctx, "k", 5, t0); err != nil || !d.Allowed {
		t.Fatalf("after a refund of the largest int: %+v, %v; want the whole burst admitted", d, err)
	}
}
