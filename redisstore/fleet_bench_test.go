package redisstore

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/time/rate"
)

// BenchmarkFleetFlood floods one key from 3 replicas (3 Stores, each on a client of its own) at
// 3,000 requests/s in all for 2 s, against a limit of 300/s with bursts of 30, so that about 90%
// are refused ("refused=90"), and of 10/s with bursts of 10, 99.5% ("refused=99"), on the real
// redis-server at REDIS_ADDR and on a Redis Cluster
// (REDIS_CLUSTER_ADDRS, or one the tests start); "remember" with the default refusal memory,
// "forget" with WithRefusalMemory(0), as every refusal cost before it. It reports, from the
// servers' own counts (INFO commandstats, INFO cpu, summed over the masters of a cluster): script
// calls per request and per refused request beyond the admitted ones ("calls/refused", (calls −
// admitted) / refused), Redis's CPU per request in µs (the scripts' own time and the process's,
// user and system) and the decisions per second one Redis core would take at that cost
// ("decisions/core-s"), the refused share, and the admitted over the bound, burst + limit × the
// flood's length by Redis's clock, which must be 0 or less.
//
//	REDIS_ADDR=127.0.0.1:6379 go test -run '^$' -bench FleetFlood -benchtime 1x .
func BenchmarkFleetFlood(b *testing.B) {
	const (
		offered = 3000 // requests/s, all replicas
		flood   = 2 * time.Second
	)
	floods := []struct {
		name         string
		limit, burst int
	}{
		{"refused=90", 300, 30}, // a token every 10 requests
		{"refused=99", 10, 10},  // a token every 300, as the flood the issue measured
	}
	run := func(b *testing.B, limit, burst int, newClient func() redis.Scripter, stats func() serverStats, opts ...Option) {
		prefix := testPrefix(b)
		var stores []*Store
		for range 3 {
			stores = append(stores, New(newClient(), rate.Limit(limit), burst, append([]Option{WithPrefix(prefix)}, opts...)...))
		}
		ctx := context.Background()
		var admitted, refused, failed atomic.Int64
		var wg sync.WaitGroup
		before := stats()
		start := time.Now()
		period := time.Second * 12 / offered // each of 12 goroutines, 4 per replica
		for r, s := range stores {
			for g := range 4 {
				wg.Go(func() {
					time.Sleep(period * time.Duration(r+3*g) / 12) // arrivals spread evenly, replicas in turn
					tick := time.NewTicker(period)
					defer tick.Stop()
					for time.Since(start) < flood {
						<-tick.C
						d, err := s.Decide(ctx, "hot", 1, time.Now())
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
		b.ReportMetric(calls/n, "calls/req")
		b.ReportMetric((calls-float64(admitted.Load()))/float64(refused.Load()), "calls/refused")
		b.ReportMetric(float64(after.usec-before.usec)/n, "script-µs/req")
		b.ReportMetric((after.cpu-before.cpu)*1e6/n, "redis-cpu-µs/req")
		b.ReportMetric(n/(after.cpu-before.cpu), "decisions/core-s")
		b.ReportMetric(float64(refused.Load())/n, "refused/req")
		bound := int64(burst) + int64(float64(limit)*elapsed.Seconds()+0.5)
		b.ReportMetric(float64(admitted.Load()-bound), "over-bound")
		b.ReportMetric(float64(failed.Load()), "failed")
		b.Logf("%v: %d admitted, %d refused, %d failed, %.0f script calls; bound %d", elapsed.Round(time.Millisecond), admitted.Load(), refused.Load(), failed.Load(), calls, bound)
	}
	addr := sharedAddr(b)
	server := func() redis.Scripter {
		c := newClient(b, addr)
		return c
	}
	admin := newClient(b, addr)
	oneServer := func() serverStats { return statsOf(b, admin) }
	each := func(b *testing.B, newClient func() redis.Scripter, stats func() serverStats) {
		for _, f := range floods {
			b.Run(f.name+"/forget", func(b *testing.B) { run(b, f.limit, f.burst, newClient, stats, WithRefusalMemory(0)) })
			b.Run(f.name+"/remember", func(b *testing.B) { run(b, f.limit, f.burst, newClient, stats) })
		}
	}
	b.Run("server", func(b *testing.B) { each(b, server, oneServer) })

	addrs := clusterAddrs(b)
	cluster := func() redis.Scripter { return newClusterClient(b, addrs) }
	cadmin := newClusterClient(b, addrs)
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
	b.Run("cluster", func(b *testing.B) { each(b, cluster, clusterStats) })
}

// serverStats is what a server has counted: script calls (EVALSHA and EVAL), their time in µs,
// and its CPU time, user and system, in seconds.
type serverStats struct {
	calls, usec int64
	cpu         float64
}

// statsOf reads c's server's INFO commandstats and INFO cpu.
func statsOf(tb testing.TB, c *redis.Client) serverStats {
	tb.Helper()
	info, err := c.Info(context.Background(), "commandstats", "cpu").Result()
	if err != nil {
		tb.Fatal(err)
	}
	var s serverStats
	for line := range strings.Lines(info) {
		line = strings.TrimSpace(line)
		if rest, ok := strings.CutPrefix(line, "cmdstat_evalsha:"); ok {
			s.addCmd(rest)
		} else if rest, ok := strings.CutPrefix(line, "cmdstat_eval:"); ok {
			s.addCmd(rest)
		} else if v, ok := strings.CutPrefix(line, "used_cpu_sys:"); ok {
			f, _ := strconv.ParseFloat(v, 64)
			s.cpu += f
		} else if v, ok := strings.CutPrefix(line, "used_cpu_user:"); ok {
			f, _ := strconv.ParseFloat(v, 64)
			s.cpu += f
		}
	}
	return s
}

// addCmd adds the calls and usec of one line of INFO commandstats ("calls=3,usec=40,...").
func (s *serverStats) addCmd(fields string) {
	for f := range strings.SplitSeq(fields, ",") {
		k, v, _ := strings.Cut(f, "=")
		n, _ := strconv.ParseInt(v, 10, 64)
		switch k {
		case "calls":
			s.calls += n
		case "usec":
			s.usec += n
		}
	}
}
