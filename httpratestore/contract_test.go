package httpratestore_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/retryafter/retryafter"
	"github.com/retryafter/retryafter/httpratestore"
	"github.com/retryafter/retryafter/limitertest"
)

// TestContract runs the Limiter contract shared by every limiter of the repository.
func TestContract(t *testing.T) {
	for _, c := range []struct {
		limit  int
		window time.Duration
	}{{1, time.Second}, {3, 10 * time.Second}, {10, time.Minute}, {5, 250 * time.Millisecond}} {
		t.Run(fmt.Sprintf("%d per %v", c.limit, c.window), func(t *testing.T) {
			limitertest.Run(t, limitertest.Config{
				New:   func(*testing.T) retryafter.Limiter { return httpratestore.New(c.limit, c.window, nil) },
				Burst: c.limit,
				NewBurst: func(_ *testing.T, limit int) retryafter.Limiter {
					return httpratestore.New(limit, c.window, nil)
				},
			})
		})
	}
}
