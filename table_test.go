package retryafter

import (
	"context"
	"strconv"
	"testing"
	"time"

	"golang.org/x/time/rate"
)

// benchmarkNewKeys measures a new key per request on a table of held keys whose buckets refill
// one at a time, every step, as a flood leaves them; atBound sizes the table so that each new key
// must make room.
func benchmarkNewKeys(b *testing.B, atBound bool) {
	const held = 1 << 18
	const step = time.Microsecond
	every := held * step // each held key's bucket refills this long after it spent
	tb := NewTokenBucket(rate.Every(every), 1, boundFor(held, atBound))
	ctx := context.Background()
	now := t0
	for i := range held {
		tb.Decide(ctx, "held-"+strconv.Itoa(i), 1, now)
		now = now.Add(step)
	}
	keys := make([]string, b.N)
	for i := range keys {
		keys[i] = "new-" + strconv.Itoa(i)
	}
	b.ReportAllocs()
	b.ResetTimer()
	refused := 0
	for i := range b.N {
		now = now.Add(step)
		if d, _ := tb.Decide(ctx, keys[i], 1, now); !d.Allowed {
			refused++
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(refused)/float64(b.N), "refused/op")
}

func BenchmarkNewKey(b *testing.B) {
	b.Run("far", func(b *testing.B) { benchmarkNewKeys(b, false) })
	b.Run("bound", func(b *testing.B) { benchmarkNewKeys(b, true) })
}

func boundFor(held int, atBound bool) TokenBucketOption {
	if atBound {
		return WithMaxMemory(held * cost("held-100000"))
	}
	return WithMaxMemory(1 << 32)
}
