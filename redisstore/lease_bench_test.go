package redisstore

import (
	"context"
	"fmt"
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
// start): "hot", a limit of 30,000/s with bursts of 1,000, so that every request is admitted, and
// "flood", 900/s with bursts of 90, so that about 90% are refused. "store" decides by the Store
// itself (one script call a request, but for the refusals it remembers), "leased-N" by
// Store.Leased(N). It reports, from the servers' own counts (INFO commandstats, INFO cpu, summed
// over the masters of a cluster), script calls per request, the scripts' µs and Redis's CPU µs
// per request, the decisions per second that one Redis core would take at that CPU per request
// (1e6 / redis-cpu-µs/req), the refused share, and the admitted over the bound, burst + limit ×
// the flood's length, which must be 0 or less.
//
//	REDIS_ADDR=127.0.0.1:6379 go test -run '^$' -bench FleetHotKey -benchtime 1x .
func BenchmarkFleetHotKey(b *testing.B) {
	const (
		offered = 9000 // requests/s, all replicas
		flood   = 2 * time.Second
		workers = 12 // 4 per replica
	)
	loads := []struct {
		name  string
		limit rate.Limit
		burst int
	}{{"hot", 30000, 1000}, {"flood", 900, 90}}
	limiters := []struct {
		name string
		new  func(s *Store) retryafter.Limiter
	}{
		{"store", func(s *Store) retryafter.Limiter { return s }},
		{"leased-16", func(s *Store) retryafter.Limiter { return s.Leased(16) }},
		{"leased-64", func(s *Store) retryafter.Limiter { return s.Leased(64) }},
		{"leased-256", func(s *Store) retryafter.Limiter { return s.Leased(256) }},
	}
	run := func(b *testing.B, newClient func() redis.Scripter, stats func() serverStats, limit rate.Limit, burst int, newLimiter func(*Store) retryafter.Limiter) {
		prefix := testPrefix(b)
		var ls []retryafter.Limiter
		for range 3 {
			ls = append(ls, newLimiter(New(newClient(), limit, burst, WithPrefix(prefix))))
		}
		ctx := context.Background()
		var admitted, refused, failed atomic.Int64
		var wg sync.WaitGroup
		before := stats()
		start := time.Now()
		period := time.Second * workers / offered
		for r, l := range ls {
			for g := range workers / 3 {
				wg.Go(func() {
					time.Sleep(period * time.Duration(r+3*g) / workers) // arrivals spread evenly, replicas in turn
					tick := time.NewTicker(period)
					defer tick.Stop()
					for time.Since(start) < flood {
						<-tick.C
						d, err := l.Decide(ctx, "hot", 1, time.Now())
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
		calls := float64(after.calls - before.calls)
		cpu := (after.cpu - before.cpu) * 1e6 / n
		b.ReportMetric(calls/n, "calls/req")
		b.ReportMetric(float64(after.usec-before.usec)/n, "script-µs/req")
		b.ReportMetric(cpu, "redis-cpu-µs/req")
		b.ReportMetric(1e6/cpu, "decisions/core-s")
		b.ReportMetric(float64(refused.Load())/n, "refused/req")
		bound := int64(burst) + int64(float64(limit)*elapsed.Seconds()+0.5)
		b.ReportMetric(float64(admitted.Load()-bound), "over-bound")
		b.ReportMetric(float64(failed.Load()), "failed")
		b.Logf("%v: %d admitted, %d refused, %d failed, %.0f script calls; bound %d", elapsed.Round(time.Millisecond), admitted.Load(), refused.Load(), failed.Load(), calls, bound)
	}
	addr := sharedAddr(b)
	admin := newClient(b, addr)
	server := func() redis.Scripter { return newClient(b, addr) }
	oneServer := func() serverStats { return statsOf(b, admin) }

	addrs := clusterAddrs(b)
	cadmin := newClusterClient(b, addrs)
	cluster := func() redis.Scripter { return newClusterClient(b, addrs) }
	clusterStats := func() serverStats {
		var mu sync.Mutex
		var sum serverStats
		err := cadmin.ForEachMaster(context.Background(), func(ctx context.Context, c *redis.Client) error {
			s := statsOf(b, c)
			mu.Lock()
			sum.calls, sum.usec, sum.cpu = sum.calls+s.calls, sum.usec+s.usec, sum.cpu+s.cpu
			mu.Unlock()
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
		return sum
	}
	for _, where := range []struct {
		name      string
		newClient func() redis.Scripter
		stats     func() serverStats
	}{{"server", server, oneServer}, {"cluster", cluster, clusterStats}} {
		for _, load := range loads {
			for _, l := range limiters {
				b.Run(fmt.Sprintf("%s/%s/%s", where.name, load.name, l.name), func(b *testing.B) {
					run(b, where.newClient, where.stats, load.limit, load.burst, l.new)
				})
			}
		}
	}
}
