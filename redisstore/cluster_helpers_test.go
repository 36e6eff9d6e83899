package redisstore

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/retryafter/retryafter/internal/testkit/redistest"
)

// A cluster is a Redis Cluster of the test's own: 3 masters and 3 replicas.
type cluster = redistest.Cluster

// nodeTimeout is the cluster-node-timeout of the test clusters: how long a master may be
// unreachable before its replica is promoted.
const nodeTimeout = 1000 * time.Millisecond

// startCluster starts a cluster of the test's own and stops it when the test ends. It skips
// the test (fails it in CI) when redis-server or redis-cli is missing.
func startCluster(t testing.TB) *cluster {
	t.Helper()
	return redistest.StartCluster(t, nodeTimeout)
}

// clusterAddrs returns the addresses of the cluster the tests share: REDIS_CLUSTER_ADDRS, or
// one that the test binary starts (see package redistest).
func clusterAddrs(t testing.TB) []string {
	t.Helper()
	return redistest.ClusterAddrs(t)
}

// newClusterClient returns a client of the cluster at addrs that honours context deadlines,
// closed when the test ends.
func newClusterClient(t testing.TB, addrs []string) *redis.ClusterClient {
	t.Helper()
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	return c
}

// mastersOf returns, for each key, the address of the master that holds its slot.
func mastersOf(t testing.TB, c *redis.ClusterClient, keys []string) []string {
	t.Helper()
	ctx := context.Background()
	shards, err := c.ClusterShards(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	var masters []string
	for _, k := range keys {
		slot, err := c.ClusterKeySlot(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, sh := range shards {
			for _, r := range sh.Slots {
				if r.Start <= slot && slot <= r.End {
					for _, n := range sh.Nodes {
						if n.Role == "master" {
							masters = append(masters, net.JoinHostPort(n.IP, strconv.FormatInt(n.Port, 10)))
						}
					}
				}
			}
		}
	}
	return masters
}
