package retryafter

import (
	"context"
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"slices"
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

// checkPart fails t unless p counts exactly its keys and its spare buckets, within b's budget.
func checkPart(t *testing.T, b *TokenBucket, p *part) {
	t.Helper()
	want := bucketBytes * len(p.free)
	for k := range p.keys {
		want += cost(k)
	}
	if p.used != want || p.used > b.budget {
		t.Fatalf("part counts %d bytes for %d keys and %d spares, which take %d; budget %d", p.used, len(p.keys), len(p.free), want, b.budget)
	}
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
	if p := &b.parts[0]; len(p.keys) != 2 {
		t.Fatalf("part holds %d keys, want 2", len(p.keys))
	}
	checkPart(t, b, &b.parts[0])

	// 64 KiB: 1,024 bytes a part. A key spent for an hour and four refilled ones (186 bytes
	// each); a key of 476 bytes drops the four and keeps three spares; a key of 326 bytes then
	// needs all three gone.
	b = NewTokenBucket(rate.Every(time.Hour), 1, WithMaxMemory(64<<10))
	p := &b.parts[0]
	ks = keysInPart(b, 0, 5, 10, "d")
	decide(t, b, ks[0], 1, t0)
	for _, k := range ks[1:] {
		decide(t, b, k, 0, t0)
	}
	for i, k := range []string{keysInPart(b, 0, 1, 300, "e")[0], keysInPart(b, 0, 1, 150, "f")[0]} {
		if d := decideOrPanic(t, b, k, 1, t0.Add(time.Duration(i)*time.Second)); !d.Allowed {
			t.Fatalf("new key %d: %+v", i+1, d)
		}
		checkPart(t, b, p)
	}
	if len(p.keys) != 3 || len(p.free) != 0 {
		t.Fatalf("%d keys and %d spares held, want 3 and none", len(p.keys), len(p.free))
	}
}

// TestTableExactFit checks the byte arithmetic of a part at its edges: a key whose bytes fill
// the part exactly fits, even right after a longer one was refused; one as long as the part's
// whole budget fits once the keys held make room; and making room drops only as many refilled
// keys as it needs, which are then no longer held.
func TestTableExactFit(t *testing.T) {
	const budget = 512 // 32 KiB over 64 parts
	hour := rate.Every(time.Hour)

	b := NewTokenBucket(hour, 1, WithMaxMemory(32<<10))
	held := keysInPart(b, 0, 1, 80, "a")[0] // 256 bytes
	decide(t, b, held, 1, t0)
	if d := decide(t, b, keysInPart(b, 0, 1, 81, "b")[0], 1, t0); d.Allowed || d.RetryAfter != time.Hour {
		t.Fatalf("257 bytes beside 256 spent for an hour: %+v, want refused for that hour", d)
	}
	if d := decide(t, b, keysInPart(b, 0, 1, 80, "c")[0], 1, t0); !d.Allowed {
		t.Fatalf("256 bytes beside 256, in a part of 512: %+v, want admitted", d)
	}

	b = NewTokenBucket(hour, 1, WithMaxMemory(16<<10)) // 256 bytes a part
	decideOrPanic(t, b, keysInPart(b, 0, 1, 10, "a")[0], 0, t0)
	if d := decideOrPanic(t, b, keysInPart(b, 0, 1, 80, "b")[0], 1, t0); !d.Allowed {
		t.Fatalf("a key of the part's whole budget, the key held refilled: %+v", d)
	}

	// Two refilled keys of 186 bytes; a new key of 246 fits once one is dropped (its bucket
	// kept as a spare of 80): the other stays.
	b = NewTokenBucket(hour, 1, WithMaxMemory(32<<10))
	for _, k := range keysInPart(b, 0, 2, 10, "a") {
		decide(t, b, k, 0, t0)
	}
	if d := decideOrPanic(t, b, keysInPart(b, 0, 1, 70, "b")[0], 1, t0); !d.Allowed {
		t.Fatalf("new key: %+v", d)
	}
	if n := b.Len(); n != 2 {
		t.Fatalf("%d keys held, want 2: making room dropped a key it did not need to", n)
	}
	checkPart(t, b, &b.parts[0])
	if b.budget != budget {
		t.Fatalf("budget %d, want %d", b.budget, budget)
	}
}

// TestTableHeldWithinBudget makes room in a part at the instants where the heap's lower bounds
// are exact or stale: a key pushed at the very instant a new one needs room, and a key spent
// since it was pushed. The part drops a refilled key each time, and never holds more bytes than
// its budget.
func TestTableHeldWithinBudget(t *testing.T) {
	b := NewTokenBucket(rate.Every(time.Hour), 1, WithMaxMemory(32<<10)) // 512 bytes: two keys of 186
	p := &b.parts[0]
	ks := keysInPart(b, 0, 4, 10, "k")
	check := func(when string) {
		t.Helper()
		if b.Len() != 2 {
			t.Fatalf("%s: %d keys, want 2", when, b.Len())
		}
		checkPart(t, b, p)
	}
	decide(t, b, ks[0], 0, t0)
	decide(t, b, ks[1], 0, t0)
	// The third key needs room at t0: the heap is built, at t0 for both (full) keys.
	if d := decide(t, b, ks[2], 0, t0); !d.Allowed {
		t.Fatalf("third key: %+v", d)
	}
	check("a key pushed at the instant of the next")
	// The key left of the first two is on top of the heap, at t0; spend it, and its bound goes
	// stale: the next key must look past it, to the one pushed at t0 and still full.
	stale := ks[0]
	if _, ok := p.keys[stale]; !ok {
		stale = ks[1]
	}
	decide(t, b, stale, 1, t0.Add(time.Second))
	if d := decide(t, b, ks[3], 0, t0.Add(2*time.Second)); !d.Allowed {
		t.Fatalf("fourth key: %+v", d)
	}
	check("a stale bound on top")
	if _, ok := p.keys[stale]; !ok {
		t.Fatal("the spent key was dropped")
	}
}

// TestTableHeap checks the heap of a part over random pushes, pops, raises of the top (a key spent
// since it was pushed) and rebuilds: every parent is due no later than its children, and the keys
// come off the top in order.
func TestTableHeap(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	valid := func(p *part, op string) {
		t.Helper()
		for i := 1; i < len(p.due); i++ {
			if parent := (i - 1) / 2; p.due[parent].at > p.due[i].at {
				t.Fatalf("after %s: due[%d] = %d above its child due[%d] = %d", op, parent, p.due[parent].at, i, p.due[i].at)
			}
		}
	}
	for range 200 {
		p := new(part)
		for range 1 + rng.IntN(40) {
			p.due = append(p.due, dueKey{at: rng.Int64N(50)})
		}
		p.heapify()
		valid(p, "heapify")
		for range 100 {
			switch rng.IntN(3) {
			case 0:
				p.push(dueKey{at: rng.Int64N(50)})
				valid(p, "push")
			case 1:
				if len(p.due) > 0 {
					p.due[0].at += rng.Int64N(30)
					p.down(0)
					valid(p, "raise")
				}
			case 2:
				if len(p.due) > 0 {
					p.pop()
					valid(p, "pop")
				}
			}
		}
		var got []int64
		for len(p.due) > 0 {
			got = append(got, p.due[0].at)
			p.pop()
		}
		if !slices.IsSorted(got) {
			t.Fatalf("popped out of order: %v", got)
		}
	}
}

// TestWithMaxMemoryBound checks the smallest bound WithMaxMemory takes: 16 KiB, not a byte less.
func TestWithMaxMemoryBound(t *testing.T) {
	NewTokenBucket(1, 1, WithMaxMemory(16<<10))
	wantPanics(t, map[string]func(){"16 KiB - 1": func() { WithMaxMemory(16<<10 - 1) }})
}

// TestTableKeepsKeysFullAfterUnixNano spends a bucket that is full again only after 2262, the
// last instant UnixNano can hold (8.3e18 ns from 2026, at 1.2e-7 tokens a second): its key is
// never taken for refilled to make room, and stays refused.
func TestTableKeepsKeysFullAfterUnixNano(t *testing.T) {
	b := NewTokenBucket(1.2e-7, 1000, WithMaxMemory(16<<10)) // one key a part
	ks := keysInPart(b, 0, 2, 10, "k")
	decide(t, b, ks[0], 1000, t0)
	if d := decide(t, b, ks[1], 1, t0.Add(time.Hour)); d.Allowed {
		t.Fatalf("a new key took the place of one spent until after 2262: %+v", d)
	}
	if d := decide(t, b, ks[0], 1, t0.Add(time.Hour)); d.Allowed {
		t.Fatalf("the key spent until after 2262 was forgotten: %+v", d)
	}
}
