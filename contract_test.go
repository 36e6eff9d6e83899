package retryafter_test

import (
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
