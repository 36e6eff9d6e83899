package redisstore

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/time/rate"

	"github.com/retryafter/retryafter"
)

// BenchmarkStoreDecide measures one decision against the Redis at REDIS_ADDR: a round trip on
// loopback, one EVALSHA. "admit" never runs out of tokens, "refuse" always has, and "parallel"
// admits from GOMAXPROCS goroutines over 64 keys.
func BenchmarkStoreDecide(b *testing.B) {
	client := newClient(b, sharedAddr(b))
	ctx := context.Background()
	now := time.Now()
	run := func(b *testing.B, s *Store, want bool) {
		b.ReportAllocs()
		for b.Loop() {
			d, err := s.Decide(ctx, "k", 1, now)
			if err != nil || d.Allowed != want {
				b.Fatalf("Decide: %+v, %v", d, err)
			}
		}
	}
	b.Run("admit", func(b *testing.B) {
		run(b, New(client, 1e8, 1e6, WithPrefix(testPrefix(b)), WithTimeout(testTimeout)), true)
	})
	b.Run("refuse", func(b *testing.B) {
		s := New(client, rate.Every(time.Hour), 1, WithPrefix(testPrefix(b)), WithTimeout(testTimeout))
		s.Decide(ctx, "k", 1, now)
		run(b, s, false)
	})
	b.Run("parallel", func(b *testing.B) {
		s := New(client, 1e8, 1e6, WithPrefix(testPrefix(b)), WithTimeout(testTimeout))
		keys := make([]string, 64)
		for i := range keys {
			keys[i] = string(rune('a'+i%26)) + string(rune('a'+i/26))
		}
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				i++
				if _, err := s.Decide(ctx, keys[i%len(keys)], 1, now); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

// BenchmarkBareEvalSha is the floor of BenchmarkStoreDecide: the same script called by go-redis
// alone, EVALSHA with the same key and arguments and nothing around it, admitted and refused;
// and of BenchmarkAll/two, the script of several layers over two keys. The difference in
// allocs/op is the store's own work.
func BenchmarkBareEvalSha(b *testing.B) {
	client := newClient(b, sharedAddr(b))
	ctx := context.Background()
	if err := decideScript.Load(ctx, client).Err(); err != nil {
		b.Fatal(err)
	}
	run := func(b *testing.B, interval int64, burst int, want int64) {
		keys := []string{testPrefix(b) + "k"}
		client.EvalSha(ctx, decideScript.Hash(), keys, interval, burst, 1)
		b.ReportAllocs()
		for b.Loop() {
			res, err := client.EvalSha(ctx, decideScript.Hash(), keys, interval, burst, 1).Int64Slice()
			if err != nil || res[0] != want {
				b.Fatal(res, err)
			}
		}
	}
	b.Run("admit", func(b *testing.B) { run(b, 10, 1e6, 1) })
	b.Run("refuse", func(b *testing.B) { run(b, int64(time.Hour), 1, 0) })
	// The floor of BenchmarkAll/two: the script of several layers over two keys, admitted.
	b.Run("all/two", func(b *testing.B) {
		if err := allScript.Load(ctx, client).Err(); err != nil {
			b.Fatal(err)
		}
		p := testPrefix(b)
		keys := []string{p + "a:k", p + "b:all"}
		b.ReportAllocs()
		for b.Loop() {
			res, err := client.EvalSha(ctx, allScript.Hash(), keys, "", 10, 1e6, 1, 0, "", "", 0, 0, 10, 1e6, 1, 0, "", "", 0, 0).Int64Slice()
			if err != nil || res[0] != 1 || res[4] != 1 {
				b.Fatal(res, err)
			}
		}
	})
}

// BenchmarkAll measures an All of Stores on the Redis at REDIS_ADDR, all admitted: "one" a single
// layer, "two" a limit per key and one shared by every key, "three" with a layer charged
// afterwards (decided at cost 0, not charged here), each one script over their keys; and "two,
// store after store" the two layers on two clients of the same server, which do not combine.
// "two refused" is refused by the shared layer. evalsha/op is the server's count of script
// calls (INFO commandstats) per decision: its round trips.
func BenchmarkAll(b *testing.B) {
	addr := sharedAddr(b)
	client := newClient(b, addr)
	other := newClient(b, addr)
	ctx := context.Background()
	now := time.Now()
	store := func(c *redis.Client, name string, limit rate.Limit, burst int) *Store {
		return New(c, limit, burst, WithPrefix(testPrefix(b)+name), WithTimeout(testTimeout))
	}
	for _, bc := range []struct {
		name string
		l    func() retryafter.Limiter
		want bool
	}{
		{"one", func() retryafter.Limiter { return retryafter.All(store(client, "a", 1e8, 1e6)) }, true},
		{"two", func() retryafter.Limiter {
			return retryafter.All(store(client, "a", 1e8, 1e6), retryafter.Shared(store(client, "b", 1e8, 1e6), "all"))
		}, true},
		{"three", func() retryafter.Limiter {
			return retryafter.All(store(client, "a", 1e8, 1e6), retryafter.Shared(store(client, "b", 1e8, 1e6), "all"),
				retryafter.ChargedAfter(store(client, "c", 1e8, 1e6)))
		}, true},
		{"two, store after store", func() retryafter.Limiter {
			return retryafter.All(store(client, "a", 1e8, 1e6), retryafter.Shared(store(other, "b", 1e8, 1e6), "all"))
		}, true},
		{"two refused", func() retryafter.Limiter {
			shared := store(client, "b", rate.Every(time.Hour), 1)
			shared.Decide(ctx, "all", 1, now)
			return retryafter.All(store(client, "a", 1e8, 1e6), retryafter.Shared(shared, "all"))
		}, false},
	} {
		b.Run(bc.name, func(b *testing.B) {
			l := bc.l()
			l.Decide(ctx, "k", 0, now) // loads the script
			calls := evalshaCalls(b, client)
			b.ReportAllocs()
			for b.Loop() {
				d, err := l.Decide(ctx, "k", 1, now)
				if err != nil || d.Allowed != bc.want {
					b.Fatalf("Decide: %+v, %v", d, err)
				}
			}
			b.ReportMetric(float64(evalshaCalls(b, client)-calls)/float64(b.N), "evalsha/op")
		})
	}
}

// evalshaCalls returns how many EVALSHA the Redis of client has run.
func evalshaCalls(b *testing.B, client *redis.Client) int64 {
	info, err := client.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	for line := range strings.Lines(info) {
		if rest, ok := strings.CutPrefix(line, "cmdstat_evalsha:calls="); ok {
			n, err := strconv.ParseInt(rest[:strings.IndexByte(rest, ',')], 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return n
		}
	}
	return 0
}

// BenchmarkChargedAfter measures, on the Redis at REDIS_ADDR, a request through an All of a
// per-key limit and a layer charged afterwards, as the middleware makes it: the decision, then
// the charge of what the request used. "sent" charges at once, a round trip of its own; "held"
// holds the charge back (WithDeferredCharges) for the key's next decision to carry. calls/op is
// the server's count of script calls per request, script-µs/op their time in Redis (INFO
// commandstats), and redis-cpu-µs/op Redis's CPU per request (INFO cpu).
func BenchmarkChargedAfter(b *testing.B) {
	addr := sharedAddr(b)
	client := newClient(b, addr)
	ctx := context.Background()
	for _, bc := range []struct {
		name string
		opts []Option
	}{{"sent", nil}, {"held", []Option{WithDeferredCharges(time.Second)}}} {
		b.Run(bc.name, func(b *testing.B) {
			prefix := testPrefix(b)
			perKey := New(client, 1e8, 1e6, WithPrefix(prefix+"req:"), WithTimeout(testTimeout))
			tokens := New(client, 1e8, 1e6, append([]Option{WithPrefix(prefix + "tok:"), WithTimeout(testTimeout)}, bc.opts...)...)
			l := retryafter.All(perKey, retryafter.ChargedAfter(tokens))
			l.Decide(ctx, "k", 0, time.Now()) // loads the script
			tokens.Charge(ctx, "k", 1, time.Now())
			before := statsOf(b, client)
			for b.Loop() {
				now := time.Now()
				if d, err := l.Decide(ctx, "k", 1, now); err != nil || !d.Allowed {
					b.Fatalf("Decide: %+v, %v", d, err)
				}
				if err := tokens.Charge(ctx, "k", 7, now); err != nil {
					b.Fatal(err)
				}
			}
			tokens.Flush(ctx)
			after := statsOf(b, client)
			n := float64(b.N)
			b.ReportMetric(float64(after.calls-before.calls)/n, "calls/op")
			b.ReportMetric(float64(after.usec-before.usec)/n, "script-µs/op")
			b.ReportMetric((after.cpu-before.cpu)*1e6/n, "redis-cpu-µs/op")
		})
	}
}
