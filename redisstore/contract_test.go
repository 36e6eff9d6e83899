package redisstore

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/time/rate"

	"github.com/retryafter/retryafter"
	"github.com/retryafter/retryafter/limitertest"
)

// TestContract runs the Limiter contract shared by every limiter of the repository, on a real
// Redis and on a Redis Cluster, deciding at the test's instants to Redis's resolution, the
// microsecond.
func TestContract(t *testing.T) {
	t.Run("server", func(t *testing.T) { contract(t, newClient(t, sharedAddr(t))) })
	t.Run("cluster", func(t *testing.T) { contract(t, newClusterClient(t, clusterAddrs(t))) })
}

func contract(t *testing.T, client redis.Scripter) {
	for _, c := range []struct {
		limit rate.Limit
		burst int
	}{{1, 1}, {3, 5}, {0.3, 3}, {6, 2}, {rate.Every(time.Hour), 10}} {
		t.Run(fmt.Sprintf("%v/%d", c.limit, c.burst), func(t *testing.T) {
			limitertest.Run(t, limitertest.Config{
				New: func(t *testing.T) retryafter.Limiter {
					return New(client, c.limit, c.burst, WithPrefix(testPrefix(t)), WithTimeout(testTimeout), withInjectedClock())
				},
				Burst:      c.burst,
				Resolution: time.Microsecond,
				// Bursts near the largest the store takes, whose refill fits 2^52 ns: at 10^9 a
				// second, 2^52 itself.
				NewBurst: func(t *testing.T, burst int) retryafter.Limiter {
					return New(client, 1e9, burst, WithPrefix(testPrefix(t)), WithTimeout(testTimeout), withInjectedClock())
				},
				MaxBurst: min(maxHorizon, math.MaxInt),
			})
		})
	}
}
