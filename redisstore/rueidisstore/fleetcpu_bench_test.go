package rueidisstore

import (
	"fmt"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/retryafter/retryafter"
	"github.com/retryafter/retryafter/redisstore"
	"github.com/retryafter/retryafter/redisstore/internal/fleetbench"
)

// BenchmarkFleetAdmitted runs the fleet of package fleetbench over rueidis, whose auto-pipelining
// shares round trips, at each concurrency, on the redis-server at REDIS_ADDR and on the Redis
// Cluster at REDIS_CLUSTER_ADDRS (or ones the test binary starts): the rows to set beside
// redisstore's BenchmarkFleetAdmitted.
//
//	go test -run '^$' -bench FleetAdmitted -benchtime 1x .
func BenchmarkFleetAdmitted(b *testing.B) {
	for _, target := range fleetbench.Targets(b) {
		stats := fleetbench.Counter(b, target)
		for _, c := range fleetbench.Concurrencies {
			b.Run(fmt.Sprintf("%s/rueidis/concurrency=%d", target.Name, c), func(b *testing.B) {
				var ls []retryafter.Limiter
				prefix := fmt.Sprintf("rueidisstore-fleet:%d:", time.Now().UnixNano()) // the fleet's
				for range fleetbench.Replicas {
					client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: target.Addrs})
					if err != nil {
						b.Fatal(err)
					}
					b.Cleanup(client.Close)
					ls = append(ls, New(client, fleetbench.Limit, fleetbench.Burst, redisstore.WithPrefix(prefix)))
				}
				fleetbench.Run(b, ls, c, stats)
			})
		}
	}
}
