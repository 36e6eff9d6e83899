// Package fleetbench is the fleet benchmark of admitted requests that redisstore and rueidisstore
// both run: replicas of a service, each with its Store and client, deciding requests that are all
// admitted, at a given concurrency, with what Redis paid for them read from the servers' own
// counts.
package fleetbench

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
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
	"github.com/retryafter/retryafter/internal/testkit/redistest"
)

// Replicas, Keys and Decisions are the fleet's shape: 3 replicas, 10,000 keys, and 9,600 decisions
// in all at every concurrency (a round of each replica's callers deciding in turn).
const (
	Replicas  = 3
	Keys      = 10_000
	Decisions = 9_600
)

// Concurrencies are the requests each replica decides at once.
var Concurrencies = []int{1, 8, 64}

// Limit and Burst admit every request of the fleet: a key gets about one request a round.
const (
	Limit rate.Limit = 1000
	Burst int        = 1000
)

// A Target is a Redis of the benchmark: the addresses of a server, or of a cluster's nodes.
type Target struct {
	Name    string
	Addrs   []string
	Cluster bool
}

// Targets returns the redis-server and the Redis Cluster the tests share (REDIS_ADDR and
// REDIS_CLUSTER_ADDRS, or ones the test binary starts, see redistest).
func Targets(tb testing.TB) []Target {
	return []Target{
		{"server", []string{redistest.Addr(tb)}, false},
		{"cluster", redistest.ClusterAddrs(tb), true},
	}
}

// Stats is what a server has counted: script calls (EVALSHA and EVAL), reads of a client's
// connection (each a round trip, or part of one), and its CPU time, user and system, in seconds.
type Stats struct {
	Calls, Usec, Reads int64
	CPU                float64
}

// Counter reads the counts of t's servers, summed over the masters of a cluster.
func Counter(tb testing.TB, t Target) func() Stats {
	ctx := context.Background()
	if !t.Cluster {
		c := redis.NewClient(&redis.Options{Addr: t.Addrs[0]})
		tb.Cleanup(func() { c.Close() })
		return func() Stats { return read(tb, c) }
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: t.Addrs})
	tb.Cleanup(func() { cc.Close() })
	return func() Stats {
		var mu sync.Mutex
		byAddr := map[string]Stats{}
		err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			s := read(tb, c)
			mu.Lock()
			byAddr[c.Options().Addr] = s
			mu.Unlock()
			return nil
		})
		if err != nil {
			tb.Fatal(err)
		}
		var sum Stats
		for _, a := range slices.Sorted(maps.Keys(byAddr)) {
			s := byAddr[a]
			sum.Calls += s.Calls
			sum.Usec += s.Usec
			sum.Reads += s.Reads
			sum.CPU += s.CPU
		}
		return sum
	}
}

// read reads c's server's INFO commandstats, stats and cpu.
func read(tb testing.TB, c *redis.Client) Stats {
	info, err := c.Info(context.Background(), "commandstats", "stats", "cpu").Result()
	if err != nil {
		tb.Fatal(err)
	}
	var s Stats
	for line := range strings.Lines(info) {
		line = strings.TrimSpace(line)
		k, v, _ := strings.Cut(line, ":")
		switch k {
		case "cmdstat_evalsha", "cmdstat_eval":
			for f := range strings.SplitSeq(v, ",") {
				k, n, _ := strings.Cut(f, "=")
				c, _ := strconv.ParseInt(n, 10, 64)
				switch k {
				case "calls":
					s.Calls += c
				case "usec":
					s.Usec += c
				}
			}
		case "total_reads_processed":
			s.Reads, _ = strconv.ParseInt(v, 10, 64)
		case "used_cpu_sys", "used_cpu_user":
			f, _ := strconv.ParseFloat(v, 64)
			s.CPU += f
		}
	}
	return s
}

// Run decides Decisions requests of cost 1 from the replicas' limiters ls, concurrency callers
// each deciding one request after another on keys drawn at random from Keys, b.N times, and
// reports what the servers counted per decision (stats): script calls ("calls/req") and reads
// of a connection, its round trips ("reads/req"), the scripts' own time ("script-µs/req"),
// Redis's CPU in µs ("redis-cpu-µs/req") and the decisions one Redis core takes at that cost
// ("decisions/core-s"), with the latency of a decision as the replicas saw it ("p50-µs",
// "p99-µs"), the requests refused, which must be none, and those that failed (a timeout).
func Run(b *testing.B, ls []retryafter.Limiter, concurrency int, stats func() Stats) {
	prefix := fmt.Sprintf("fleet:%d:", time.Now().UnixNano())
	per := Decisions / (len(ls) * concurrency)
	var (
		mu              sync.Mutex
		lat             []time.Duration
		refused, failed int
		firstErr        error
	)
	warm(b, ls, concurrency, prefix)
	before := stats()
	b.ResetTimer()
	for round := range b.N {
		var wg sync.WaitGroup
		start := make(chan struct{})
		for r, l := range ls {
			for g := range concurrency {
				wg.Go(func() {
					rnd := rand.New(rand.NewPCG(uint64(round), uint64(r*concurrency+g)))
					mine := make([]time.Duration, 0, per)
					var no, errs int
					<-start
					for range per {
						key := prefix + strconv.Itoa(rnd.IntN(Keys))
						t := time.Now()
						d, err := l.Decide(context.Background(), key, 1, t)
						mine = append(mine, time.Since(t))
						switch {
						case err != nil:
							errs++ // a timeout of a loaded host: counted, not decided
							if errs == 1 {
								mu.Lock()
								firstErr = cmp.Or(firstErr, err)
								mu.Unlock()
							}
						case !d.Allowed:
							no++
						}
					}
					mu.Lock()
					lat = append(lat, mine...)
					refused += no
					failed += errs
					mu.Unlock()
				})
			}
		}
		close(start)
		wg.Wait()
	}
	b.StopTimer()
	if firstErr != nil {
		b.Logf("%d failed, the first with %v", failed, firstErr)
	}
	after := stats()
	n := float64(len(lat))
	cpu := (after.CPU - before.CPU) * 1e6 / n
	slices.Sort(lat)
	b.ReportMetric(float64(after.Calls-before.Calls)/n, "calls/req")
	b.ReportMetric(float64(after.Reads-before.Reads)/n, "reads/req")
	b.ReportMetric(float64(after.Usec-before.Usec)/n, "script-µs/req")
	b.ReportMetric(cpu, "redis-cpu-µs/req")
	b.ReportMetric(1e6/cpu, "decisions/core-s")
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
	b.ReportMetric(float64(refused), "refused")
	b.ReportMetric(float64(failed), "failed")
	b.ReportMetric(0, "ns/op")
}

// warm has each of ls decide concurrency requests at once, until none fails, so that the clients
// have their connections and a cluster's slot map, and the servers the script, before the counting
// starts: a cold client of a cluster on a loaded host may take longer than the store's timeout to
// load its slot map, and three such failures take a store's Redis for down for a probe interval.
func warm(b *testing.B, ls []retryafter.Limiter, concurrency int, prefix string) {
	for try := 0; ; try++ {
		var wg sync.WaitGroup
		var failed atomic.Bool
		for _, l := range ls {
			for range concurrency {
				wg.Go(func() {
					if _, err := l.Decide(context.Background(), prefix+"warm", 0, time.Now()); err != nil {
						failed.Store(true)
					}
				})
			}
		}
		wg.Wait()
		if !failed.Load() {
			return
		}
		if try == 10 {
			b.Fatal("the fleet could not decide a request of each caller without failing")
		}
		time.Sleep(time.Second) // past the probe interval of a store that took Redis for down
	}
}
