package retryafter

import (
	"fmt"
	"hash/maphash"
	"testing"
	"time"

	"golang.org/x/time/rate"
)

// keysInPart returns n distinct keys of length size, starting with prefix, that b's table keeps
// in part i: the tests of the table's byte arithmetic fill one part with keys of known cost.
func keysInPart(b *TokenBucket, i, n, size int, prefix string) []string {
	var keys []string
	for j := 0; len(keys) < n; j++ {
		k := fmt.Sprintf("%s%0*d", prefix, size-len(prefix), j)
		if maphash.String(b.seed, k)%shardCount == uint64(i) {
			keys = append(keys, k)
		}
	}
	return keys
}

// decideOrPanic is decide, reporting a panic of the table as a failure.
func decideOrPanic(t *testing.T, b *TokenBucket, key string, cost int, now time.Time) (d Decision) {
	t.Helper()
	defer func() {
		if v := recover(); v != nil {
			t.Fatalf("Decide(%q, %d) panicked: %v", key, cost, v)
		}
	}()
	return decide(t, b, key, cost, now)
}

// TestTableSpareBucketsGiveWay checks that the buckets a part keeps from dropped keys, only to
// spare new keys an allocation, never cost a new key its room: when the last key held is
// dropped, or no held key has refilled, the spares go first. (The part once indexed its empty
// heap when the bytes of a kept spare and a new key did not fit together, and panicked with its
// lock held.)
func TestTableSpareBucketsGiveWay(t *testing.T) {
	// 16 KiB: 256 bytes a part, one key of up to 80 bytes; a spare bucket counts 80.
	b := NewTokenBucket(rate.Every(time.Hour), 1, WithMaxMemory(16<<10))
	ks := keysInPart(b, 0, 2, 10, "a")
	decideOrPanic(t, b, ks[0], 0, t0) // held, and full: it makes room when asked
	if d := decideOrPanic(t, b, ks[1], 1, t0); !d.Allowed {
		t.Fatalf("a new key, after the only key held had refilled: %+v", d)
	}

	// 32 KiB: 512 bytes a part. A held key that has not refilled and the spare of a dropped one
	// leave 216 bytes; a new key of 236 fits once the spare goes, and is admitted.
	b = NewTokenBucket(rate.Every(time.Hour), 1, WithMaxMemory(32<<10))
	ks = keysInPart(b, 0, 2, 40, "b")
	decideOrPanic(t, b, ks[0], 0, t0) // full
	decideOrPanic(t, b, ks[1], 1, t0) // spent for an hour
	if d := decideOrPanic(t, b, keysInPart(b, 0, 1, 60, "c")[0], 1, t0); !d.Allowed {
		t.Fatalf("a new key that fits beside the key still spent: %+v", d)
	}
	if p := &b.parts[0]; p.used > b.budget || len(p.keys) != 2 {
		t.Fatalf("part holds %d keys in %d bytes, budget %d", len(p.keys), p.used, b.budget)
	}
}
