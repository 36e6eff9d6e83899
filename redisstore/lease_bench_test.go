package redisstore

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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
		hotFlood(b, ls, func(int) string { return "hot" }, stats, limit, burst)
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

// A fleetTarget is a Redis for the fleet benchmarks: how to make a replica's client of it, and
// how to read what its servers have counted, summed over the masters of a cluster.
type fleetTarget struct {
	name      string
	cluster   bool
	newClient func() redis.Scripter
	stats     func() []serverStats // one per master, in the same order every call
}

// fleetTargets returns the redis-server at REDIS_ADDR and the Redis Cluster at
// REDIS_CLUSTER_ADDRS (or ones the tests start).
func fleetTargets(b *testing.B) []fleetTarget {
	addr := sharedAddr(b)
	admin := newClient(b, addr)
	addrs := clusterAddrs(b)
	cadmin := newClusterClient(b, addrs)
	clusterStats := func() []serverStats {
		var mu sync.Mutex
		byAddr := map[string]serverStats{}
		err := cadmin.ForEachMaster(context.Background(), func(ctx context.Context, c *redis.Client) error {
			s := statsOf(b, c)
			mu.Lock()
			byAddr[c.Options().Addr] = s
			mu.Unlock()
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
		var all []serverStats
		for _, a := range slices.Sorted(maps.Keys(byAddr)) {
			all = append(all, byAddr[a])
		}
		return all
	}
	return []fleetTarget{
		{"server", false, func() redis.Scripter { return newClient(b, addr) }, func() []serverStats { return []serverStats{statsOf(b, admin)} }},
		{"cluster", true, func() redis.Scripter { return newClusterClient(b, addrs) }, clusterStats},
	}
}

// hotFlood sends 9,000 requests/s in all for 2 s, from 4 goroutines for each of the 3 replicas'
// limiters ls, evenly spread and in turn, request i of a goroutine on the key keyOf(i), and
// reports what BenchmarkFleetHotKey describes; limit and burst are those of the limit that binds
// the fleet, for the bound.
func hotFlood(b *testing.B, ls []retryafter.Limiter, keyOf func(int) string, stats func() []serverStats, limit rate.Limit, burst int) {
	const (
		offered = 9000 // requests/s, all replicas
		flood   = 2 * time.Second
		workers = 12 // 4 per replica
	)
	ctx := context.Background()
	var admitted, refused, failed atomic.Int64
	var wg sync.WaitGroup
	before := stats()
	start := time.Now()
	period := time.Second * workers / offered
	for r, l := range ls {
		for g := range workers / len(ls) {
			wg.Go(func() {
				time.Sleep(period * time.Duration(r+len(ls)*g) / workers) // arrivals spread evenly, replicas in turn
				tick := time.NewTicker(period)
				defer tick.Stop()
				for i := g; time.Since(start) < flood; i += workers / len(ls) {
					<-tick.C
					d, err := l.Decide(ctx, keyOf(i), 1, time.Now())
					switch {
					case err != nil:
						failed.Add(1) // a timeout of a loaded host: counted, not decided
					case d.Allowed:
						admitted.Add(1)
					default:
						refused.Add(1)
					}
				}
			})
		}
	}
	wg.Wait()
	elapsed := time.Since(start)
	after := stats()
	n := float64(admitted.Load() + refused.Load())
	var calls, usec, cpu, busiest float64
	for i := range after {
		calls += float64(after[i].calls - before[i].calls)
		usec += float64(after[i].usec - before[i].usec)
		c := (after[i].cpu - before[i].cpu) * 1e6 / n
		cpu += c
		busiest = max(busiest, c)
	}
	b.ReportMetric(calls/n, "calls/req")
	b.ReportMetric(usec/n, "script-µs/req")
	b.ReportMetric(cpu, "redis-cpu-µs/req")
	b.ReportMetric(1e6/cpu, "decisions/core-s")
	b.ReportMetric(1e6/busiest, "ceiling-decisions/s")
	b.ReportMetric(float64(refused.Load())/n, "refused/req")
	bound := int64(burst) + int64(float64(limit)*elapsed.Seconds()+0.5)
	b.ReportMetric(float64(admitted.Load()-bound), "over-bound")
	b.ReportMetric(float64(failed.Load()), "failed")
	b.Logf("%v: %d admitted, %d refused, %d failed, %.0f script calls; bound %d", elapsed.Round(time.Millisecond), admitted.Load(), refused.Load(), failed.Load(), calls, bound)
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
					hotFlood(b, ls, func(i int) string { return fmt.Sprint("client-", i%1000) }, where.stats, load.limit, load.burst)
				})
			}
		}
	}
}
