package retryafter_test

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/retryafter/retryafter"
	"github.com/retryafter/retryafter/limitertest"
)

// TestTokenBucketContract runs the Limiter contract shared by every limiter of the repository.
func TestTokenBucketContract(t *testing.T) {
	for _, c := range []struct {
		limit rate.Limit
		burst int
	}{{1, 1}, {3, 5}, {0.3, 3}, {rate.Every(7 * time.Second), 2}, {rate.Every(time.Hour), 10}} {
		t.Run(fmt.Sprintf("%v/%d", c.limit, c.burst), func(t *testing.T) {
			limitertest.Run(t, limitertest.Config{
				New:   func(*testing.T) retryafter.Limiter { return retryafter.NewTokenBucket(c.limit, c.burst) },
				Burst: c.burst,
				NewBurst: func(_ *testing.T, burst int) retryafter.Limiter {
					return retryafter.NewTokenBucket(c.limit, burst)
				},
				MaxBurst: maxExactBurst,
				// x/time/rate counts tokens in float64, and the bucket counts a reservation due
				// within a microsecond as due: its waits are never short, and tight to that.
				Resolution: time.Microsecond,
			})
		})
	}
}

// elsewhere is a Limiter of another kind than TokenBucket, as a store elsewhere: All does not
// combine it with TokenBuckets, but decides it in a step of its own and gives back what it spent.
type elsewhere struct{ b *retryafter.TokenBucket }

func (e elsewhere) Decide(ctx context.Context, key string, cost int, now time.Time) (retryafter.Decision, error) {
	return e.b.Decide(ctx, key, cost, now)
}

func (e elsewhere) Charge(ctx context.Context, key string, cost int, now time.Time) error {
	return e.b.Charge(ctx, key, cost, now)
}

// decideOnly is a Limiter that cannot give back what it spent.
type decideOnly struct{ b *retryafter.TokenBucket }

func (o decideOnly) Decide(ctx context.Context, key string, cost int, now time.Time) (retryafter.Decision, error) {
	return o.b.Decide(ctx, key, cost, now)
}

// TestAllContract runs the Limiter contract on the Limiters that All and Shared make, in each of
// the ways All decides: one bucket, buckets in one step, a store elsewhere and a bucket one after
// the other, a Limiter that cannot give back decided last, and alone. The layer at 1 a second
// binds; the others hold as much and refill ten times faster, so that they admit requests that
// it refuses, and must get them back.
func TestAllContract(t *testing.T) {
	slow := func() *retryafter.TokenBucket { return retryafter.NewTokenBucket(1, 3) }
	fast := func() *retryafter.TokenBucket { return retryafter.NewTokenBucket(10, 3) }
	for name, l := range map[string]func() retryafter.Limiter{
		"one bucket":       func() retryafter.Limiter { return retryafter.All(slow()) },
		"buckets":          func() retryafter.Limiter { return retryafter.All(slow(), fast()) },
		"elsewhere first":  func() retryafter.Limiter { return retryafter.All(elsewhere{fast()}, slow()) },
		"cannot give back": func() retryafter.Limiter { return retryafter.All(decideOnly{fast()}, slow()) },
		"only one":         func() retryafter.Limiter { return retryafter.All(decideOnly{slow()}) },
		"shared":           func() retryafter.Limiter { return retryafter.Shared(slow(), "everyone") },
	} {
		t.Run(name, func(t *testing.T) {
			limitertest.Run(t, limitertest.Config{
				New:        func(*testing.T) retryafter.Limiter { return l() },
				Burst:      3,
				Resolution: time.Microsecond,
				CannotWait: cannotWait[name],
			})
		})
	}
	// The same with bursts near the largest a TokenBucket counts exactly.
	for name, l := range map[string]func(burst int) retryafter.Limiter{
		"buckets": func(burst int) retryafter.Limiter {
			return retryafter.All(retryafter.NewTokenBucket(1, burst), retryafter.NewTokenBucket(10, burst))
		},
		"elsewhere first": func(burst int) retryafter.Limiter {
			return retryafter.All(elsewhere{retryafter.NewTokenBucket(10, burst)}, retryafter.NewTokenBucket(1, burst))
		},
		"shared": func(burst int) retryafter.Limiter {
			return retryafter.Shared(retryafter.NewTokenBucket(1, burst), "everyone")
		},
	} {
		t.Run(name+"/huge", func(t *testing.T) {
			limitertest.Run(t, limitertest.Config{
				New:        func(*testing.T) retryafter.Limiter { return l(3) },
				Burst:      3,
				Resolution: time.Microsecond,
				NewBurst:   func(_ *testing.T, burst int) retryafter.Limiter { return l(burst) },
				MaxBurst:   maxExactBurst,
				CannotWait: cannotWait[name],
			})
		})
	}
}

// cannotWait names the Alls of TestAllContract with a layer that cannot promise a place (one
// that is no edge.Reserver), so that a request it refuses can never wait: they must refuse it
// as Decide does, whatever the wait allowed.
var cannotWait = map[string]bool{"elsewhere first": true, "cannot give back": true, "only one": true}

// maxExactBurst is the largest burst a TokenBucket counts exactly, 2^53 (the largest int on a
// 32-bit platform).
const maxExactBurst = min(1<<53, math.MaxInt)

// TestTokenBucketBurstAboveExact checks that a burst above 2^53, which x/time/rate's float64
// tokens cannot count exactly, the bucket's own or a plan's, is taken as 2^53: at one instant no more is admitted than that,
// where a burst of the largest int admitted one more request than it holds.
func TestTokenBucketBurstAboveExact(t *testing.T) {
	if math.MaxInt <= maxExactBurst {
		t.Skip("ints are 32 bits: every burst is exact")
	}
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	exact := maxExactBurst // a variable: 2^53 + 1 does not compile where ints are 32 bits
	for _, burst := range []int{math.MaxInt, math.MaxInt - 1, math.MaxInt/2 + 1, exact + 1} {
		for i, first := range []int{1, 2, 1000} {
			b := retryafter.NewTokenBucket(1, burst)
			if i == 1 { // a plan's burst, as WithPolicyFunc gives it, the same
				b = retryafter.NewTokenBucket(1, 1, retryafter.WithPolicyFunc(func(string) retryafter.Policy {
					return retryafter.Policy{Limit: 1, Burst: burst}
				}))
			}
			d, _ := b.Decide(context.Background(), "k", first, t0)
			if !d.Allowed || d.Limit != maxExactBurst {
				t.Fatalf("burst %d, cost %d: %+v, want admitted with a Limit of 2^53", burst, first, d)
			}
			rest := maxExactBurst - first + 1
			if d, _ := b.Decide(context.Background(), "k", rest, t0); d.Allowed {
				t.Fatalf("burst %d: %d then %d admitted at one instant, past 2^53", burst, first, rest)
			}
		}
	}
}
