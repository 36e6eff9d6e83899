package retryafter

import (
	"context"
	"fmt"
	"math"
	"math/bits"
	mathrand "math/rand/v2"
	"net/http"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retryafter/retryafter/edge"
	"github.com/retryafter/retryafter/internal/clock"
	"golang.org/x/time/rate"
)

func decide(t *testing.T, b *TokenBucket, key string, cost int, now time.Time) Decision {
	t.Helper()
	d, err := b.Decide(context.Background(), key, cost, now)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestTokenBucketCostAboveBurst(t *testing.T) {
	b := NewTokenBucket(10, 3)
	if d := decide(t, b, "k", 4, t0); d.Allowed || d.RetryAfter != rate.InfDuration {
		t.Fatalf("cost 4 with burst 3: %+v, want refused forever", d)
	}
	if d := decide(t, b, "k", 3, t0); !d.Allowed {
		t.Fatalf("cost 3 with burst 3 after a refusal: %+v, want allowed (the refusal cost nothing)", d)
	}
	if d := decide(t, b, "k", 2, t0); d.Allowed || d.RetryAfter != 200*time.Millisecond-slack {
		t.Fatalf("cost 2 on an empty bucket at 10/s: %+v, want a wait of 200ms", d)
	}
}

// TestTokenBucketReclaimsRefilledKeys sends a stream of distinct keys while time passes, through a
// table that holds a few thousand: the keys whose bucket has refilled make room for the new ones,
// every new key is admitted, and the table never holds more than its bound.
func TestTokenBucketReclaimsRefilledKeys(t *testing.T) {
	bound := 4000 * keyCost(6) // four times the live keys: the hash spreads them unevenly
	b := NewTokenBucket(1, 1, WithMaxMemory(bound))
	now := t0
	most := 0
	for i := range 200_000 {
		now = now.Add(time.Millisecond)
		if d := decide(t, b, fmt.Sprint(i), 1, now); !d.Allowed {
			t.Fatalf("new key %d refused, with 1,000 live keys", i)
		}
		if i%1000 == 0 {
			most = max(most, b.Len())
		}
	}
	// A bucket refills in 1 s: 1,000 keys are live at any instant.
	if want := bound / keyCost(1); most > want || most < 1000 { // the bytes of the shortest keys
		t.Fatalf("the table held up to %d keys, want between the 1,000 live and its bound, %d", most, want)
	}
}

// TestTokenBucketKeepsReturningClients checks that a client that comes back after its bucket
// refilled finds its key, below the bound: it costs no allocation.
func TestTokenBucketKeepsReturningClients(t *testing.T) {
	b := NewTokenBucket(1000, 10)
	keys := make([]string, 20_000)
	for i := range keys {
		keys[i] = clientAddr(i)
		decide(t, b, keys[i], 1, t0)
	}
	now := t0.Add(time.Hour) // every bucket refilled
	i := 0
	if n := testing.AllocsPerRun(10_000, func() {
		b.decide(keys[i%len(keys)], 1, now, noQuota, new(Decision))
		i++
	}); n > 0.01 {
		t.Fatalf("a returning client costs %v allocations", n)
	}
	if b.Len() != len(keys) {
		t.Fatalf("%d keys held, want %d", b.Len(), len(keys))
	}
}

// TestTokenBucketAtTheBound fills the table with keys that are all over their limit: a new key
// is then refused with the time until a slot frees, and no key already held is forgotten, so no
// client over its limit is admitted to make room.
func TestTokenBucketAtTheBound(t *testing.T) {
	const maxKeys = partCount * 4
	b := NewTokenBucket(rate.Every(10*time.Second), 1, WithMaxMemory(maxKeys*keyCost(11)))
	var held []string
	refusedNew := 0
	for i := range 10 * maxKeys {
		key := fmt.Sprint("client-", i)
		d := decide(t, b, key, 1, t0)
		switch {
		case d.Allowed:
			held = append(held, key)
		case d.RetryAfter <= 0 || d.RetryAfter > 10*time.Second:
			t.Fatalf("new key refused with RetryAfter %v, want (0, 10s]", d.RetryAfter)
		default:
			refusedNew++
		}
	}
	if b.Len() > maxKeys || len(held) != b.Len() {
		t.Fatalf("held %d keys, admitted %d, bound %d", b.Len(), len(held), maxKeys)
	}
	if refusedNew == 0 {
		t.Fatal("no new key was refused at the bound")
	}
	for _, key := range held {
		if d := decide(t, b, key, 1, t0.Add(5*time.Second)); d.Allowed {
			t.Fatalf("%s, over its limit, was admitted after the table filled", key)
		}
	}
	// Once the buckets have refilled, their slots are free for new keys.
	if d := decide(t, b, "late-comer", 1, t0.Add(10*time.Second)); !d.Allowed {
		t.Fatalf("new key refused after every bucket refilled: %+v", d)
	}
}

// TestTokenBucketTinyRateKeepsKeys checks that a rate so slow that a bucket's refill time does
// not fit a Duration never makes a key look refilled (and so forgotten).
func TestTokenBucketTinyRateKeepsKeys(t *testing.T) {
	for _, limit := range []rate.Limit{0, 1e-12, 1e-300} {
		b := NewTokenBucket(limit, 1000, WithMaxMemory(64<<10))
		decide(t, b, "spender", 1000, t0)
		for i := range 200 {
			decide(t, b, fmt.Sprint("new-", i), 1, t0.Add(time.Duration(i)*time.Hour))
		}
		if d := decide(t, b, "spender", 1, t0.Add(200*time.Hour)); d.Allowed {
			t.Fatalf("limit %v: the key that spent its burst was forgotten and admitted", limit)
		}
	}
}

// step is one request of a replayed history: cost tokens at t0 + at.
type step struct {
	at   time.Duration
	cost int
}

// replay returns a bucket that has decided history on key "k".
func replay(t *testing.T, limit rate.Limit, burst int, history []step) *TokenBucket {
	t.Helper()
	b := NewTokenBucket(limit, burst)
	for _, s := range history {
		decide(t, b, "k", s.cost, t0.Add(s.at))
	}
	return b
}

// TestTokenBucketQuota checks the quota fields against the bucket itself over random histories:
// Remaining is the largest cost admitted at that instant, and Reset the earliest instant at which
// the whole burst is (within the microsecond of slack), never earlier than RetryAfter.
func TestTokenBucketQuota(t *testing.T) {
	rng := mathrand.New(mathrand.NewPCG(1, 2))
	for _, pol := range []struct {
		limit rate.Limit
		burst int
	}{{10, 5}, {rate.Every(time.Minute), 3}, {0.3, 7}, {1000, 1}, {0, 4}, {1e7, 3}, {1e9, 2}} {
		// From a million a second, the microsecond of slack lends a whole token: never one
		// beyond the burst, which no reservation can take.
		b := NewTokenBucket(pol.limit, pol.burst)
		var history []step
		var at time.Duration
		for range 60 {
			at += time.Duration(rng.Int64N(int64(2 * time.Second)))
			s := step{at, 1 + rng.IntN(pol.burst+1)}
			d := decide(t, b, "k", s.cost, t0.Add(at))
			history = append(history, s)
			if d.Limit != pol.burst || d.Remaining < 0 || d.Remaining > pol.burst {
				t.Fatalf("%v/%d after %v: Limit %d Remaining %d", pol.limit, pol.burst, history, d.Limit, d.Remaining)
			}
			if !d.Allowed && d.RetryAfter != rate.InfDuration && d.Reset < d.RetryAfter {
				t.Fatalf("%v/%d: Reset %v < RetryAfter %v", pol.limit, pol.burst, d.Reset, d.RetryAfter)
			}
			now := t0.Add(at)
			if d.Remaining > 0 {
				if got := decide(t, replay(t, pol.limit, pol.burst, history), "k", d.Remaining, now); !got.Allowed {
					t.Fatalf("%v/%d after %v: Remaining %d, but that cost is refused", pol.limit, pol.burst, history, d.Remaining)
				}
			}
			if d.Remaining < pol.burst {
				if got := decide(t, replay(t, pol.limit, pol.burst, history), "k", d.Remaining+1, now); got.Allowed {
					t.Fatalf("%v/%d after %v: Remaining %d, but %d is admitted", pol.limit, pol.burst, history, d.Remaining, d.Remaining+1)
				}
			}
			switch {
			case d.Reset == rate.InfDuration:
				if pol.limit != 0 {
					t.Fatalf("%v/%d: Reset never at a positive rate", pol.limit, pol.burst)
				}
			case d.Reset == 0:
				if d.Remaining != pol.burst {
					t.Fatalf("%v/%d: Reset 0 with Remaining %d", pol.limit, pol.burst, d.Remaining)
				}
			default:
				if got := decide(t, replay(t, pol.limit, pol.burst, history), "k", pol.burst, now.Add(d.Reset)); !got.Allowed {
					t.Fatalf("%v/%d after %v: the burst is refused at Reset %v", pol.limit, pol.burst, history, d.Reset)
				}
				if early := d.Reset - 3*slack; early > 0 {
					if got := decide(t, replay(t, pol.limit, pol.burst, history), "k", pol.burst, now.Add(early)); got.Allowed {
						t.Fatalf("%v/%d after %v: the burst is admitted before Reset %v", pol.limit, pol.burst, history, d.Reset)
					}
				}
			}
		}
	}
}

// TestTokenBucketQuotaIsNotASwitch checks that Decide always reports the quota, and that giving
// the bucket to middleware that writes the rate-limit fields changes nothing for other middleware
// sharing it: LimitWith does not change the limiter it is given.
func TestTokenBucketQuotaIsNotASwitch(t *testing.T) {
	b := NewTokenBucket(10, 5)
	for i := range 3 {
		if d := decide(t, b, "k", 1, t0); d.Limit != 5 || d.Remaining != 4-i {
			t.Fatalf("request %d: %+v, want Limit 5, Remaining %d", i, d, 4-i)
		}
	}
	clk := func() time.Time { return t0 }
	plain := LimitWith(b, WithClock(clk))(ok)
	fields := LimitWith(b, WithClock(clk), WithRateLimitFields(""))(ok)
	for _, h := range []http.Handler{plain, fields, plain} {
		w := serve(h, "GET", "192.0.2.9:1")
		_, has := w.Header()["Ratelimit"]
		if want := h == fields; has != want {
			t.Fatalf("RateLimit field present %v, want %v", has, want)
		}
	}
}

// TestTokenBucketConcurrent hammers one key from many goroutines on the real clock for a bounded
// time: the admissions never exceed what the bucket allows over the elapsed time, burst +
// rate × elapsed, plus one for the microsecond of slack. The bound holds however the goroutines
// are scheduled, so the test cannot be flaky; run it with -race. Without the bucket's guard
// against instants that arrive out of order it fails most runs.
func TestTokenBucketConcurrent(t *testing.T) {
	const (
		limit = 2000
		burst = 50
		run   = 200 * time.Millisecond
	)
	b := NewTokenBucket(limit, burst, WithMaxMemory(64<<10))
	var admitted, calls atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range 8 {
		wg.Go(func() {
			for time.Since(start) < run {
				calls.Add(1)
				// As in the middleware, the clock is read before the decision, and a
				// goroutine may be descheduled between the two.
				now := time.Now()
				runtime.Gosched()
				if d, _ := b.Decide(context.Background(), "one", 1, now); d.Allowed {
					admitted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	bound := burst + limit*elapsed.Seconds() + 1
	t.Logf("%d admitted in %v (bound %.0f)", admitted.Load(), elapsed, bound)
	if n := admitted.Load(); float64(n) > bound {
		t.Fatalf("%d admitted in %v, more than burst + rate × elapsed + 1 = %.1f", n, elapsed, bound)
	}
	if n := admitted.Load(); n < min(calls.Load(), burst) {
		t.Fatalf("only %d of %d requests admitted, less than the burst %d", n, calls.Load(), burst)
	}
}

// TestTokenBucketFlood sends floodClients distinct client addresses, each over its limit after
// its first request, at a table bounded by WithMaxMemory: the heap the table holds stays under
// the bound, and no client the table holds is forgotten to make room. floodClients is
// 1,000,000, or 20,000 under the race detector, which is far slower; the bound holds a quarter
// of them.
func TestTokenBucketFlood(t *testing.T) {
	if testing.Short() {
		t.Skip("floods a million clients")
	}
	const maxKeys = floodClients / 4
	bound := maxKeys * keyCost(11)
	before := heapInUse()
	b := NewTokenBucket(rate.Every(time.Minute), 1, WithMaxMemory(bound))
	ctx := context.Background()
	admitted := 0
	for i := range floodClients {
		d, _ := b.Decide(ctx, clientAddr(i), 1, t0)
		switch {
		case d.Allowed:
			admitted++
		case d.RetryAfter <= 0 || d.RetryAfter > time.Minute:
			t.Fatalf("client %d refused with RetryAfter %v, want (0, 1m]", i, d.RetryAfter)
		}
	}
	held := heapInUse() - before
	n := b.Len()
	t.Logf("%d clients, %d held: %d bytes, %.0f B/key", floodClients, n, held, float64(held)/float64(n))
	if n > maxKeys || n != admitted {
		t.Fatalf("%d keys held, %d admitted, bound %d", n, admitted, maxKeys)
	}
	if held > uint64(bound) {
		t.Fatalf("%d clients at WithMaxMemory(%d) hold %d bytes", floodClients, bound, held)
	}
	// Half a minute on, every client is still over its limit: none may be admitted, whether its
	// key was held or refused.
	for i := range floodClients {
		if d, _ := b.Decide(ctx, clientAddr(i), 1, t0.Add(30*time.Second)); d.Allowed {
			t.Fatalf("client %d, over its limit, admitted after the flood", i)
		}
	}
	runtime.KeepAlive(b)
}

// TestTokenBucketOutOfOrder replays what concurrent requests do when they read the clock before
// the lock and take it in the other order: a request stamped earlier than one already decided
// must not make the bucket credit the time between twice, and its wait is exact from its own
// instant.
func TestTokenBucketOutOfOrder(t *testing.T) {
	b := NewTokenBucket(1, 1)
	for _, s := range []struct {
		at   time.Duration
		want bool
		wait time.Duration
	}{
		{0, true, 0},
		{time.Second, true, 0},
		{500 * time.Millisecond, false, 1500*time.Millisecond - slack}, // stale: the bucket is empty at 1 s
		{1500 * time.Millisecond, false, 500*time.Millisecond - slack}, // half a token since 1 s, not one
		{2 * time.Second, true, 0},
	} {
		d := decide(t, b, "k", 1, t0.Add(s.at))
		if d.Allowed != s.want || d.RetryAfter != s.wait {
			t.Fatalf("at %v: allowed %v, RetryAfter %v; want %v, %v", s.at, d.Allowed, d.RetryAfter, s.want, s.wait)
		}
	}
}

// TestTokenBucketConcurrentRefusals refuses many requests on one key at the same instant from
// many goroutines: each must be told the same exact wait, the time to the next token, and none
// may cost quota, so that at that instant exactly one request is admitted. Deciding in steps
// (allow, reserve, cancel) without holding the key makes a refusal see another's reservation
// (a wait one token too long) or cancel after it (a token lost for good).
func TestTokenBucketConcurrentRefusals(t *testing.T) {
	const goroutines = 8
	for round := range 300 {
		b := NewTokenBucket(rate.Every(time.Second), 1)
		now := t0.Add(time.Duration(round) * time.Hour)
		decide(t, b, "k", 1, now) // spend the burst
		var wg sync.WaitGroup
		waits := make([]Decision, goroutines)
		start := make(chan struct{})
		for i := range waits {
			wg.Go(func() {
				<-start
				d, err := b.Decide(context.Background(), "k", 1, now)
				if err != nil {
					t.Error(err)
				}
				waits[i] = d
			})
		}
		close(start)
		wg.Wait()
		for i, d := range waits {
			if d.Allowed || d.RetryAfter != time.Second-slack {
				t.Fatalf("round %d, request %d: %+v, want refused with a wait of 1s", round, i, d)
			}
		}
		next := now.Add(time.Second)
		if d := decide(t, b, "k", 1, next); !d.Allowed {
			t.Fatalf("round %d: refused at the next token (%+v): a refusal cost quota", round, d)
		}
		if d := decide(t, b, "k", 1, next); d.Allowed {
			t.Fatalf("round %d: two admitted for one token", round)
		}
	}
}

// BenchmarkTokenBucketDecide measures a decision from many goroutines, each on keys of its own
// (the common case) and all on one key that is over its limit (the herd).
func BenchmarkTokenBucketDecide(b *testing.B) {
	b.Run("own keys", func(b *testing.B) {
		tb := NewTokenBucket(1e9, 1<<30)
		var next atomic.Int64
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			keys := make([]string, 64)
			for i := range keys {
				keys[i] = fmt.Sprint(next.Add(1))
			}
			for i := 0; pb.Next(); i++ {
				tb.Decide(context.Background(), keys[i%len(keys)], 1, t0)
			}
		})
	})
	b.Run("one key refused", func(b *testing.B) {
		tb := NewTokenBucket(rate.Every(time.Hour), 1)
		tb.Decide(context.Background(), "k", 1, t0)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				tb.Decide(context.Background(), "k", 1, t0)
			}
		})
	})
}

// BenchmarkTokenBucketHugeBurst measures a peek at a key that spent a burst of the largest int,
// at 1e6 and 1e12 tokens a second: the slack lends 1 and 1e6 tokens, which Remaining counts.
func BenchmarkTokenBucketHugeBurst(b *testing.B) {
	for _, limit := range []rate.Limit{1e6, 1e12} {
		b.Run(fmt.Sprint(limit), func(b *testing.B) {
			tb := NewTokenBucket(limit, math.MaxInt)
			tb.Decide(context.Background(), "k", math.MaxInt, t0)
			b.ReportAllocs()
			for b.Loop() {
				tb.Decide(context.Background(), "k", 0, t0)
			}
		})
	}
}

// TestTokenBucketBoundInBytes sends 2,000 clients with keys of 64 KiB each, as a key function
// that returns a header value allows: the table holds no more bytes than its bound, whatever
// the keys weigh, and refuses the keys that do not fit rather than admitting them.
func TestTokenBucketBoundInBytes(t *testing.T) {
	const bound = 8 << 20
	b := NewTokenBucket(rate.Every(time.Minute), 1, WithMaxMemory(bound))
	before := heapInUse()
	buf := make([]byte, 64<<10)
	admitted := 0
	for i := range 2000 {
		copy(buf, fmt.Sprintf("client-%d-", i))
		if d := decide(t, b, string(buf), 1, t0); d.Allowed {
			admitted++
		}
	}
	held := heapInUse() - before
	t.Logf("%d of 2,000 keys of 64 KiB held, %d bytes", b.Len(), held)
	if held > bound {
		t.Fatalf("2,000 keys of 64 KiB: the table holds %d bytes, over its bound of %d", held, bound)
	}
	if admitted != b.Len() || admitted == 0 || admitted > bound/(64<<10) {
		t.Fatalf("admitted %d, held %d", admitted, b.Len())
	}
	runtime.KeepAlive(b)
}

// TestTokenBucketClockStepsBack sets an injected clock, which has no monotonic readings, back an
// hour: the buckets count on from the new reading once it is confirmed, clock.ConfirmStep on, instead
// of deciding every key at the old latest instant until the clock has caught up an hour later.
// Until then the reading is decided as a stale one would be, at the latest instant, its wait
// measured from that instant: a reading that far behind may be the clock stepped back, whose
// client need not wait the step.
func TestTokenBucketClockStepsBack(t *testing.T) {
	b := NewTokenBucket(1, 5)
	now := t0
	for range 5 {
		decide(t, b, "spent", 1, now)
	}
	now = now.Add(-time.Hour)
	if d := decide(t, b, "spent", 1, now); d.Allowed || d.RetryAfter != time.Second-slack {
		t.Fatalf("right after the step: %+v, want a refusal as at the latest instant, measured from it", d)
	}
	now = now.Add(clock.ConfirmStep)
	if d := decide(t, b, "spent", 5, now); !d.Allowed || d.Remaining != 0 {
		t.Fatalf("%v after the step: %+v, want the bucket refilled for that long since the step", clock.ConfirmStep, d)
	}
	admitted := 0
	for range 600 { // a fresh client polling once a second for ten minutes
		now = now.Add(time.Second)
		if d := decide(t, b, "fresh", 1, now); d.Allowed {
			admitted++
		}
	}
	if admitted < 595 {
		t.Fatalf("a fresh client polling once a second after the step was admitted %d times in 600", admitted)
	}
	// A reading a little late, as from a request that read the clock before another took the
	// lock, is still decided at the later instant.
	for range 5 {
		decide(t, b, "late", 1, now)
	}
	if d := decide(t, b, "late", 1, now.Add(-500*time.Millisecond)); d.Allowed || d.RetryAfter != 1500*time.Millisecond-slack {
		t.Fatalf("a reading half a second late: %+v, want refused until a token is due from the later instant", d)
	}
	// Exactly clock.MaxLag late is still late, not a step of the clock.
	if d := decide(t, b, "late", 1, now.Add(-clock.MaxLag)); d.Allowed || d.RetryAfter != clock.MaxLag+time.Second-slack {
		t.Fatalf("a reading %v late: %+v, want refused until a token is due from the later instant", clock.MaxLag, d)
	}
}

// TestTokenBucketLargestBurst decides with the largest bursts an int holds, which a float64
// rounds up to 2^63, past the largest int: every answer comes at once (it hung, counting
// Remaining up from the smallest int), Remaining never above the burst, which is taken as
// maxBurst (2^53) where it is larger.
func TestTokenBucketLargestBurst(t *testing.T) {
	for _, given := range []int{math.MaxInt, math.MaxInt - 1, math.MaxInt - 511} {
		b, burst := NewTokenBucket(1, given), min(given, maxBurst)
		for _, cost := range []int{0, 1, burst} { // each of a full bucket, a key of its own
			d := decide(t, b, fmt.Sprint("k", cost), cost, t0)
			if !d.Allowed || d.Limit != burst || d.Remaining < 0 || d.Remaining > burst {
				t.Fatalf("burst %d, cost %d: %+v, want admitted, within the burst", burst, cost, d)
			}
		}
		if d := decide(t, b, fmt.Sprint("k", burst), 1, t0); d.Allowed || d.Remaining != 0 {
			t.Fatalf("burst %d, spent whole: %+v, want refused with nothing left", burst, d)
		}
	}
}

// TestTokenBucketRemainingAtTheEdges checks that Remaining is the largest cost admitted at the
// instants where it changes: the end of every RetryAfter and every Reset, and a nanosecond and a
// microsecond before each, where the slack the bucket lends decides. (At 1 per 7 s with a burst
// of 2, spent at t0, a cost of 1 is admitted at t0 + 6.999999 s: Remaining must be 1 there.)
func TestTokenBucketRemainingAtTheEdges(t *testing.T) {
	rng := mathrand.New(mathrand.NewPCG(5, 6))
	check := func(limit rate.Limit, burst int, history []step, at time.Duration) {
		t.Helper()
		now := t0.Add(at)
		d := decide(t, replay(t, limit, burst, history), "k", 0, now)
		if d.Remaining > 0 {
			if got := decide(t, replay(t, limit, burst, history), "k", d.Remaining, now); !got.Allowed {
				t.Fatalf("%v/%d after %v, at %v: Remaining %d, but that cost is refused", limit, burst, history, at, d.Remaining)
			}
		}
		if d.Remaining < burst {
			if got := decide(t, replay(t, limit, burst, history), "k", d.Remaining+1, now); got.Allowed {
				t.Fatalf("%v/%d after %v, at %v: Remaining %d, but %d is admitted", limit, burst, history, at, d.Remaining, d.Remaining+1)
			}
		}
		// The same through an All of the bucket and an unlimited one, which TokenBucket's
		// Combine decides in one step: it binds on nothing, so the answers are the bucket's. By
		// Decide, and as the middleware decides without the quota, which takes a path of its own.
		for cost := max(0, d.Remaining-1); cost <= min(burst, d.Remaining+1); cost++ {
			for _, quota := range []bool{true} {
				got, _ := All(replay(t, limit, burst, history), NewTokenBucket(rate.Inf, 1)).Decide(context.Background(), "k", cost, now)
				if want := cost <= d.Remaining; got.Allowed != want {
					t.Fatalf("%v/%d after %v, at %v, in an All (quota %v): cost %d allowed %v, want %v", limit, burst, history, at, quota, cost, got.Allowed, want)
				}
			}
		}
	}
	check(rate.Every(7*time.Second), 2, []step{{0, 2}}, 7*time.Second-time.Microsecond)
	edges := 0
	for _, pol := range []struct {
		limit rate.Limit
		burst int
	}{{rate.Every(7 * time.Second), 2}, {3, 4}, {0.3, 3}, {rate.Every(time.Minute), 5}, {1000, 2}, {10, 7}} {
		for range 15 {
			b := NewTokenBucket(pol.limit, pol.burst)
			var history []step
			var at time.Duration
			for range 12 {
				at += time.Duration(rng.Int64N(int64(3 * time.Second)))
				s := step{at, 1 + rng.IntN(pol.burst)}
				d := decide(t, b, "k", s.cost, t0.Add(at))
				history = append(history, s)
				for _, end := range []time.Duration{d.RetryAfter, d.Reset} {
					if end <= 0 || end >= rate.InfDuration {
						continue
					}
					for _, before := range []time.Duration{0, 1, slack, slack + 1} {
						if end-before > 0 {
							check(pol.limit, pol.burst, history, at+end-before)
							edges++
						}
					}
				}
			}
		}
	}
	if edges < 1000 {
		t.Fatalf("only %d edges checked", edges)
	}
}

// TestTokenBucketSmallTableDecidesAlike sends one sequence through a table that must keep making
// room and through one that never does, with clients that come back only after their bucket has
// refilled, so that dropping them changes nothing: the decisions must be the same. A bucket
// handed to a new key and still reached under the key it was taken from would differ.
func TestTokenBucketSmallTableDecidesAlike(t *testing.T) {
	// A burst refills in 2 ms, during which about 10 keys of a part are not full (20 at most, in
	// any run: the parts are picked by a random seed); the small table holds about 30 a part,
	// of the 40 that come back every 7.7 ms.
	small := NewTokenBucket(2500, 5, WithMaxMemory(360<<10))
	big := NewTokenBucket(2500, 5)
	rng := mathrand.New(mathrand.NewPCG(8, 9))
	now := t0
	for i := range 50_000 {
		now = now.Add(3 * time.Microsecond)
		key := fmt.Sprint("client-", i%2560)
		// Two requests in a row, so that the part remembers the key.
		for j, cost := range []int{1 + rng.IntN(3), 1 + rng.IntN(2)} {
			at := now.Add(time.Duration(j) * time.Microsecond)
			ds, db := decide(t, small, key, cost, at), decide(t, big, key, cost, at)
			if ds != db {
				t.Fatalf("request %d.%d, %s at %v: the small table decided %+v, the large %+v", i, j, key, at.Sub(t0), ds, db)
			}
		}
	}
	if small.Len() >= big.Len() {
		t.Fatalf("the small table holds %d keys, the large %d: it did not have to make room", small.Len(), big.Len())
	}
}

// TestTokenBucketLateKeepsZeroAndNever decides requests stamped before an instant their part has
// already decided at: the waits they report are lengthened by the lag, but a full bucket's Reset
// stays 0, and a wait that is never stays rate.InfDuration.
func TestTokenBucketLateKeepsZeroAndNever(t *testing.T) {
	late := 500 * time.Millisecond
	b := NewTokenBucket(1, 2)
	decide(t, b, "k", 0, t0.Add(late))
	if d := decide(t, b, "k", 0, t0); !d.Allowed || d.Remaining != 2 || d.Reset != 0 {
		t.Fatalf("a full bucket, half a second late: %+v, want Remaining 2 and Reset 0", d)
	}
	if d := decide(t, b, "k", 3, t0); d.Allowed || d.RetryAfter != rate.InfDuration {
		t.Fatalf("a cost above the burst, half a second late: %+v, want refused forever", d)
	}
	if d := decide(t, b, "k", 1, t0); !d.Allowed || d.Reset != time.Second+late {
		t.Fatalf("a token spent half a second late: %+v, want a Reset of 1.5s from its own instant", d)
	}
	never := NewTokenBucket(0, 1)
	decide(t, never, "k", 1, t0.Add(late))
	if d := decide(t, never, "k", 1, t0); d.Allowed || d.RetryAfter != rate.InfDuration || d.Reset != rate.InfDuration {
		t.Fatalf("rate 0, spent, half a second late: %+v, want refused forever", d)
	}
}

// TestTokenBucketRemainingInDebt charges a key past what it holds: while it is in debt Remaining
// is 0, never negative, and its Reset is the time to repay and refill.
func TestTokenBucketRemainingInDebt(t *testing.T) {
	ctx := context.Background()
	b := NewTokenBucket(10, 5)
	if err := b.Charge(ctx, "k", 25, t0); err != nil { // 20 tokens of debt: 2 s
		t.Fatal(err)
	}
	for _, at := range []time.Duration{0, time.Second, 2*time.Second - time.Millisecond} {
		if d := decide(t, b, "k", 0, t0.Add(at)); d.Allowed || d.Remaining != 0 || d.Reset != 2500*time.Millisecond-at {
			t.Fatalf("in debt at %v: %+v, want refused, Remaining 0, Reset %v", at, d, 2500*time.Millisecond-at)
		}
	}
	if d := decide(t, b, "k", 0, t0.Add(2*time.Second)); !d.Allowed || d.Remaining != 0 {
		t.Fatalf("debt repaid: %+v, want admitted with Remaining 0", d)
	}
}

// TestTokenBucketRateZero spends a bucket that never refills, a token at a time: Remaining
// counts each whole token left, Reset is never, and once none is left every cost is refused for
// ever.
func TestTokenBucketRateZero(t *testing.T) {
	b := NewTokenBucket(0, 3)
	for left := 2; left >= 0; left-- {
		if d := decide(t, b, "k", 1, t0); !d.Allowed || d.Remaining != left || d.Reset != rate.InfDuration {
			t.Fatalf("rate 0, a token spent: %+v, want admitted with %d left and Reset never", d, left)
		}
	}
	if d := decide(t, b, "k", 1, t0.Add(time.Hour)); d.Allowed || d.RetryAfter != rate.InfDuration || d.Remaining != 0 {
		t.Fatalf("rate 0, none left an hour on: %+v, want refused for ever", d)
	}
	// A debt at rate 0 is never repaid, and kept whole: only what is given back repays it, and
	// no more than the burst is held.
	ctx := context.Background()
	b = NewTokenBucket(0, 3)
	for _, c := range []struct{ cost, admitted int }{{5, 0}, {-1, 0}, {-1, 0}, {-1, 1}, {-5, 3}} {
		if err := b.Charge(ctx, "k", c.cost, t0); err != nil {
			t.Fatal(err)
		}
		if d := decide(t, b, "k", 0, t0.Add(time.Hour)); d.Remaining != c.admitted {
			t.Fatalf("rate 0, charged %d: %+v, want %d left", c.cost, d, c.admitted)
		}
	}
}

// TestTokenBucketResetAtTheExtremes checks Reset where the arithmetic runs out: a full bucket at
// rate 0 is full now (0), a refill too long for a Duration is never, and so is one whose length
// in nanoseconds rounds to exactly 2^63, which a conversion to Duration would make negative.
func TestTokenBucketResetAtTheExtremes(t *testing.T) {
	if d := decide(t, NewTokenBucket(0, 3), "k", 0, t0); !d.Allowed || d.Remaining != 3 || d.Reset != 0 {
		t.Fatalf("rate 0, full: %+v, want Remaining 3 and Reset 0", d)
	}
	if d := decide(t, NewTokenBucket(1e-10, 1), "k", 1, t0); !d.Allowed || d.Reset != rate.InfDuration {
		t.Fatalf("a token every 317 years, spent: %+v, want Reset never", d)
	}
	b := NewTokenBucket(1, 1)
	edge := float64(1<<63) / float64(time.Second) // missing tokens that take 2^63 ns at 1 a second
	hit := false
	for m, i := edge, 0; i < 64; m, i = math.Nextafter(m, 0), i+1 {
		hit = hit || m*float64(time.Second) == float64(1<<63)
		if r := refill(b.policy.Limit, m); r < 0 || r > rate.InfDuration || (m*float64(time.Second) >= float64(1<<63)) != (r == rate.InfDuration) {
			t.Fatalf("refill(%v) = %v", m, r)
		}
	}
	if !hit {
		t.Fatal("no refill of exactly 2^63 ns was checked")
	}
}

// TestTokenBucketHugeDebtStaysRefused charges a key about 292 years of tokens, where the wait in
// nanoseconds rounds to 2^63 as a float64 and x/time/rate's conversion wraps it into a negative
// Duration, which admits: the debt is capped at 100 years, and the key stays refused, with
// Remaining 0, at the instants where the wait would have wrapped.
func TestTokenBucketHugeDebtStaysRefused(t *testing.T) {
	if strconv.IntSize < 64 {
		t.Skip("a cost of 292 years of tokens at 1 a second does not fit a 32-bit int")
	}
	var years292 int64 = 9_223_372_037
	ctx := context.Background()
	b := NewTokenBucket(1, 1)
	if err := b.Charge(ctx, "k", int(years292), t0); err != nil {
		t.Fatal(err)
	}
	for at := time.Duration(145_220_000); at < 145_226_000; at += 500 {
		now := t0.Add(at)
		if peek := decide(t, b, "k", 0, now); peek.Remaining != 0 {
			t.Fatalf("at %v: Remaining %d", at, peek.Remaining)
		}
		d := decide(t, b, "k", 1, now)
		if d.Allowed || d.RetryAfter > maxDebt+2*time.Second || d.RetryAfter < maxDebt-time.Hour {
			t.Fatalf("at %v: %+v, want refused for about 100 years", at, d)
		}
	}
}

// TestTokenBucketChargeOfNothing checks that a charge of 0, and any charge at rate.Inf, hold no
// state: the table stays empty.
func TestTokenBucketChargeOfNothing(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		limit rate.Limit
		cost  int
	}{{1, 0}, {1, -5}, {rate.Inf, 5}, {rate.Inf, -5}} {
		b := NewTokenBucket(c.limit, 1)
		if err := b.Charge(ctx, "k", c.cost, t0); err != nil || b.Len() != 0 {
			t.Fatalf("Charge(%d) at %v: %v, %d keys held", c.cost, c.limit, err, b.Len())
		}
	}
	// A charge to a new key that the table has no room for fails, and holds nothing.
	b := NewTokenBucket(rate.Every(time.Hour), 1, WithMaxMemory(16<<10))
	ks := keysInPart(b, 0, 2, 10, "k")
	if err := b.Charge(ctx, ks[0], 1, t0); err != nil {
		t.Fatal(err)
	}
	if err := b.Charge(ctx, ks[1], 1, t0); err == nil || b.Len() != 1 {
		t.Fatalf("a charge to a new key at the bound: %v, %d keys held", err, b.Len())
	}
}

// TestTokenBucketRemainingAFloatStepShort gives the quota a bucket one float64 step short of its
// burst at a rate slow enough (about 263 years a token) that the first guess of Remaining, from
// the tokens plus what the microsecond of slack lends, rounds up to the burst: Remaining is what
// the bucket admits, one token.
func TestTokenBucketRemainingAFloatStepShort(t *testing.T) {
	b := NewTokenBucket(1.2e-10, 2)
	tokens := math.Nextafter(2, 0)
	pol := b.policy
	if guess := guessRemaining(pol, tokens); guess != 2 {
		t.Fatalf("the guess is %v: the case is not reached", guess)
	}
	var d Decision
	quota(&d, pol, tokens)
	if d.Remaining != 1 || admits(pol, 2, tokens) || !admits(pol, 1, tokens) {
		t.Fatalf("Remaining %d; admits 1: %v, 2: %v", d.Remaining, admits(pol, 1, tokens), admits(pol, 2, tokens))
	}
}

// TestTokenBucketInfiniteRate gives NewTokenBucket a limit of +Inf, as rate.Limit(n / d) gives
// for a window d of 0, which is not rate.Inf: it is rate.Inf, on every path (Decide, the
// Charge, an All, the RateLimit fields), and holds nothing. It once
// made the buckets' tokens NaN, which admitted everything while Remaining said 0.
func TestTokenBucketInfiniteRate(t *testing.T) {
	ctx := context.Background()
	inf := rate.Limit(math.Inf(1))
	for _, cost := range []int{0, 1, 3, 4} {
		want := decide(t, NewTokenBucket(rate.Inf, 3), "k", cost, t0)
		wantAll, _ := All(NewTokenBucket(rate.Inf, 3), NewTokenBucket(rate.Inf, 1)).Decide(ctx, "k", cost, t0)
		b := NewTokenBucket(inf, 3)
		for i := range 10 {
			now := t0.Add(time.Duration(i) * time.Millisecond)
			if got := decide(t, b, "k", cost, now); got != want {
				t.Fatalf("cost %d, request %d at +Inf: %+v, want as at rate.Inf: %+v", cost, i, got, want)
			}
			if got, _ := All(b, NewTokenBucket(inf, 1)).Decide(ctx, "k", cost, now); plain(got) != plain(wantAll) {
				t.Fatalf("cost %d, request %d of an All at +Inf: %+v, want as at rate.Inf: %+v", cost, i, got, wantAll)
			}
			if err := b.Charge(ctx, "k", cost, now); err != nil {
				t.Fatal(err)
			}
		}
		if b.Len() != 0 {
			t.Fatalf("cost %d at +Inf: %d keys held, want none, as at rate.Inf", cost, b.Len())
		}
	}
	fields := func(limit rate.Limit) string {
		h := LimitWith(NewTokenBucket(limit, 3), WithRateLimitFields(""), WithClock(func() time.Time { return t0 }))(ok)
		w := serve(h, "GET", "192.0.2.1:1")
		return w.Header().Get("RateLimit") + " " + w.Header().Get("RateLimit-Policy")
	}
	if got, want := fields(inf), fields(rate.Inf); got != want {
		t.Fatalf("the fields at +Inf: %q, want as at rate.Inf: %q", got, want)
	}
	// Below 0, or not a number, a limit is a programmer's error.
	wantPanics(t, map[string]func(){
		"NaN":  func() { NewTokenBucket(rate.Limit(math.NaN()), 1) },
		"-1":   func() { NewTokenBucket(-1, 1) },
		"-Inf": func() { NewTokenBucket(rate.Limit(math.Inf(-1)), 1) },
	})
}

// noNaN fails t if a bucket b holds has tokens that are not a number at now.
func noNaN(t *testing.T, b *TokenBucket, now time.Time) {
	t.Helper()
	for i := range b.parts {
		p := &b.parts[i]
		p.mu.Lock()
		for k, lim := range p.keys {
			if tokens := lim.TokensAt(now); math.IsNaN(tokens) || math.IsNaN(float64(lim.Limit())) {
				t.Errorf("key %q: %v tokens at a limit of %v", k, tokens, lim.Limit())
			}
		}
		p.mu.Unlock()
	}
}

// TestTokenBucketHugeBurstAtHugeRate spends a burst of the largest int whole at rates up to
// 1e18 a second, where the microsecond of slack lends up to 1e12 tokens, and peeks at instants
// just after: Remaining is the largest cost admitted. It was counted up a token at a time, a
// loop as long as the rate: 1.3 ms a decision at 1e12 a second, hours at 1e18, where this test
// timed out.
func TestTokenBucketHugeBurstAtHugeRate(t *testing.T) {
	for _, limit := range []rate.Limit{1e6, 1e12, 1e15, 1e18, 1e300} {
		for _, at := range []time.Duration{0, time.Nanosecond, time.Microsecond, time.Millisecond} {
			b := NewTokenBucket(limit, math.MaxInt)
			decide(t, b, "k", math.MaxInt, t0)
			now := t0.Add(at)
			d := decide(t, b, "k", 0, now)
			if d.Remaining < math.MaxInt {
				if got := decide(t, b, "k", d.Remaining+1, now); got.Allowed {
					t.Fatalf("%v/s, %v after the burst was spent: Remaining %d, but %d is admitted", limit, at, d.Remaining, d.Remaining+1)
				}
			}
			if got := decide(t, b, "k", d.Remaining, now); !got.Allowed {
				t.Fatalf("%v/s, %v after the burst was spent: Remaining %d, but that cost is refused: %+v", limit, at, d.Remaining, got)
			}
		}
	}
}

// TestLargest checks largest over random thresholds in the whole range of an int, each with a
// random guess near it or far: it finds the largest n that passes, 0 when none does, in at most
// 2·log2 of its distance from the guess, plus 3, calls of ok, whatever the range.
func TestLargest(t *testing.T) {
	rng := mathrand.New(mathrand.NewPCG(9, 10))
	for range 100_000 {
		most := []int{0, 1, 2, 10, math.MaxInt, math.MaxInt - 1, 1 + rng.IntN(math.MaxInt)}[rng.IntN(7)]
		threshold := upTo(rng, most) - 1 // below 0: none passes
		if rng.IntN(4) == 0 {
			threshold = []int{-1, 0, most}[rng.IntN(3)]
		}
		guess := threshold + int(rng.Int64N(1<<rng.IntN(62))) - int(rng.Int64N(1<<rng.IntN(62)))
		if guess < 0 || guess > most {
			guess = upTo(rng, most)
		}
		calls := 0
		got := largest(most, guess, func(n int) bool {
			calls++
			if n < 0 || n > most {
				t.Fatalf("largest(%d, %d) asked about %d", most, guess, n)
			}
			return n <= threshold
		})
		want := max(0, threshold)
		dist := uint(max(want-guess, guess-want))
		if got != want || calls > 2*bits.Len(dist)+3 {
			t.Fatalf("largest(%d, %d) with ok up to %d: %d in %d calls, want %d in at most %d", most, guess, threshold, got, calls, want, 2*bits.Len(dist)+3)
		}
	}
}

// upTo returns a random int from 0 to n.
func upTo(rng *mathrand.Rand, n int) int {
	if n == math.MaxInt {
		return int(rng.Uint64() & math.MaxInt)
	}
	return rng.IntN(n + 1)
}

// TestRemainingGuess checks remaining over random buckets, rates from 1e-12 to 1e20 a second
// and bursts up to the largest int, holding any tokens from a debt of the burst to the burst:
// the answer is the largest cost admits admits, and the first guess is within 2048 of it, the
// widest step between float64s of ints, so that largest finds it in a few calls whatever the
// rate and burst.
func TestRemainingGuess(t *testing.T) {
	rng := mathrand.New(mathrand.NewPCG(11, 12))
	for range 100_000 {
		burst := []int{1, 2, 5, 1000, 1 << 30, math.MaxInt, 1 + rng.IntN(math.MaxInt)}[rng.IntN(7)]
		pol := Policy{Limit: rate.Limit(math.Pow(10, -12+32*rng.Float64())), Burst: burst}
		tokens := float64(burst) * (2*rng.Float64() - 1)
		switch rng.IntN(4) {
		case 0:
			tokens = math.Nextafter(float64(burst), 0)
		case 1:
			tokens = math.Round(tokens)
		}
		n := remaining(pol, tokens)
		if n > 0 && !admits(pol, n, tokens) || n < burst && admits(pol, n+1, tokens) {
			t.Fatalf("%v/s, burst %d, %v tokens: remaining %d, which is not the largest cost admitted", pol.Limit, burst, tokens, n)
		}
		if guess := guessRemaining(pol, tokens); max(n-guess, guess-n) > 2048 {
			t.Fatalf("%v/s, burst %d, %v tokens: the guess %d is %d from the answer", pol.Limit, burst, tokens, guess, n-guess)
		}
	}
}

// TestTokenBucketNegativeZeroLimit decides a bucket of limit -0 (rate.Limit(0 / -d)) and burst
// 1 as one of limit 0: a key that spent its burst has Remaining 0 and a Reset of
// rate.InfDuration. It once reported Remaining 1 and a Reset of minus 292 years.
func TestTokenBucketNegativeZeroLimit(t *testing.T) {
	b := NewTokenBucket(rate.Limit(math.Copysign(0, -1)), 1)
	if d := decide(t, b, "k", 1, t0); !d.Allowed || d.Remaining != 0 || d.Reset != rate.InfDuration || math.Signbit(float64(d.Policy.Limit)) {
		t.Fatalf("the first request: %+v, want admitted, Remaining 0, Reset rate.InfDuration, limit 0", d)
	}
	if d := decide(t, b, "k", 1, t0); d.Allowed || d.Remaining != 0 || d.Reset != rate.InfDuration || d.RetryAfter != rate.InfDuration {
		t.Fatalf("the second request: %+v, want refused for ever, Remaining 0, Reset rate.InfDuration", d)
	}
}

// TestTokenBucketWaitAdmitsAtAnyInstant: a request refused with a wait, asked again at exactly
// now plus that wait, is admitted, whatever the instant to the nanosecond, the rate, the
// burst, the cost and the debt a charge left (seconds to decades), through Decide, Allow,
// and an All of two buckets: the float arithmetic of x/time/rate, whose reservation can come
// due a nanosecond or more after the slack, never leaves it refused.
func TestTokenBucketWaitAdmitsAtAnyInstant(t *testing.T) {
	rng := mathrand.New(mathrand.NewPCG(5, 8))
	ctx := context.Background()
	for i := range 20000 {
		lim := awkwardLimits[rng.IntN(len(awkwardLimits))]
		burst := 1 + rng.IntN(5)
		if rng.IntN(4) == 0 {
			burst = 1 + rng.IntN(1<<20)
		}
		cost := 1 + rng.IntN(burst)
		b := NewTokenBucket(lim, burst)
		t0 := time.Unix(1_700_000_000, rng.Int64N(1e9)).UTC()
		if rng.IntN(3) == 0 { // a debt of up to 50 years
			debt := time.Duration(rng.Int64N(int64(50 * 365 * 24 * time.Hour)))
			if err := b.Charge(ctx, "k", burst+int(min(float64(debt.Seconds())*float64(lim), 1<<40)), t0); err != nil {
				t.Fatal(err)
			}
		} else {
			decide(t, b, "k", burst, t0)
		}
		now := t0.Add(time.Duration(rng.Int64N(int64(time.Second))))
		var l Limiter = b
		how := "Decide"
		switch rng.IntN(3) {
		case 1:
			l, how = allowOnly{b}, "Allow"
		case 2:
			l, how = All(b, NewTokenBucket(rate.Inf, 1)), "All"
		}
		d, err := l.Decide(ctx, "k", cost, now)
		if err != nil || d.Allowed || d.RetryAfter >= rate.InfDuration {
			continue
		}
		if d.RetryAfter <= 0 || (how != "Allow" && d.Reset < d.RetryAfter) {
			t.Fatalf("%d %s: refused with a wait of %v, a reset of %v", i, how, d.RetryAfter, d.Reset)
		}
		if r, _ := l.Decide(ctx, "k", cost, now.Add(d.RetryAfter)); !r.Allowed {
			t.Fatalf("%d %s: rate %v, burst %d, cost %d at %v: refused with %v, asked again then: refused with %v",
				i, how, lim, burst, cost, now, d.RetryAfter, r.RetryAfter)
		}
	}
}

// awkwardLimits are rates whose waits x/time/rate's float arithmetic rounds: thirds, a rate
// over a minute and over seven hours, thousands a second, and one with decimals.
var awkwardLimits = []rate.Limit{1, 7.0 / 3, 1000, rate.Every(time.Minute), rate.Every(7 * time.Hour), 123456.789}

// allowOnly decides through a TokenBucket's Allow, as the middleware's quick path does.
type allowOnly struct{ b *TokenBucket }

func (a allowOnly) Decide(ctx context.Context, key string, cost int, now time.Time) (Decision, error) {
	wait, p, err := a.b.Allow(ctx, key, cost, now)
	return Decision{Allowed: wait == 0, RetryAfter: wait, Policy: p}, err
}

// TestTokenBucketAtTheBoundAboveBurst: a new key refused at the memory bound for a cost above
// its burst is told it never will be admitted (rate.InfDuration), as once it has room, rather
// than to come back when the room is free.
func TestTokenBucketAtTheBoundAboveBurst(t *testing.T) {
	for _, group := range []bool{false, true} {
		b := NewTokenBucket(rate.Every(time.Hour), 1, WithMaxMemory(16<<10))
		keys := keysInOnePart(b, 2)
		decide(t, b, keys[0], 1, t0)
		var l Limiter = b
		if group {
			l = All(b, NewTokenBucket(rate.Every(time.Hour), 2))
		}
		if d, err := l.Decide(context.Background(), keys[1], 2, t0); err != nil || d.RetryAfter != rate.InfDuration {
			t.Errorf("in an All %v: a cost of 2 for a new key at the bound: %+v, %v; want a RetryAfter of rate.InfDuration", group, d, err)
		}
		if d := decide(t, b, keys[1], 1, t0); d.RetryAfter <= 0 || d.RetryAfter > time.Hour {
			t.Errorf("a cost of 1 for a new key at the bound: %+v, want a wait of at most an hour", d)
		}
	}
}

// keysInOnePart returns n keys that b keeps in one part.
func keysInOnePart(b *TokenBucket, n int) []string {
	byPart := map[uint64][]string{}
	for i := 0; ; i++ {
		k := "key-" + strconv.Itoa(i)
		p := b.partOf(k)
		if byPart[p] = append(byPart[p], k); len(byPart[p]) == n {
			return byPart[p]
		}
	}
}

// TestTokenBucketReserveAgreesWithDecide: a request that Decide refuses with a wait w is refused
// by Reserve with a maxWait 1 ns shorter, with the same wait, and given its place by Reserve with
// a maxWait of w, with a RetryAfter of w: alone and in an All, at instants to the nanosecond.
func TestTokenBucketReserveAgreesWithDecide(t *testing.T) {
	rng := mathrand.New(mathrand.NewPCG(11, 12))
	ctx := context.Background()
	for i := range 20000 {
		lim := awkwardLimits[rng.IntN(len(awkwardLimits))]
		burst := 1 + rng.IntN(5)
		b := NewTokenBucket(lim, burst)
		var r edge.Reserver = b
		if i%2 == 1 {
			r = All(b, NewTokenBucket(1000, 1000)).(edge.Reserver)
		}
		t0 := time.Unix(1_700_000_000, rng.Int64N(1e9)).UTC()
		decide(t, b, "k", burst, t0)
		now := t0.Add(time.Duration(rng.Int64N(int64(time.Second))))
		d, _ := r.Decide(ctx, "k", 1, now)
		if d.Allowed || d.RetryAfter >= rate.InfDuration {
			continue
		}
		if s, _ := r.Reserve(ctx, "k", 1, now, d.RetryAfter-1); s.Allowed || s.RetryAfter != d.RetryAfter {
			t.Fatalf("%d: rate %v, burst %d: Decide refused with %v; Reserve with 1 ns less: %+v", i, lim, burst, d.RetryAfter, s)
		}
		if s, _ := r.Reserve(ctx, "k", 1, now, d.RetryAfter); !s.Allowed || s.RetryAfter != d.RetryAfter {
			t.Fatalf("%d: rate %v, burst %d: Decide refused with %v; Reserve with as much: %+v", i, lim, burst, d.RetryAfter, s)
		}
	}
}
