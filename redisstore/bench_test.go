package redisstore

import (
	"context"
	"testing"
	"time"

	"golang.org/x/time/rate"
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
// alone, EVALSHA with the same key and arguments and nothing around it, admitted and refused.
// The difference in allocs/op is the store's own work.
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
}
