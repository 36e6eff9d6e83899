package redisstore

import (
	"context"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/time/rate"

	"github.com/retryafter/retryafter"
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
	floods := []struct {
		name         string
		limit, burst int
	}{
		{"refused=90", 300, 30}, // a token every 10 requests
		{"refused=99", 10, 10},  // a token every 300, as the flood the issue measured
	}
	memories := []struct {
		name string
		opts []Option
	}{{"forget", []Option{WithRefusalMemory(0)}}, {"remember", nil}}
	for _, where := range fleetTargets(b) {
		for _, f := range floods {
			for _, m := range memories {
				b.Run(where.name+"/"+f.name+"/"+m.name, func(b *testing.B) {
					opts := append([]Option{WithPrefix(testPrefix(b))}, m.opts...)
					var ls []retryafter.Limiter
					for range 3 {
						ls = append(ls, New(where.newClient(), rate.Limit(f.limit), f.burst, opts...))
					}
					fleetFlood(b, ls, func(int) string { return "hot" }, where.stats, rate.Limit(f.limit), f.burst, 3000)
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

// fleetFlood sends offered requests/s in all for 2 s, from 4 goroutines for each of the 3
// replicas' limiters ls, evenly spread and in turn, request i of a goroutine on the key keyOf(i),
// and reports what BenchmarkFleetFlood and BenchmarkFleetHotKey describe; limit and burst are
// those of the limit that binds the fleet, for the bound.
func fleetFlood(b *testing.B, ls []retryafter.Limiter, keyOf func(int) string, stats func() []serverStats, limit rate.Limit, burst, offered int) {
	const (
		flood   = 2 * time.Second
		workers = 12 // 4 per replica
	)
	ctx := context.Background()
	var admitted, refused, failed atomic.Int64
	var wg sync.WaitGroup
	before := stats()
	start := time.Now()
	period := time.Second * workers / time.Duration(offered)
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
	b.ReportMetric((calls-float64(admitted.Load()))/float64(refused.Load()), "calls/refused")
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
