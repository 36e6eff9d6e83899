package redisstore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/time/rate"

	"github.com/retryafter/retryafter"
)

// configs are the rates and bursts the property tests run over. Their emission intervals are
// whole nanoseconds (or, for 3/s, a third of a nanosecond short of one), so the store and
// x/time/rate count the same tokens at every millisecond.
var configs = []struct {
	limit rate.Limit
	burst int
}{
	{rate.Every(time.Second), 1},
	{rate.Every(200 * time.Millisecond), 10},
	{rate.Limit(3), 4},
	{rate.Every(time.Minute), 5},
	{rate.Every(1500 * time.Millisecond), 2},
	{rate.Limit(1000), 50},
	{rate.Every(time.Hour), 100},
	{rate.Every(time.Hour), 1250}, // 4.5e15 ns to refill: just under the 2^52 ns New allows
}

// testTimeout is the timeout of the stores whose tests are not about timeouts: long, since a
// loaded machine can stall a round trip on loopback for hundreds of milliseconds.
const testTimeout = 10 * time.Second

// decide calls s.Decide and fails the test on an error.
func decide(t *testing.T, s *Store, key string, cost int, now time.Time) retryafter.Decision {
	t.Helper()
	d, err := s.Decide(context.Background(), key, cost, now)
	if err != nil {
		t.Fatalf("Decide(%q, %d, %v): %v", key, cost, now, err)
	}
	return d
}

// TestAgreesWithTokenBucket runs random arrivals, on a millisecond grid and an injected clock,
// through the store and through the in-memory retryafter.TokenBucket: they must admit and
// refuse the same requests with the same wait, and the store's Remaining and Reset must be
// those of an x/time/rate limiter fed the same admitted requests.
func TestAgreesWithTokenBucket(t *testing.T) {
	client := newClient(t, sharedAddr(t))
	for _, c := range configs {
		t.Run(fmt.Sprintf("%v/%d", c.limit, c.burst), func(t *testing.T) {
			store := New(client, c.limit, c.burst, WithPrefix(testPrefix(t)), WithTimeout(testTimeout), withInjectedClock())
			mem := retryafter.NewTokenBucket(c.limit, c.burst)
			ref := rate.NewLimiter(c.limit, c.burst)
			rng := rand.New(rand.NewPCG(1, uint64(c.burst)))
			interval := time.Duration(float64(time.Second) / float64(c.limit))
			now := t0
			refused, n := 0, 400+2*c.burst
			for i := range n {
				now = now.Add(time.Duration(rng.Int64N(int64(2*interval/time.Millisecond)+1)) * time.Millisecond / time.Duration(c.burst))
				got := decide(t, store, "k", 1, now)
				want, _ := mem.Decide(context.Background(), "k", 1, now)
				if got.Allowed != want.Allowed {
					t.Fatalf("request %d at %v: store allowed=%v, TokenBucket allowed=%v", i, now.Sub(t0), got.Allowed, want.Allowed)
				}
				if diff := got.RetryAfter - want.RetryAfter; diff < -2*time.Microsecond || diff > 2*time.Microsecond {
					t.Fatalf("request %d at %v: store RetryAfter=%v, TokenBucket %v", i, now.Sub(t0), got.RetryAfter, want.RetryAfter)
				}
				if got.Allowed {
					ref.ReserveN(now, 1)
				} else {
					refused++
				}
				tokens := ref.TokensAt(now)
				if want := int(math.Floor(tokens + 1e-6)); got.Remaining != want || got.Limit != c.burst {
					t.Fatalf("request %d: Limit=%d Remaining=%d, want %d and %d (%.9f tokens)", i, got.Limit, got.Remaining, c.burst, want, tokens)
				}
				reset := time.Duration((float64(c.burst) - tokens) / float64(c.limit) * float64(time.Second))
				if diff := got.Reset - reset; diff < -2*time.Microsecond || diff > 2*time.Microsecond {
					t.Fatalf("request %d: Reset=%v, want %v", i, got.Reset, reset)
				}
			}
			if refused == 0 || refused == n {
				t.Fatalf("%d of %d refused: the arrivals do not exercise both answers", refused, n)
			}
		})
	}
}

// TestRetryAfterIsExact checks on an injected clock, for random costs and arrivals, that a
// refused request's wait is exact to the microsecond: a microsecond before it the same request
// is still refused, and told to wait exactly that microsecond; at it, the request is admitted.
// A cost above the burst is never admitted.
func TestRetryAfterIsExact(t *testing.T) {
	client := newClient(t, sharedAddr(t))
	for _, c := range configs {
		t.Run(fmt.Sprintf("%v/%d", c.limit, c.burst), func(t *testing.T) {
			store := New(client, c.limit, c.burst, WithPrefix(testPrefix(t)), WithTimeout(testTimeout), withInjectedClock())
			rng := rand.New(rand.NewPCG(2, uint64(c.burst)))
			interval := time.Duration(float64(time.Second) / float64(c.limit))
			now := t0
			checked := 0
			for range 300 {
				now = now.Add(time.Duration(rng.Int64N(int64(interval)/int64(c.burst)+1)) / time.Microsecond * time.Microsecond)
				cost := 1 + rng.IntN(c.burst)
				d := decide(t, store, "k", cost, now)
				if d.Allowed {
					continue
				}
				if d.RetryAfter <= 0 || d.RetryAfter%time.Microsecond != 0 {
					t.Fatalf("refused with RetryAfter %v", d.RetryAfter)
				}
				early := decide(t, store, "k", cost, now.Add(d.RetryAfter-time.Microsecond))
				if early.Allowed || early.RetryAfter != time.Microsecond {
					t.Fatalf("at RetryAfter-1µs: allowed=%v RetryAfter=%v, want refused with 1µs", early.Allowed, early.RetryAfter)
				}
				now = now.Add(d.RetryAfter)
				if !decide(t, store, "k", cost, now).Allowed {
					t.Fatalf("cost %d refused after waiting exactly RetryAfter=%v", cost, d.RetryAfter)
				}
				checked++
			}
			if checked < 20 {
				t.Fatalf("only %d refusals checked", checked)
			}
			if d := decide(t, store, "k", c.burst+1, now); d.Allowed || d.RetryAfter != rate.InfDuration {
				t.Fatalf("cost above the burst: allowed=%v RetryAfter=%v, want never", d.Allowed, d.RetryAfter)
			}
		})
	}
}

// TestResetIsExact checks on an injected clock, for random costs and arrivals, that Reset is
// exact to the microsecond, for a Store and for an All of it (decided by the script of several
// layers): once Reset has passed the key may spend its whole burst, and a microsecond earlier
// it may not. So Reset is rounded up to the microsecond, never down.
func TestResetIsExact(t *testing.T) {
	client := newClient(t, sharedAddr(t))
	for _, c := range configs {
		for _, all := range []bool{false, true} {
			t.Run(fmt.Sprintf("%v/%d/all=%v", c.limit, c.burst, all), func(t *testing.T) {
				store := New(client, c.limit, c.burst, WithPrefix(testPrefix(t)), WithTimeout(testTimeout), withInjectedClock())
				var l retryafter.Limiter = store
				if all {
					l = retryafter.All(store)
				}
				rng := rand.New(rand.NewPCG(7, uint64(c.burst)))
				interval := time.Duration(float64(time.Second) / float64(c.limit))
				now := t0
				checked := 0
				for range 100 {
					now = now.Add(time.Duration(rng.Int64N(int64(interval)+1)) / time.Microsecond * time.Microsecond)
					d, err := l.Decide(context.Background(), "k", rng.IntN(c.burst+1), now)
					if err != nil {
						t.Fatal(err)
					}
					if d.Reset <= 0 {
						continue
					}
					if d.Reset%time.Microsecond != 0 {
						t.Fatalf("Reset %v is not whole microseconds", d.Reset)
					}
					if e := decide(t, store, "k", c.burst, now.Add(d.Reset-time.Microsecond)); e.Allowed {
						t.Fatalf("the whole burst admitted a microsecond before Reset %v", d.Reset)
					}
					now = now.Add(d.Reset)
					if e := decide(t, store, "k", c.burst, now); !e.Allowed {
						t.Fatalf("the whole burst refused at Reset %v: %+v", d.Reset, e)
					}
					checked++
				}
				if checked < 50 {
					t.Fatalf("only %d Resets checked", checked)
				}
			})
		}
	}
}

// TestRoundTrip sends requests through the middleware on an injected clock: every 429 carries
// a Date of now and a Retry-After in whole seconds; waiting exactly that long gets the request
// through, and waiting a second less does not.
func TestRoundTrip(t *testing.T) {
	client := newClient(t, sharedAddr(t))
	for _, c := range configs {
		t.Run(fmt.Sprintf("%v/%d", c.limit, c.burst), func(t *testing.T) {
			clock := t0
			now := func() time.Time { return clock }
			store := New(client, c.limit, c.burst, WithPrefix(testPrefix(t)), WithTimeout(testTimeout), withInjectedClock())
			h := retryafter.LimitWith(store, retryafter.WithClock(now))(okHandler)
			rng := rand.New(rand.NewPCG(3, uint64(c.burst)))
			interval := time.Duration(float64(time.Second) / float64(c.limit))
			trips := 0
			for i := 0; trips < 20 && i < 5000; i++ {
				clock = clock.Add(time.Duration(rng.Int64N(int64(interval) / int64(c.burst))))
				w := get(h, "192.0.2.1:1234")
				if w.Code == http.StatusOK {
					continue
				}
				wait := wantRefusal(t, w, clock)
				clock = clock.Add(wait - time.Second)
				if w := get(h, "192.0.2.1:1234"); w.Code != http.StatusTooManyRequests {
					t.Fatalf("a second short of Retry-After %v: %d, want 429", wait, w.Code)
				}
				clock = clock.Add(time.Second)
				if w := get(h, "192.0.2.1:1234"); w.Code != http.StatusOK {
					t.Fatalf("after Retry-After %v: %d, want 200", wait, w.Code)
				}
				trips++
			}
			if trips < 20 {
				t.Fatalf("only %d round trips", trips)
			}
		})
	}
}

var okHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) })

// TestRedisClockDecides checks that the decision ignores the replica's clock: requests that
// claim instants hours apart still share one bucket, refilled by Redis's clock only. Redis's
// clock is read before the first request and after each refusal, which bounds how much of it
// the requests took, however slow the machine.
func TestRedisClockDecides(t *testing.T) {
	addr := sharedAddr(t)
	prefix := testPrefix(t)
	client := newClient(t, addr)
	a := New(client, rate.Every(time.Minute), 3, WithPrefix(prefix), WithTimeout(testTimeout))
	b := New(newClient(t, addr), rate.Every(time.Minute), 3, WithPrefix(prefix), WithTimeout(testTimeout))
	start := redisNow(t, client)
	for i, at := range []time.Time{t0, t0.Add(time.Hour), t0.Add(-time.Hour)} {
		if d := decide(t, []*Store{a, b}[i%2], "k", 1, at); !d.Allowed || d.Remaining != 2-i {
			t.Fatalf("request %d: allowed=%v remaining=%d, want admitted with %d left", i, d.Allowed, d.Remaining, 2-i)
		}
	}
	for _, at := range []time.Time{t0.Add(24 * time.Hour), t0.Add(-24 * time.Hour)} {
		d := decide(t, b, "k", 1, at)
		took := redisNow(t, client).Sub(start)
		// Three minutes' worth of tokens were spent at most took ago by Redis's clock, starting
		// from a full bucket: the next token comes a minute after the first request, the full
		// bucket three minutes after it.
		if d.Allowed || d.RetryAfter < time.Minute-took || d.RetryAfter > time.Minute {
			t.Fatalf("claiming %v: allowed=%v RetryAfter=%v, want refused for [1m-%v, 1m]", at, d.Allowed, d.RetryAfter, took)
		}
		if d.Remaining != 0 || d.Reset < 3*time.Minute-took || d.Reset > 3*time.Minute {
			t.Fatalf("Remaining=%d Reset=%v, want 0 and within [3m-%v, 3m]", d.Remaining, d.Reset, took)
		}
	}
}

// TestRealClock checks the store on Redis's clock at a high rate, 1000/s with bursts of 3: a
// request refused for want of n tokens is told to wait at most n ms, and once it has waited
// that long it is admitted; and a key expires once its bucket is full.
//
// Each round first empties the bucket with a request for all 3 tokens, so that the next
// request, for n, is refused unless n ms of Redis's clock passed between the two. A loaded
// machine can take that long for a round trip, so the rounds go on until every n has been
// refused a few times (or a bounded number of rounds has run), and only a run without a
// single refusal fails for checking nothing.
func TestRealClock(t *testing.T) {
	const burst = 3
	addr := sharedAddr(t)
	client := newClient(t, addr)
	prefix := testPrefix(t)
	s := New(client, 1000, burst, WithPrefix(prefix), WithTimeout(testTimeout))
	var checked [burst + 1]int
	// waitOut checks a refusal of a request for cost tokens, waits its RetryAfter and checks
	// that the same request is then admitted.
	waitOut := func(cost int, d retryafter.Decision) {
		t.Helper()
		if d.RetryAfter <= 0 || d.RetryAfter > time.Duration(cost)*time.Millisecond {
			t.Fatalf("cost %d refused with RetryAfter %v at 1000/s, want within (0, %dms]", cost, d.RetryAfter, cost)
		}
		time.Sleep(d.RetryAfter)
		if d := decide(t, s, "k", cost, time.Time{}); !d.Allowed {
			t.Fatalf("cost %d refused after sleeping RetryAfter: %+v", cost, d)
		}
		checked[cost]++
	}
	enough := func() bool { return min(checked[1], checked[2], checked[3]) >= 3 }
	for round := 0; !enough() && round < 3000; round++ {
		if d := decide(t, s, "k", burst, time.Time{}); !d.Allowed {
			waitOut(burst, d)
		}
		cost := 1 + round%burst
		if d := decide(t, s, "k", cost, time.Time{}); !d.Allowed {
			waitOut(cost, d)
		}
	}
	t.Logf("refusals checked by cost: %v", checked[1:])
	if checked[1]+checked[2]+checked[3] == 0 {
		t.Fatal("nothing was refused: the test checks nothing")
	}

	// A request that empties the bucket leaves it full again 3 ms later, when the key expires.
	var before, after int64
	for i := 0; ; i++ {
		if i == 10 {
			t.Fatal("no request for the whole burst admitted in 10 tries")
		}
		before = redisMillis(t, client)
		d := decide(t, s, "k", burst, time.Time{})
		after = redisMillis(t, client)
		if d.Allowed {
			if d.Remaining != 0 || d.Reset != burst*time.Millisecond {
				t.Fatalf("the whole burst admitted with Remaining=%d Reset=%v, want 0 and 3ms", d.Remaining, d.Reset)
			}
			break
		}
		time.Sleep(d.RetryAfter)
	}
	wantExpiry(t, client, prefix+"k", before, after, burst)
	ctx := context.Background()
	deadline := time.Now().Add(10 * time.Second)
	for client.Exists(ctx, prefix+"k").Val() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the key did not expire")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestRefusalCostsNothing checks that a refused request leaves the key in Redis as it was.
func TestRefusalCostsNothing(t *testing.T) {
	client := newClient(t, sharedAddr(t))
	prefix := testPrefix(t)
	s := New(client, rate.Every(time.Minute), 2, WithPrefix(prefix), WithTimeout(testTimeout))
	ctx := context.Background()
	decide(t, s, "k", 1, time.Time{})
	decide(t, s, "k", 1, time.Time{})
	before := client.Get(ctx, prefix+"k").Val()
	expiry := client.PExpireTime(ctx, prefix+"k").Val()
	for range 10 {
		if d := decide(t, s, "k", 1, time.Time{}); d.Allowed {
			t.Fatal("third request within a minute admitted")
		}
	}
	if after := client.Get(ctx, prefix+"k").Val(); after != before || before == "" {
		t.Fatalf("state %q after refusals, was %q", after, before)
	}
	if after := client.PExpireTime(ctx, prefix+"k").Val(); after != expiry || expiry <= 0 {
		t.Fatalf("expiry %v after refusals, was %v", after, expiry)
	}
}

// TestExpiresWhenFresh checks, on an injected clock, that a key is set to expire when its
// bucket will be full (PTTL is Reset rounded up to the millisecond), and that from then on it
// answers as a key never seen. Its keys, unlike those of withInjectedClock, expire as the store
// sets them.
func TestExpiresWhenFresh(t *testing.T) {
	client := newClient(t, sharedAddr(t))
	prefix := testPrefix(t)
	s := New(client, rate.Every(700*time.Millisecond), 4, WithPrefix(prefix), withCallerClock(), WithTimeout(testTimeout))
	rng := rand.New(rand.NewPCG(4, 4))
	now := t0
	for range 100 {
		now = now.Add(time.Duration(rng.Int64N(int64(time.Second))) / time.Microsecond * time.Microsecond)
		before := redisMillis(t, client)
		d := decide(t, s, "k", 1+rng.IntN(2), now)
		after := redisMillis(t, client)
		if !d.Allowed {
			continue
		}
		// The key expires ceil(Reset / 1ms) after Redis's clock read at the write.
		wantExpiry(t, client, prefix+"k", before, after, int64((d.Reset+time.Millisecond-1)/time.Millisecond))
		fresh := decide(t, s, fmt.Sprint("fresh", now.UnixNano()), 1, now.Add(d.Reset))
		again := decide(t, s, "k", 1, now.Add(d.Reset))
		if again != fresh {
			t.Fatalf("at Reset the key answers %+v, a fresh key %+v", again, fresh)
		}
		now = now.Add(d.Reset)
	}
}

// TestZeroCost checks that a request of cost 0 is a peek: it writes nothing to Redis, neither
// the state nor its expiry (nor the instant of the last charge that a key in debt keeps),
// reports the key's quota, and is admitted unless the key owes more than its bucket holds; and
// that a negative cost is an error wrapping retryafter.ErrNegativeCost that spends nothing.
func TestZeroCost(t *testing.T) {
	client := newClient(t, sharedAddr(t))
	ctx := context.Background()

	t.Run("redis clock", func(t *testing.T) {
		prefix := testPrefix(t)
		s := New(client, rate.Every(time.Minute), 1, WithPrefix(prefix), WithTimeout(testTimeout))
		for range 3 {
			if d := decide(t, s, "k", 0, time.Time{}); !d.Allowed || d.RetryAfter != 0 || d.Limit != 1 || d.Remaining != 1 || d.Reset != 0 {
				t.Fatalf("cost 0 on a new key: %+v, want admitted with a full bucket", d)
			}
		}
		if n := client.Exists(ctx, prefix+"k").Val(); n != 0 {
			t.Fatal("cost 0 on a new key created it")
		}
		decide(t, s, "k", 1, time.Time{})
		before := client.Get(ctx, prefix+"k").Val()
		expiry := client.PExpireTime(ctx, prefix+"k").Val()
		for range 3 {
			if d := decide(t, s, "k", 0, time.Time{}); !d.Allowed || d.RetryAfter != 0 || d.Remaining != 0 || d.Reset <= 0 || d.Reset > time.Minute {
				t.Fatalf("cost 0 on an empty bucket: %+v, want admitted with nothing left and Reset within (0, 1m]", d)
			}
		}
		if _, err := s.Decide(ctx, "k", -1, time.Time{}); !errors.Is(err, retryafter.ErrNegativeCost) {
			t.Fatalf("negative cost: error %v, want one wrapping retryafter.ErrNegativeCost", err)
		}
		if after := client.Get(ctx, prefix+"k").Val(); after != before || before == "" {
			t.Fatalf("state %q after cost 0 and a negative cost, was %q", after, before)
		}
		if after := client.PExpireTime(ctx, prefix+"k").Val(); after != expiry || expiry <= 0 {
			t.Fatalf("expiry %v after cost 0 and a negative cost, was %v", after, expiry)
		}
	})

	t.Run("injected clock", func(t *testing.T) {
		prefix := testPrefix(t)
		s := New(client, rate.Every(time.Minute), 1, WithPrefix(prefix), WithTimeout(testTimeout), withInjectedClock())
		decide(t, s, "k", 1, t0)
		state := client.Get(ctx, prefix+"k").Val()
		for range 3 {
			if d := decide(t, s, "k", 0, t0); !d.Allowed || d.RetryAfter != 0 || d.Limit != 1 || d.Remaining != 0 || d.Reset != time.Minute {
				t.Fatalf("cost 0: %+v, want admitted with nothing left and Reset 1m", d)
			}
		}
		// A second before the token was spent the bucket owes a sixtieth of a token: a peek then
		// is refused, for exactly as long as the debt takes to repay, and spends nothing either.
		if d := decide(t, s, "k", 0, t0.Add(-time.Second)); d.Allowed || d.RetryAfter != time.Second || d.Remaining != 0 || d.Reset != time.Minute+time.Second {
			t.Fatalf("cost 0 while the key owes: %+v, want refused for 1s with Reset 1m1s", d)
		}
		if d := decide(t, s, "k", 0, t0.Add(-time.Microsecond)); d.Allowed || d.RetryAfter != time.Microsecond {
			t.Fatalf("cost 0 a microsecond before the debt is repaid: %+v, want refused for 1µs", d)
		}
		if d := decide(t, s, "k", 0, t0); !d.Allowed {
			t.Fatalf("cost 0 once the debt is repaid: %+v, want admitted", d)
		}
		if after := client.Get(ctx, prefix+"k").Val(); after != state || state == "" {
			t.Fatalf("state %q after requests of cost 0, was %q", after, state)
		}
		if d := decide(t, s, "k", 1, t0.Add(time.Minute)); !d.Allowed {
			t.Fatalf("after a minute: %+v, want admitted", d)
		}
		_, err := s.Decide(ctx, "k", -1, t0)
		if !errors.Is(err, retryafter.ErrNegativeCost) || !strings.HasPrefix(err.Error(), "redisstore: ") {
			t.Fatalf("negative cost: error %v, want one starting \"redisstore: \" and wrapping retryafter.ErrNegativeCost", err)
		}
	})

	t.Run("caller clock", func(t *testing.T) {
		// The keys expire as the store sets them, by the instant it decides at: a write at a
		// later instant would set a sooner expiry, and put that instant in the state of a key
		// in debt in place of the charge's, from which a clock that steps back is repaired.
		prefix := testPrefix(t)
		s := New(client, rate.Every(time.Minute), 2, WithPrefix(prefix), WithTimeout(testTimeout), withCallerClock())
		decide(t, s, "k", 1, t0)
		charge(t, s, "debt", 5, t0) // 3 tokens of debt
		var state, expiry [2]any
		for i, k := range []string{"k", "debt"} {
			state[i], expiry[i] = client.Get(ctx, prefix+k).Val(), client.PExpireTime(ctx, prefix+k).Val()
		}
		for i := range 3 {
			at := t0.Add(time.Duration(i) * 10 * time.Second)
			if d := decide(t, s, "k", 0, at); !d.Allowed || d.Remaining != 1 {
				t.Fatalf("a peek %v after a token was spent: %+v, want admitted with 1 left", at.Sub(t0), d)
			}
			if d := decide(t, s, "debt", 0, at); d.Allowed || d.RetryAfter != 3*time.Minute-at.Sub(t0) {
				t.Fatalf("a peek %v after a debt of 3m: %+v, want refused for the rest", at.Sub(t0), d)
			}
		}
		for i, k := range []string{"k", "debt"} {
			if st, ex := client.Get(ctx, prefix+k).Val(), client.PExpireTime(ctx, prefix+k).Val(); st != state[i] || ex != expiry[i] {
				t.Fatalf("%s: state %q expiring at %v after peeks, was %q at %v (PEXPIRETIME)", k, st, ex, state[i], expiry[i])
			}
		}
	})
}

// TestInf checks that rate.Inf admits without asking Redis (the client here has no server),
// with a full bucket, and that a negative cost is an error wrapping retryafter.ErrNegativeCost
// whatever the rate, also decided without asking Redis.
func TestInf(t *testing.T) {
	client := newClient(t, "127.0.0.1:1")
	if d := decide(t, New(client, rate.Inf, 5), "k", 1000, t0); !d.Allowed || d.Limit != 5 || d.Remaining != 5 || d.Reset != 0 {
		t.Fatalf("rate.Inf: %+v, want admitted with Limit and Remaining 5", d)
	}
	for _, limit := range []rate.Limit{rate.Inf, 1} {
		d, err := New(client, limit, 5).Decide(context.Background(), "k", -1, t0)
		if !errors.Is(err, retryafter.ErrNegativeCost) || d != (retryafter.Decision{}) {
			t.Fatalf("rate %v, negative cost: %+v, %v, want an error wrapping retryafter.ErrNegativeCost", limit, d, err)
		}
	}
}

func TestNewPanics(t *testing.T) {
	client := newClient(t, "127.0.0.1:1")
	plain := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	cluster := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}})
	t.Cleanup(func() { plain.Close(); cluster.Close(); ring.Close() })
	pipeliner, err := client.AutoPipeline()
	if err != nil {
		t.Fatal(err)
	}
	// Each panic names what is wrong, the check that caught it.
	const (
		nilClient   = "New with a nil client"
		deadlines   = "ignores context deadlines"
		burst       = "burst below 1"
		notPositive = "rate limit not positive"
		tooFast     = "above 1e9 per second"
		tooSlow     = "longer than 2^52 ns"
	)
	for name, c := range map[string]struct {
		fn   func()
		want string
	}{
		"nil client": {func() { New(nil, 1, 1) }, nilClient},
		"zero burst": {func() { New(client, 1, 0) }, burst},
		"zero rate":  {func() { New(client, 0, 1) }, notPositive},
		"negative":   {func() { New(client, -1, 1) }, notPositive},
		"NaN":        {func() { New(client, rate.Limit(math.NaN()), 1) }, notPositive},
		"too fast":   {func() { New(client, 3e9, 1) }, tooFast},
		"above 1e9":  {func() { New(client, 1.5e9, 1) }, tooFast}, // the interval would round to 1 ns
		"just above": {func() { New(client, rate.Limit(math.Nextafter(1e9, 2e9)), 1) }, tooFast},
		"too slow":   {func() { New(client, rate.Every(time.Hour), 2000) }, tooSlow},
		"just over":  {func() { New(client, rate.Every(1<<42), 1<<10+1) }, tooSlow},
		"nil option": {func() { New(client, 1, 1, nil) }, "nil Option"},
		// Clients that ignore context deadlines, and so would ignore the store's timeout.
		"client without context timeouts":  {func() { New(plain, 1, 1) }, deadlines},
		"cluster without context timeouts": {func() { New(cluster, 1, 1) }, deadlines},
		"ring without context timeouts":    {func() { New(ring, 1, 1) }, deadlines},
		"autopipeliner":                    {func() { New(pipeliner, 1, 1) }, deadlines},
		"zero probe interval":              {func() { WithProbeInterval(0) }, "WithProbeInterval not positive"},
		"zero timeout":                     {func() { WithTimeout(0) }, "WithTimeout not positive"},
		"zero charge delay":                {func() { WithDeferredCharges(0) }, "WithDeferredCharges not positive"},
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				r := recover()
				if s, ok := r.(string); !ok || !strings.HasPrefix(s, "redisstore: ") || !strings.Contains(s, c.want) {
					t.Fatalf("recovered %v, want a panic starting with \"redisstore: \" that says %q", r, c.want)
				}
			}()
			c.fn()
		})
	}
	New(client, rate.Every(time.Hour), 1000) // 1000 hours is within 2^52 ns
	New(client, rate.Every(1<<42), 1<<10)    // exactly 2^52 ns, the longest refill New accepts
	New(client, 1e9, 1)                      // the fastest rate: 1 ns per token
}

// TestIntervalRounded checks that the store counts each token as the emission interval rounded
// to the nearest nanosecond, as New's doc says, at rates whose interval has a fraction of a
// nanosecond of .5 or more (6/s: 166666666.67 ns) and below it (3/s): once a burst of 1000 is
// spent at one instant, a request for all 1000 waits exactly 1000 rounded intervals, to the
// microsecond above; an interval truncated (or rounded the wrong way) is a microsecond off.
func TestIntervalRounded(t *testing.T) {
	client := newClient(t, sharedAddr(t))
	const burst = 1000
	for _, limit := range []rate.Limit{6, 7, 11, 13, 3, 0.3, 1e6 / 3} {
		t.Run(fmt.Sprint(limit), func(t *testing.T) {
			s := New(client, limit, burst, WithPrefix(testPrefix(t)), WithTimeout(testTimeout), withInjectedClock())
			interval := math.Round(1e9 / float64(limit))
			if math.Abs(interval-1e9/float64(limit)) > 0.5 {
				t.Fatalf("test arithmetic: %v is not the nearest nanosecond to 1e9 / %v", interval, limit)
			}
			want := time.Duration(math.Ceil(burst*interval/1e3)) * time.Microsecond
			if d := decide(t, s, "k", burst, t0); !d.Allowed || d.Reset != want {
				t.Fatalf("the whole burst: %+v, want admitted with Reset %v", d, want)
			}
			if d := decide(t, s, "k", burst, t0); d.Allowed || d.RetryAfter != want || d.Reset != want {
				t.Fatalf("the whole burst again: %+v, want refused with RetryAfter and Reset %v", d, want)
			}
		})
	}
}

// TestOutage stops a real redis-server under the middleware (killed, shut down, and frozen) and
// starts it again: meanwhile requests fail closed with 503 and Retry-After 1, or are admitted
// when failing open, each within the timeout; the error hook sees every failure; no goroutine is
// left behind; and the store works again once the server is back.
func TestOutage(t *testing.T) {
	srv := startServer(t)
	client := newClient(t, srv.Addr())
	const timeout = 150 * time.Millisecond
	// margin is how late past the timeout a call may return: scheduling on a loaded machine,
	// far below the 3 s of go-redis's ReadTimeout, which bounds a call that the timeout does not.
	const margin = time.Second
	store := New(client, rate.Every(time.Minute), 1000, WithPrefix(testPrefix(t)), WithTimeout(timeout))
	var hooked atomic.Int64
	hook := retryafter.WithErrorHook(func(r *http.Request, err error) { hooked.Add(1) })
	clock := retryafter.WithClock(func() time.Time { return t0 })
	closed := retryafter.LimitWith(store, clock, hook)(okHandler)
	open := retryafter.LimitWith(store, clock, hook, retryafter.WithFailOpen(true))(okHandler)

	if w := get(closed, "192.0.2.1:1"); w.Code != http.StatusOK {
		t.Fatalf("with Redis up: %d", w.Code)
	}
	baseline := runtime.NumGoroutine()

	// down checks that requests, while Redis cannot answer, fail as configured and in time.
	down := func(t *testing.T) {
		t.Helper()
		const n = 8
		var wg sync.WaitGroup
		before := hooked.Load()
		for i := range n {
			wg.Go(func() {
				h, want := closed, http.StatusServiceUnavailable
				if i%2 == 1 {
					h, want = open, http.StatusOK
				}
				start := time.Now()
				w := get(h, "192.0.2.1:1")
				if took := time.Since(start); took > timeout+margin {
					t.Errorf("answered after %v with a timeout of %v", took, timeout)
				}
				if w.Code != want {
					t.Errorf("status %d, want %d", w.Code, want)
					return
				}
				if want == http.StatusServiceUnavailable {
					if w.Header().Get("Retry-After") != "1" || w.Header().Get("Date") == "" {
						t.Errorf("503 with Retry-After %q, Date %q", w.Header().Get("Retry-After"), w.Header().Get("Date"))
					}
					if strings.Contains(w.Body.String(), "redis") {
						t.Errorf("body shows the error: %q", w.Body.String())
					}
				}
			})
		}
		wg.Wait()
		if got := hooked.Load() - before; got != n {
			t.Errorf("error hook called %d times for %d failures", got, n)
		}
	}
	// up waits (at most 20 s, for a loaded machine) until requests are admitted again.
	up := func(t *testing.T) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for get(closed, "192.0.2.1:1").Code != http.StatusOK {
			if time.Now().After(deadline) {
				t.Fatal("Redis is back but requests still fail")
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	for _, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGTERM} {
		t.Run(sig.String(), func(t *testing.T) {
			srv.Stop(sig)
			down(t)
			srv.Restart()
			up(t)
		})
	}
	t.Run("frozen", func(t *testing.T) {
		srv.Signal(syscall.SIGSTOP)
		start := time.Now()
		_, err := store.Decide(context.Background(), "k", 1, t0)
		if took := time.Since(start); err == nil || took < timeout || took > timeout+margin {
			t.Fatalf("frozen Redis: err=%v after %v, want an error after the %v timeout, within %v of it", err, took, timeout, margin)
		}
		down(t)
		srv.Signal(syscall.SIGCONT)
		up(t)
	})

	deadline := time.Now().Add(20 * time.Second)
	for runtime.NumGoroutine() > baseline {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("%d goroutines, %d before the outages:\n%s", runtime.NumGoroutine(), baseline, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestClockStepsBack steps the clock the store decides by back (Redis's TIME, here injected)
// right after a key spent its burst, by steps from a third of a refill to a month, then sends
// random arrivals of costs 0 to 2 for ten minutes: from the step on, the store decides exactly as
// an in-memory bucket emptied at the step does. So a step back of any size costs a client at most
// one refill of the burst, not the length of the step, and admits nothing an empty bucket would
// not. With the caller's clock, instants up to a refill out of order are no step (the contract's
// out-of-order arrivals), so only longer steps are repaired.
func TestClockStepsBack(t *testing.T) {
	client := newClient(t, sharedAddr(t))
	const (
		every = time.Second
		burst = 5
	)
	for _, mode := range clockSteps(burst * every) {
		for _, step := range mode.steps {
			for _, all := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/%v/all=%v", mode.name, step, all), func(t *testing.T) {
					stepsBack(t, client, every, burst, step, all, mode.opts)
				})
			}
		}
	}
}

// stepsBack is one case of TestClockStepsBack: a step back by step after a store of every and
// burst with opts spent its burst, and ten minutes of decisions after it, by the store or by an
// All of it (decided by the script of several layers).
func stepsBack(t *testing.T, client *redis.Client, every time.Duration, burst int, step time.Duration, all bool, opts []Option) {
	s := New(client, rate.Every(every), burst, append([]Option{WithPrefix(testPrefix(t)), WithTimeout(testTimeout)}, opts...)...)
	var l retryafter.Limiter = s
	if all {
		l = retryafter.All(s)
	}
	if d := decide(t, s, "k", burst, t0); !d.Allowed {
		t.Fatalf("the burst: %+v", d)
	}
	at := t0.Add(-step)
	ref := retryafter.NewTokenBucket(rate.Every(every), burst)
	ref.Decide(context.Background(), "k", burst, at)
	rng := rand.New(rand.NewPCG(6, uint64(step)))
	admitted := 0
	for now := at; now.Before(at.Add(10 * time.Minute)); now = now.Add(time.Duration(rng.Int64N(int64(2*every))) / time.Microsecond * time.Microsecond) {
		cost := rng.IntN(3)
		got, err := l.Decide(context.Background(), "k", cost, now)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := ref.Decide(context.Background(), "k", cost, now)
		if !agrees(got, want) {
			t.Fatalf("at step + %v, cost %d: %+v, a bucket emptied at the step %+v", now.Sub(at), cost, got, want)
		}
		if got.Allowed {
			admitted += cost
		}
	}
	t.Logf("step back %v: %d tokens admitted in ten minutes", step, admitted)
}

// TestStepTolerance checks the edge of the caller's clock's tolerance, for a key in debt and one
// not: an instant exactly one refill of the burst before the key's last write arrived out of
// order, and is decided as it is; one a microsecond earlier is a clock that stepped back, and
// the key is repaired.
func TestStepTolerance(t *testing.T) {
	client := newClient(t, sharedAddr(t))
	const (
		every = time.Second
		burst = 5
	)
	horizon := burst * every
	t.Run("not in debt", func(t *testing.T) {
		s := New(client, rate.Every(every), burst, WithPrefix(testPrefix(t)), WithTimeout(testTimeout), withInjectedClock())
		decide(t, s, "k", burst, t0)
		// At t0 - horizon the bucket spent at t0 owes a second burst: not repaired.
		if d := decide(t, s, "k", 1, t0.Add(-horizon)); d.Allowed || d.RetryAfter != horizon+every {
			t.Fatalf("exactly a refill back: %+v, want refused for %v", d, horizon+every)
		}
		// A microsecond earlier: repaired to a bucket emptied then.
		if d := decide(t, s, "k", 1, t0.Add(-horizon-time.Microsecond)); d.Allowed || d.RetryAfter != every {
			t.Fatalf("a refill and a microsecond back: %+v, want refused for %v", d, every)
		}
	})
	t.Run("in debt", func(t *testing.T) {
		s := New(client, rate.Every(every), burst, WithPrefix(testPrefix(t)), WithTimeout(testTimeout), withInjectedClock())
		charge(t, s, "k", burst+3, t0) // owes 3 s at t0
		if d := decide(t, s, "k", 0, t0.Add(-horizon)); d.Allowed || d.RetryAfter != horizon+3*every {
			t.Fatalf("exactly a refill back: %+v, want refused for %v", d, horizon+3*every)
		}
		// A microsecond earlier: the debt it had when charged, from then.
		if d := decide(t, s, "k", 0, t0.Add(-horizon-time.Microsecond)); d.Allowed || d.RetryAfter != 3*every {
			t.Fatalf("a refill and a microsecond back: %+v, want refused for %v", d, 3*every)
		}
	})
}
