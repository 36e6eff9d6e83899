package redisstore

import (
	"fmt"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/retryafter/retryafter"
	"github.com/retryafter/retryafter/redisstore/internal/fleetbench"
)

// BenchmarkFleetAdmitted runs the fleet of package fleetbench over go-redis, with round trips
// shared between concurrent decisions (batch=on, the default) and each decision its own round trip
// (batch=off, as before), side by side at each concurrency, on the redis-server at REDIS_ADDR and
// on the Redis Cluster at REDIS_CLUSTER_ADDRS (or ones the test binary starts).
//
//	go test -run '^$' -bench FleetAdmitted -benchtime 1x .
func BenchmarkFleetAdmitted(b *testing.B) {
	for _, target := range fleetbench.Targets(b) {
		stats := fleetbench.Counter(b, target)
		for _, c := range fleetbench.Concurrencies {
			for _, batch := range []string{"off", "on"} {
				b.Run(fmt.Sprintf("%s/go-redis/batch=%s/concurrency=%d", target.Name, batch, c), func(b *testing.B) {
					var ls []retryafter.Limiter
					prefix := testPrefix(b) // one for the fleet: its replicas share the keys
					for range fleetbench.Replicas {
						var client redis.Scripter
						if target.Cluster {
							client = newClusterClient(b, target.Addrs)
						} else {
							client = newClient(b, target.Addrs[0])
						}
						s := New(client, fleetbench.Limit, fleetbench.Burst, WithPrefix(prefix))
						if batch == "off" {
							s.batch = nil
						}
						ls = append(ls, s)
					}
					fleetbench.Run(b, ls, c, stats)
				})
			}
		}
	}
}
