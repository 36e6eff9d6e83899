package redisstore

import (
	"fmt"
	"testing"

	"github.com/redis/go-redis/v9"
	"golang.org/x/time/rate"

	"github.com/retryafter/retryafter"
)

// BenchmarkFleetHotKey floods one shared key from 3 replicas (3 Stores, each on a client of its
// own, 4 goroutines each) at 9,000 requests/s in all for 2 s, evenly spread and in turn, on the
// real redis-server at REDIS_ADDR and on a Redis Cluster (REDIS_CLUSTER_ADDRS, or one the tests
// start): "hot", a limit of 30,000/s with bursts of 1,000, so that every request is admitted,
// "even", 9,000/s with bursts of 900, the demand's own rate, and "flood", 900/s with bursts of
// 90, so that about 90% are refused. "store" decides by the Store
// itself (one script call a request, but for the refusals it remembers), "leased-N" by
// Store.Leased(N). It reports, from the servers' own counts (INFO commandstats, INFO cpu, summed
// over the masters of a cluster), script calls per request, the scripts' µs and Redis's CPU µs
// per request, the decisions per second that one Redis core would take at that CPU per request
// (decisions/core-s, 1e6 / redis-cpu-µs/req) and those at which the busiest master's core would
// be saturated (ceiling-decisions/s; on one server, the same), the refused share, and the
// admitted over the bound, burst + limit × the flood's length, which must be 0 or less.
//
//	REDIS_ADDR=127.0.0.1:6379 go test -run '^$' -bench FleetHotKey -benchtime 1x .
func BenchmarkFleetHotKey(b *testing.B) {
	loads := []struct {
		name  string
		limit rate.Limit
		burst int
	}{{"hot", 30000, 1000}, {"even", 9000, 900}, {"flood", 900, 90}}
	limiters := []struct {
		name string
		new  func(s *Store) retryafter.Limiter
	}{
		{"store", func(s *Store) retryafter.Limiter { return s }},
		{"leased-16", func(s *Store) retryafter.Limiter { return s.Leased(16) }},
		{"leased-64", func(s *Store) retryafter.Limiter { return s.Leased(64) }},
		{"leased-256", func(s *Store) retryafter.Limiter { return s.Leased(256) }},
	}
	run := func(b *testing.B, newClient func() redis.Scripter, stats func() []serverStats, limit rate.Limit, burst int, newLimiter func(*Store) retryafter.Limiter) {
		prefix := testPrefix(b)
		var ls []retryafter.Limiter
		for range 3 {
			ls = append(ls, newLimiter(New(newClient(), limit, burst, WithPrefix(prefix))))
		}
		fleetFlood(b, ls, func(int) string { return "hot" }, stats, limit, burst, 9000)
	}
	for _, where := range fleetTargets(b) {
		for _, load := range loads {
			for _, l := range limiters {
				b.Run(fmt.Sprintf("%s/%s/%s", where.name, load.name, l.name), func(b *testing.B) {
					run(b, where.newClient, where.stats, load.limit, load.burst, l.new)
				})
			}
		}
	}
}

// BenchmarkFleetHotShared floods, as BenchmarkFleetHotKey does, an All of a limit per client
// (1,000 clients in turn, 100/s with bursts of 100 each, which none reaches) and a Shared one for
// the whole fleet, "hot" (30,000/s, bursts of 1,000: all admitted) or "flood" (900/s, bursts of
// 90: about 90% refused). "stores" is both layers in Stores on one client, which Combine decides
// in one script over the two keys: on the cluster their prefixes carry one hash tag, which puts
// every key in one slot, on one master, as Combine needs. "leased-N" decides the shared layer by
// Store.Leased(N) and the per-client one by its Store, on prefixes without a tag: on the cluster
// the clients' keys spread over the masters. admitted and the bound are those of the shared limit.
//
//	REDIS_ADDR=127.0.0.1:6379 go test -run '^$' -bench FleetHotShared -benchtime 1x .
func BenchmarkFleetHotShared(b *testing.B) {
	loads := []struct {
		name  string
		limit rate.Limit
		burst int
	}{{"hot", 30000, 1000}, {"flood", 900, 90}}
	for _, where := range fleetTargets(b) {
		for _, load := range loads {
			for _, lot := range []int{0, 64, 256} {
				name := "stores"
				if lot > 0 {
					name = fmt.Sprint("leased-", lot)
				}
				b.Run(fmt.Sprintf("%s/%s/%s", where.name, load.name, name), func(b *testing.B) {
					prefix := testPrefix(b)
					tag := ""
					if where.cluster && lot == 0 {
						tag = "{" + prefix + "}"
					}
					var ls []retryafter.Limiter
					for range 3 {
						client := where.newClient()
						perClient := New(client, 100, 100, WithPrefix(tag+prefix+"client:"))
						shared := New(client, load.limit, load.burst, WithPrefix(tag+prefix+"all:"))
						var sl retryafter.Limiter = shared
						if lot > 0 {
							sl = shared.Leased(lot)
						}
						ls = append(ls, retryafter.All(perClient, retryafter.Shared(sl, "all")))
					}
					fleetFlood(b, ls, func(i int) string { return fmt.Sprint("client-", i%1000) }, where.stats, load.limit, load.burst, 9000)
				})
			}
		}
	}
}
