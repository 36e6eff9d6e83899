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
