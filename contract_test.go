package retryafter_test

import (
	"context"
	"fmt"
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
			})
		})
	}
}
