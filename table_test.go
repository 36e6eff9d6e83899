package retryafter

import (
	"context"
	"hash/maphash"
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

// TestLastKeyForgottenWhenDropped drops a key that its part remembers, and hands its bucket to a
// new key of the same part: the dropped key must not reach that bucket through the part's memory.
func TestLastKeyForgottenWhenDropped(t *testing.T) {
	b := NewTokenBucket(1, 5, WithMaxMemory(shardCount*2*cost("key-00000")))
	inPart := func(key string) int { return int(maphash.String(b.seed, key) % shardCount) }
	a := "key-00000"
	var x, n string
	for i := 1; n == ""; i++ {
		k := "key-" + strconv.Itoa(10000+i)
		if inPart(k) != inPart(a) {
			continue
		}
		if x == "" {
			x = k
		} else {
			n = k
		}
	}
	ctx := context.Background()
	b.Decide(ctx, a, 1, t0)
	b.Decide(ctx, a, 1, t0) // twice in a row: the part remembers a
	b.Decide(ctx, x, 5, t0.Add(2*time.Second))
	// At 10 s, a is full again and x is not: n takes a's place, and its bucket, and spends one.
	if d, _ := b.Decide(ctx, n, 1, t0.Add(3*time.Second)); !d.Allowed {
		t.Fatalf("the new key was refused: %+v", d)
	}
	// a is new again; the part is full of keys that are not: a is refused, not admitted from n's
	// bucket.
	if d, _ := b.Decide(ctx, a, 1, t0.Add(3*time.Second)); d.Allowed {
		t.Fatalf("the dropped key was admitted from the bucket handed to another: %+v", d)
	}
}
