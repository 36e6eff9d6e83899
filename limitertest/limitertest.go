// Package limitertest checks that a [retryafter.Limiter] keeps the contract of the interface,
// which the middleware and the clients it answers rely on: the wait of a refusal is exact, a
// refusal spends nothing, costs of 0 and below mean what the interface says, no cost or burst
// near the largest int wraps into an admission, and, for an edge.Reserver, a place is held
// exactly where the refusal said and given back whole. Every Limiter of this repository runs it;
// a Limiter of yours can too:
//
//	func TestContract(t *testing.T) {
//		limitertest.Run(t, limitertest.Config{
//			New:   func(t *testing.T) retryafter.Limiter { return mystore.New(10, 3) },
//			Burst: 3,
//		})
//	}
package limitertest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/retryafter/retryafter"
)

// Config describes the Limiter under test.
type Config struct {
	// New returns the Limiter to check, fresh for each sub-test: a key it has never seen must
	// admit Burst requests of cost 1 at one instant and refuse the next one with a finite
	// wait (its rate is above 0). Required.
	New func(t *testing.T) retryafter.Limiter

	// Burst is the most a key that has never been seen may spend at one instant, and the
	// largest cost the Limiter can ever admit. Required.
	Burst int

	// NewBurst returns a Limiter like New's but with a burst of burst, fresh for each call,
	// for the property over bursts near MaxBurst. If nil, that property is skipped.
	NewBurst func(t *testing.T, burst int) retryafter.Limiter

	// MaxBurst is the largest burst NewBurst accepts. If zero, the default is math.MaxInt.
	MaxBurst int

	// Resolution is the step of the Limiter's clock: a request that much before a refusal's
	// RetryAfter ends must still be refused. If zero, the default is a nanosecond.
	Resolution time.Duration

	// Start is the instant of the first request; each sub-test moves forward from it. If
	// zero, the default is 2026-11-29T12:00:00Z.
	Start time.Time

	// CannotWait says that the Limiter has Reserve (it is an edge.Reserver) but cannot promise
	// a request of a spent key a place: an All or a Shared over a Limiter that is no Reserver,
	// a wrapper that passes Reserve on to one (otelmetrics'), an All of redisstore Stores
	// combined in one script. Reserve must then refuse as Decide does, whatever the maxWait.
	CannotWait bool
}

// Run checks the Limiter of c in sub-tests, one property each.
func Run(t *testing.T, c Config) {
	t.Helper()
	if c.New == nil || c.Burst < 1 {
		t.Fatal("limitertest: Config needs New and a Burst of at least 1")
	}
	if c.Resolution <= 0 {
		c.Resolution = time.Nanosecond
	}
	if c.MaxBurst <= 0 {
		c.MaxBurst = math.MaxInt
	}
	if c.Start.IsZero() {
		c.Start = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	}
	t.Run("ExactWait", func(t *testing.T) { exactWait(t, c) })
	t.Run("RefusalSpendsNothing", func(t *testing.T) { refusalSpendsNothing(t, c) })
	t.Run("CostZeroPeeks", func(t *testing.T) { costZeroPeeks(t, c) })
	t.Run("NegativeCost", func(t *testing.T) { negativeCost(t, c) })
	t.Run("CostAboveBurst", func(t *testing.T) { costAboveBurst(t, c) })
	t.Run("HugeCost", func(t *testing.T) { hugeCost(t, c) })
	t.Run("HugeBurst", func(t *testing.T) { hugeBurst(t, c) })
	t.Run("Reserve", func(t *testing.T) { reserveProperties(t, c) })
}

// checker decides on one Limiter and fails the test on an error.
type checker struct {
	t   *testing.T
	l   retryafter.Limiter
	key string
}

func newChecker(t *testing.T, c Config) *checker {
	return &checker{t: t, l: c.New(t), key: "limitertest/" + t.Name()}
}

func (k *checker) decide(cost int, now time.Time) retryafter.Decision {
	k.t.Helper()
	d, err := k.l.Decide(context.Background(), k.key, cost, now)
	if err != nil {
		k.t.Fatalf("Decide(cost %d, %v): %v", cost, now, err)
	}
	if d.Allowed != (d.RetryAfter == 0) {
		k.t.Fatalf("Decide(cost %d, %v) = %+v: an admitted request has no wait, a refused one has one", cost, now, d)
	}
	return d
}

// spend admits the burst at now and returns the refusal that follows it.
func (k *checker) spend(burst int, now time.Time) retryafter.Decision {
	k.t.Helper()
	for i := range burst {
		if d := k.decide(1, now); !d.Allowed {
			k.t.Fatalf("request %d of a burst of %d refused at one instant: %+v", i+1, burst, d)
		}
	}
	d := k.decide(1, now)
	if d.Allowed {
		k.t.Fatalf("request %d admitted after a burst of %d at one instant", burst+1, burst)
	}
	if d.RetryAfter <= 0 || d.RetryAfter >= rate.InfDuration {
		k.t.Fatalf("refusal after the burst has RetryAfter %v, want a finite wait", d.RetryAfter)
	}
	return d
}

// exactWait: a request of the same cost one step before the wait ends is refused, and at its
// end admitted, over several refusals in a row.
func exactWait(t *testing.T, c Config) {
	k := newChecker(t, c)
	now := c.Start
	d := k.spend(c.Burst, now)
	for round := range 5 {
		early := now.Add(d.RetryAfter - c.Resolution)
		if e := k.decide(1, early); e.Allowed {
			t.Fatalf("round %d: admitted %v before the end of the RetryAfter %v", round, c.Resolution, d.RetryAfter)
		}
		now = now.Add(d.RetryAfter)
		if a := k.decide(1, now); !a.Allowed {
			t.Fatalf("round %d: refused at the end of the RetryAfter %v: %+v", round, d.RetryAfter, a)
		}
		d = k.decide(1, now)
		if d.Allowed {
			t.Fatalf("round %d: a second request admitted at the instant a wait ended", round)
		}
	}
}

// refusalSpendsNothing: many refusals at one instant all report the same wait, and the first
// request at its end is admitted as if they had never been made.
func refusalSpendsNothing(t *testing.T, c Config) {
	k := newChecker(t, c)
	now := c.Start
	first := k.spend(c.Burst, now)
	for i := range 20 {
		if d := k.decide(1, now); d.Allowed || d.RetryAfter != first.RetryAfter {
			t.Fatalf("refusal %d at the same instant: %+v, want the wait of the first, %v", i+2, d, first.RetryAfter)
		}
	}
	if d := k.decide(1, now.Add(first.RetryAfter)); !d.Allowed {
		t.Fatalf("after 21 refusals, refused at the end of the first one's wait: %+v", d)
	}
}

// costZeroPeeks: a cost of 0 is admitted and spends nothing, on a fresh key, a spent one and a
// key in between.
func costZeroPeeks(t *testing.T, c Config) {
	k := newChecker(t, c)
	now := c.Start
	for i := range c.Burst + 1 {
		for range 3 {
			if d := k.decide(0, now); !d.Allowed {
				t.Fatalf("a peek after %d requests refused: %+v", i, d)
			} else if d.Limit > 0 && d.Remaining != max(0, c.Burst-i) {
				t.Fatalf("a peek after %d requests reports Remaining %d, want %d", i, d.Remaining, c.Burst-i)
			}
		}
		d := k.decide(1, now)
		if want := i < c.Burst; d.Allowed != want {
			t.Fatalf("request %d after peeks: allowed %v, want %v: a peek spent quota", i+1, d.Allowed, want)
		}
	}
}

// negativeCost: an error wrapping ErrNegativeCost, and nothing spent.
func negativeCost(t *testing.T, c Config) {
	k := newChecker(t, c)
	now := c.Start
	for _, cost := range []int{-1, -c.Burst, -1 << 30} {
		d, err := k.l.Decide(context.Background(), k.key, cost, now)
		if !errors.Is(err, retryafter.ErrNegativeCost) {
			t.Fatalf("Decide(cost %d) = %+v, %v; want an error wrapping ErrNegativeCost", cost, d, err)
		}
		if d.Allowed {
			t.Fatalf("Decide(cost %d) admitted", cost)
		}
	}
	k.spend(c.Burst, now) // exactly the burst: the negative costs minted nothing
}

// costAboveBurst: a cost the Limiter can never admit is refused with rate.InfDuration, and
// spends nothing.
func costAboveBurst(t *testing.T, c Config) {
	k := newChecker(t, c)
	now := c.Start
	for _, cost := range []int{c.Burst + 1, 2 * c.Burst, 1 << 30} {
		if d := k.decide(cost, now); d.Allowed || d.RetryAfter != rate.InfDuration {
			t.Fatalf("cost %d above the burst of %d: %+v, want a refusal with RetryAfter rate.InfDuration", cost, c.Burst, d)
		}
	}
	k.spend(c.Burst, now)
}

// nearMaxInt returns n costs from math.MaxInt/2+1 to math.MaxInt, the largest first: the sum
// of any two, or of the largest and any count above 0, overflows an int.
func nearMaxInt(rng *rand.Rand, n int) []int {
	costs := []int{math.MaxInt, math.MaxInt - 1, math.MaxInt/2 + 1}
	for len(costs) < n {
		costs = append(costs, math.MaxInt-rng.IntN(math.MaxInt/2))
	}
	return costs
}

// hugeCost: with none, one, some or all of the burst spent, a cost near the largest int is
// refused with rate.InfDuration, never wrapped into a small or negative sum and admitted, and
// spends nothing.
func hugeCost(t *testing.T, c Config) {
	rng := rand.New(rand.NewPCG(55, 1))
	seen := map[int]bool{}
	for _, spent := range []int{0, 1, c.Burst / 2, c.Burst - 1, c.Burst} {
		if seen[spent] {
			continue
		}
		seen[spent] = true
		k := newChecker(t, c)
		k.key += fmt.Sprint("/", spent)
		now := c.Start
		for i := range spent {
			if d := k.decide(1, now); !d.Allowed {
				t.Fatalf("request %d of a burst of %d refused at one instant: %+v", i+1, c.Burst, d)
			}
		}
		costs := append(nearMaxInt(rng, 8), math.MaxInt-c.Burst+1)
		if spent > 0 {
			costs = append(costs, math.MaxInt-spent+1) // spent + cost is the largest int + 1
		}
		for _, cost := range costs {
			if d := k.decide(cost, now); d.Allowed || d.RetryAfter != rate.InfDuration {
				t.Fatalf("cost %d with %d of a burst of %d spent: %+v, want a refusal with RetryAfter rate.InfDuration", cost, spent, c.Burst, d)
			}
		}
		k.spend(c.Burst-spent, now) // exactly the rest: the huge costs spent nothing
	}
}

// hugeBurst: on Limiters with bursts near MaxBurst, no request is admitted that would take the
// total spent at one instant past the burst, a cost near the largest int is refused with
// rate.InfDuration, and a cost that fits a fresh key is admitted.
func hugeBurst(t *testing.T, c Config) {
	if c.NewBurst == nil {
		t.Skip("limitertest: Config.NewBurst is nil: bursts near the largest int not checked")
	}
	rng := rand.New(rand.NewPCG(55, 2))
	bursts := []int{c.MaxBurst, c.MaxBurst - 1, c.MaxBurst/2 + 1}
	for range 3 {
		bursts = append(bursts, c.MaxBurst-rng.IntN(c.MaxBurst/2+1))
	}
	for _, burst := range bursts {
		if burst < 2 {
			continue
		}
		now := c.Start
		for i, costs := range [][]int{
			append([]int{burst - 1, 2, 1, 1}, nearMaxInt(rng, 4)...),
			{burst, 1, math.MaxInt},
			{1, burst, math.MaxInt},
		} {
			key := fmt.Sprint("limitertest/", t.Name(), "/", burst, "/", i)
			b := &hugeChecker{checker: checker{t: t, l: c.NewBurst(t, burst), key: key}, burst: burst}
			for _, cost := range costs {
				b.admit(cost, now)
			}
		}
	}
}

// hugeChecker decides on a Limiter of a large burst at one instant and keeps the total it
// admitted on the key.
type hugeChecker struct {
	checker
	burst int
	spent int // admitted on the key; never above burst
}

// admit decides cost and checks the answer against what is already spent: a cost that takes
// the total past the burst is refused (with rate.InfDuration if it alone exceeds the burst),
// and one that fits a fresh key is admitted. A cost that fits after some was spent may be
// refused: a Limiter that counts in float64 cannot tell every int apart near the largest.
func (b *hugeChecker) admit(cost int, now time.Time) {
	b.t.Helper()
	d := b.decide(cost, now)
	fits := cost <= b.burst-b.spent
	switch {
	case d.Allowed && !fits:
		b.t.Fatalf("burst %d, %d spent: cost %d admitted, past the burst: %+v", b.burst, b.spent, cost, d)
	case !d.Allowed && fits && b.spent == 0:
		b.t.Fatalf("burst %d, fresh key: cost %d refused: %+v", b.burst, cost, d)
	case !d.Allowed && cost > b.burst && d.RetryAfter != rate.InfDuration:
		b.t.Fatalf("burst %d: cost %d, above the burst, refused with RetryAfter %v, want rate.InfDuration", b.burst, cost, d.RetryAfter)
	case d.Remaining < 0 || d.Limit > 0 && d.Remaining > d.Limit:
		b.t.Fatalf("burst %d, %d spent, cost %d: Remaining %d outside 0 to Limit %d", b.burst, b.spent, cost, d.Remaining, d.Limit)
	}
	if d.Allowed {
		b.spent += cost
	}
}
