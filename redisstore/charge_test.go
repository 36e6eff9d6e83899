package redisstore

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/time/rate"

	"github.com/retryafter/retryafter"
)

// charge calls s.Charge and fails the test on an error.
func charge(t *testing.T, s *Store, key string, cost int, now time.Time) {
	t.Helper()
	if err := s.Charge(context.Background(), key, cost, now); err != nil {
		t.Fatalf("Charge(%q, %d, %v): %v", key, cost, now, err)
	}
}

// clockModes are the two rules by which the script tells a clock that stepped back: Redis's
// TIME, which never runs back (a tolerance of 0), and the caller's clock of the tests, whose
// instants may arrive out of order by a refill of the burst.
var clockModes = []struct {
	name string
	opts []Option
}{
	{"redis clock", []Option{withInjectedClock(), withStepTolerance(0)}},
	{"caller clock", []Option{withInjectedClock()}},
}

// TestChargeDebt charges a key more than its bucket holds, by a token to a thousand buckets:
// every request of the key, even of cost 0, is then refused until the debt is repaid, told the
// exact wait (a microsecond early it is still refused), and the key then counts on as a bucket
// emptied at that instant. A debt of many buckets is a debt, not a clock that stepped back: the
// script must not repair it to an empty bucket.
func TestChargeDebt(t *testing.T) {
	client := newClient(t, sharedAddr(t))
	const (
		every = 100 * time.Millisecond
		burst = 5
	)
	for _, mode := range clockModes {
		for _, debt := range []int{1, burst, 4 * burst, 1000 * burst} {
			t.Run(fmt.Sprintf("%s/%d", mode.name, debt), func(t *testing.T) {
				s := New(client, rate.Every(every), burst, append([]Option{WithPrefix(testPrefix(t)), WithTimeout(testTimeout)}, mode.opts...)...)
				charge(t, s, "k", burst+debt, t0)
				owes := time.Duration(debt) * every
				if d := decide(t, s, "k", 0, t0); d.Allowed || d.RetryAfter != owes || d.Remaining != 0 || d.Limit != burst || d.Reset != owes+burst*every {
					t.Fatalf("a peek in debt of %d tokens: %+v, want refused for %v, Reset %v", debt, d, owes, owes+burst*every)
				}
				if d := decide(t, s, "k", 2, t0.Add(time.Millisecond)); d.Allowed || d.RetryAfter != owes+2*every-time.Millisecond {
					t.Fatalf("cost 2 in debt: %+v, want refused for %v", d, owes+2*every-time.Millisecond)
				}
				if d := decide(t, s, "k", 0, t0.Add(owes-time.Microsecond)); d.Allowed || d.RetryAfter != time.Microsecond {
					t.Fatalf("a microsecond before the debt is repaid: %+v, want refused for 1µs", d)
				}
				if d := decide(t, s, "k", 0, t0.Add(owes)); !d.Allowed || d.Remaining != 0 {
					t.Fatalf("once the debt is repaid: %+v, want a peek admitted with nothing left", d)
				}
				if d := decide(t, s, "k", 1, t0.Add(owes+every-time.Microsecond)); d.Allowed || d.RetryAfter != time.Microsecond {
					t.Fatalf("cost 1 a microsecond before its token: %+v, want refused for 1µs", d)
				}
				if d := decide(t, s, "k", 1, t0.Add(owes+every)); !d.Allowed || d.Remaining != 0 {
					t.Fatalf("cost 1 a token after the debt: %+v, want admitted", d)
				}
				// Charges add up, in debt too.
				charge(t, s, "k", 3, t0.Add(owes+every))
				charge(t, s, "k", 4, t0.Add(owes+every))
				if d := decide(t, s, "k", 0, t0.Add(owes+every)); d.Allowed || d.RetryAfter != 7*every {
					t.Fatalf("after charges of 3 and 4 on an empty bucket: %+v, want refused for %v", d, 7*every)
				}
			})
		}
	}
}

// TestChargeRefund gives tokens back: they return to the bucket as if the requests that spent
// them had not been made, never beyond a full bucket, which is a key no longer kept; a refund to
// a key not held writes nothing; a refund in debt shortens the debt.
func TestChargeRefund(t *testing.T) {
	client := newClient(t, sharedAddr(t))
	ctx := context.Background()
	for _, mode := range clockModes {
		t.Run(mode.name, func(t *testing.T) {
			prefix := testPrefix(t)
			s := New(client, rate.Every(time.Second), 5, append([]Option{WithPrefix(prefix), WithTimeout(testTimeout)}, mode.opts...)...)
			decide(t, s, "k", 3, t0)
			charge(t, s, "k", -2, t0)
			if d := decide(t, s, "k", 0, t0); d.Remaining != 4 || d.Reset != time.Second {
				t.Fatalf("3 spent, 2 given back: %+v, want 4 left and Reset 1s", d)
			}
			charge(t, s, "k", -100, t0)
			if d := decide(t, s, "k", 0, t0); d.Remaining != 5 || d.Reset != 0 {
				t.Fatalf("given back more than was spent: %+v, want a full bucket", d)
			}
			if n := client.Exists(ctx, prefix+"k").Val(); n != 0 {
				t.Fatal("a key given back to a full bucket is still kept")
			}
			charge(t, s, "new", -3, t0)
			if n := client.Exists(ctx, prefix+"new").Val(); n != 0 {
				t.Fatal("a refund to a key not held created it")
			}
			charge(t, s, "k", 15, t0) // 10 tokens of debt
			charge(t, s, "k", -4, t0.Add(time.Second))
			// At t0+1s the key owes 9 (a token repaid); 4 given back leave 5.
			if d := decide(t, s, "k", 0, t0.Add(time.Second)); d.Allowed || d.RetryAfter != 5*time.Second {
				t.Fatalf("10 owed, a second later 4 given back: %+v, want refused for 5s", d)
			}
			if d := decide(t, s, "k", 1, t0.Add(7*time.Second)); !d.Allowed || d.Remaining != 0 {
				t.Fatalf("after the rest of the debt and a token: %+v, want admitted with nothing left", d)
			}
		})
	}
}

// TestChargeExpiry checks, on Redis's clock, that a key in debt expires when its bucket is full
// again, the debt repaid and the burst refilled, and that a charge moves the expiry with the
// debt.
func TestChargeExpiry(t *testing.T) {
	client := newClient(t, sharedAddr(t))
	prefix := testPrefix(t)
	ctx := context.Background()
	s := New(client, rate.Every(100*time.Millisecond), 5, WithPrefix(prefix), WithTimeout(testTimeout))
	before := redisMillis(t, client)
	charge(t, s, "k", 25, time.Time{}) // 20 tokens of debt: 2 s, then 0.5 s to refill
	after := redisMillis(t, client)
	wantExpiry(t, client, prefix+"k", before, after, 2500)
	d := decide(t, s, "k", 0, time.Time{})
	if took := time.Duration(redisMillis(t, client)-before) * time.Millisecond; d.Allowed || d.RetryAfter > 2*time.Second || d.RetryAfter < 2*time.Second-took-time.Millisecond {
		t.Fatalf("in debt of 2s on Redis's clock: %+v, want refused for [2s-%v, 2s]", d, took)
	}
	// The debt is no clock that stepped back: refusals leave it as it was.
	if v := client.Get(ctx, prefix+"k").Val(); !strings.Contains(v, ".") {
		t.Fatalf("state %q of a key in debt, want the form with the instant of the charge", v)
	}
	// 15 given back move the instant the bucket is full 1.5 s earlier: 1 s after the charge,
	// to the millisecond above.
	charge(t, s, "k", -15, time.Time{})
	at, err := client.PExpireTime(ctx, prefix+"k").Result()
	if err != nil || at.Milliseconds() < before+1000 || at.Milliseconds() > after+1001 {
		t.Fatalf("expiry %v (%v) after giving back 15, want 1 s after the charge in [%d, %d]", at, err, before, after)
	}
	charge(t, s, "k", -100, time.Time{})
	if n := client.Exists(ctx, prefix+"k").Val(); n != 0 {
		t.Fatal("a key given back to a full bucket is still kept")
	}
}

// TestChargeCap charges costs beyond any debt the script counts exactly: the debt is capped so
// that the bucket is full 9e15 ns after the charge, and the key still decides and gives back.
func TestChargeCap(t *testing.T) {
	if strconv.IntSize < 64 {
		t.Skip("costs beyond the capped debt do not fit a 32-bit int")
	}
	var pow53 int64 = 1 << 53
	client := newClient(t, sharedAddr(t))
	for _, c := range []struct {
		limit rate.Limit
		burst int
	}{{rate.Every(100 * time.Millisecond), 5}, {rate.Every(time.Hour), 1250}, {1e9, 1}} {
		t.Run(fmt.Sprintf("%v/%d", c.limit, c.burst), func(t *testing.T) {
			s := New(client, c.limit, c.burst, WithPrefix(testPrefix(t)), WithTimeout(testTimeout), withInjectedClock(), withStepTolerance(0))
			horizon := time.Duration(s.own.interval) * time.Duration(c.burst)
			for _, cost := range []int{math.MaxInt, int(pow53), int(9e15/s.own.interval) + 1} {
				charge(t, s, "k", cost, t0)
				if d := decide(t, s, "k", 0, t0); d.Allowed || d.Reset != 9e15/1e3*time.Microsecond || d.RetryAfter != (9e15-horizon+999)/1e3*time.Microsecond {
					t.Fatalf("charged %d: %+v, want Reset 9e15 ns and RetryAfter 9e15 ns less a refill of %v", cost, d, horizon)
				}
			}
			charge(t, s, "k", math.MinInt, t0)
			if d := decide(t, s, "k", c.burst, t0); !d.Allowed {
				t.Fatalf("given back the most there is: %+v, want the whole burst admitted", d)
			}
		})
	}
}

// TestClockStepsBackInDebt steps the clock back right after a key was charged into debt, by a
// microsecond to a month: from the step on, the store decides exactly as an in-memory bucket
// charged the same at the step does. A step back neither forgives the debt nor adds the step to
// it. With the caller's clock, instants up to a refill out of order are no step, so only longer
// steps are repaired.
func TestClockStepsBackInDebt(t *testing.T) {
	client := newClient(t, sharedAddr(t))
	const (
		every = time.Second
		burst = 5
		debt  = 40 // tokens beyond the bucket
	)
	for _, mode := range clockSteps(burst * every) {
		for _, step := range mode.steps {
			t.Run(fmt.Sprintf("%s/%v", mode.name, step), func(t *testing.T) {
				s := New(client, rate.Every(every), burst, append([]Option{WithPrefix(testPrefix(t)), WithTimeout(testTimeout)}, mode.opts...)...)
				charge(t, s, "k", burst+debt, t0)
				at := t0.Add(-step)
				ref := retryafter.NewTokenBucket(rate.Every(every), burst)
				if err := ref.Charge(context.Background(), "k", burst+debt, at); err != nil {
					t.Fatal(err)
				}
				rng := rand.New(rand.NewPCG(8, uint64(step)))
				admitted := 0
				for now := at; now.Before(at.Add(2 * time.Minute)); now = now.Add(time.Duration(rng.Int64N(int64(2*every))) / time.Microsecond * time.Microsecond) {
					cost := rng.IntN(3)
					got := decide(t, s, "k", cost, now)
					want, _ := ref.Decide(context.Background(), "k", cost, now)
					if !agrees(got, want) {
						t.Fatalf("at step + %v, cost %d: %+v, a bucket charged the same at the step %+v", now.Sub(at), cost, got, want)
					}
					if got.Allowed {
						admitted += cost
					}
				}
				if admitted == 0 {
					t.Fatal("nothing admitted in two minutes: the debt outlived its repayment")
				}
			})
		}
	}
}

//go:embed testdata/decide-before-debts.lua
var decideBeforeDebts string

// TestDebtReadBeforeDebts runs the decision script of the version before debts, as a replica
// not yet upgraded would, on a key in debt: it must not fail (a failing script would take that
// replica's whole store down), and reads the key as a clock that stepped back, an empty bucket,
// forgiving the debt beyond it.
func TestDebtReadBeforeDebts(t *testing.T) {
	client := newClient(t, sharedAddr(t))
	prefix := testPrefix(t)
	const every = 100 * time.Millisecond
	s := New(client, rate.Every(every), 5, WithPrefix(prefix), WithTimeout(testTimeout))
	charge(t, s, "k", 1000, time.Time{})
	old := redis.NewScript(decideBeforeDebts)
	res, err := old.Run(context.Background(), client, []string{prefix + "k"}, int64(every), 5, 1).Int64Slice()
	if err != nil {
		t.Fatalf("the script before debts on a key in debt: %v", err)
	}
	if res[0] != 0 || res[1] <= 0 || res[1] > every.Microseconds() || res[2] != 0 {
		t.Fatalf("the script before debts answered %v, want refused for at most a token's %v, the bucket empty", res, every)
	}
	if d := decide(t, s, "k", 0, time.Time{}); !d.Allowed || d.Reset > 5*every {
		t.Fatalf("after the older script's repair: %+v, want at most an empty bucket", d)
	}
}

// TestChargeOutage checks Charge while Redis is down: an error wrapping ErrUnavailable, at once
// once the store knows it (after downAfter failures in a row); with a local fallback, the local bucket is charged instead, and
// decides the debt exactly.
func TestChargeOutage(t *testing.T) {
	client := newClient(t, sharedAddr(t))
	o := &outages{Scripter: keptKeys{client}}
	o.down.Store(true)
	s := New(o, rate.Every(time.Second), 5, WithPrefix(testPrefix(t)), WithTimeout(testTimeout), withCallerClock(), WithProbeInterval(time.Hour))
	var first error
	for range downAfter {
		first = s.Charge(context.Background(), "k", 10, t0)
		if !errors.Is(first, ErrUnavailable) {
			t.Fatalf("Charge with Redis down: %v, want an error wrapping ErrUnavailable", first)
		}
	}
	if err := s.Charge(context.Background(), "k", 10, t0); err != first {
		t.Fatalf("Charge once the store knows Redis is down: %v, want %v at once", err, first)
	}

	local := New(o, rate.Every(time.Second), 5, WithPrefix(testPrefix(t)), WithTimeout(testTimeout), withCallerClock(), WithProbeInterval(time.Hour), WithLocalFallback(1))
	charge(t, local, "k", 10, t0) // 5 of debt, in the local bucket
	if d := decide(t, local, "k", 0, t0); d.Allowed || (d.RetryAfter-5*time.Second).Abs() > 2*time.Microsecond {
		t.Fatalf("charged 10 locally: %+v, want refused for 5s", d)
	}
}

// TestChargeNothing checks the charges that need no round trip: a cost of 0, and any cost at
// rate.Inf (the client here has no server).
func TestChargeNothing(t *testing.T) {
	client := newClient(t, "127.0.0.1:1")
	if err := New(client, 1, 5).Charge(context.Background(), "k", 0, t0); err != nil {
		t.Fatalf("cost 0: %v", err)
	}
	for _, cost := range []int{1, -1, math.MaxInt} {
		if err := New(client, rate.Inf, 5).Charge(context.Background(), "k", cost, t0); err != nil {
			t.Fatalf("rate.Inf, cost %d: %v", cost, err)
		}
	}
}
