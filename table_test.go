package retryafter

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

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
	return WithMaxMemory(math.MaxInt)
}

// TestDroppedKeyLosesItsEntry drops a key that was just decided twice in a row, and hands its
// entry to a new key of the same part: the dropped key must not reach that entry again.
func TestDroppedKeyLosesItsEntry(t *testing.T) {
	b := NewTokenBucket(1, 5, WithMaxMemory(shardCount*2*cost("key-00000")))
	inPart := func(key string) int { return int(b.seed.sum(key) % shardCount) }
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
	b.Decide(ctx, a, 1, t0) // twice in a row: the part remembers a's entry
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
		if b.seed.sum(k)%shardCount == uint64(i) {
			keys = append(keys, k)
		}
	}
	return keys
}

// checkPart fails t unless p counts exactly its keys and its spare entries, within b's budget,
// and its index finds every key it holds.
func checkPart(t *testing.T, b *TokenBucket, p *part) {
	t.Helper()
	want, held := entryBytes*len(p.free), 0
	for i, e := range p.index {
		if e == nil {
			continue
		}
		held++
		want += e.cost()
		if p.tags[i] != tag(e.hash(&b.seed)) {
			t.Fatalf("slot %d: tag %#x, want %#x", i, p.tags[i], tag(e.hash(&b.seed)))
		}
	}
	if p.last != nil && !slices.Contains(p.index, p.last) {
		t.Fatalf("the part remembers an entry its index does not hold")
	}
	for _, e := range p.free {
		if e.key[maxInline] > maxInline {
			t.Fatalf("a spare entry of %d bytes, kept for a key of at most %d", e.cost()-keyBytes+entryBytes, maxInline)
		}
	}
	if held != p.held || p.used != want || p.used > b.budget {
		t.Fatalf("part counts %d bytes for %d keys (%d in its index) and %d spares, which take %d; budget %d", p.used, p.held, held, len(p.free), want, b.budget)
	}
	if p.due == nil {
		return
	}
	// Once the part has been full, its heap holds every key once, each at or after its parent.
	inHeap := make(map[*entry]bool, len(p.due))
	for i, d := range p.due {
		if inHeap[d.e] || !slices.Contains(p.index, d.e) {
			t.Fatalf("heap slot %d: an entry twice, or one the index does not hold", i)
		}
		inHeap[d.e] = true
		if parent := (i - 1) / 2; i > 0 && p.due[parent].at > d.at {
			t.Fatalf("heap slot %d is due before its parent", i)
		}
	}
	if len(p.due) != held {
		t.Fatalf("the heap holds %d keys, the index %d", len(p.due), held)
	}
}

// holds reports whether b's table holds key.
func holds(b *TokenBucket, key string) bool {
	h := b.seed.sum(key)
	_, ok := b.parts[h%shardCount].get(h, key)
	return ok
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

// keyOfCost returns a key of part i of b's table that the part counts as n bytes, failing t when
// no key length gives exactly n.
func keyOfCost(t *testing.T, b *TokenBucket, i, n int, prefix string) string {
	t.Helper()
	for size := maxInline + 1; size <= n; size++ {
		if k := strings.Repeat("x", size); cost(k) == n {
			return keysInPart(b, i, 1, size, prefix)[0]
		}
	}
	t.Fatalf("no key costs %d bytes", n)
	return ""
}

// costExists reports whether some key longer than maxInline costs exactly n bytes.
func costExists(n int) bool {
	for size := maxInline + 1; size <= n; size++ {
		if cost(strings.Repeat("x", size)) == n {
			return true
		}
	}
	return false
}

// TestTableSpareBucketsGiveWay checks that the entries a part keeps from dropped keys, only to
// spare new keys an allocation, never cost a new key its room: when the last key held is
// dropped, or no held key has refilled, the spares go first. (The part once indexed its empty
// heap when the bytes of a kept spare and a new key did not fit together, and panicked with its
// lock held.)
func TestTableSpareBucketsGiveWay(t *testing.T) {
	// 16 KiB: 256 bytes a part, one key of up to 15 bytes (136) and the spare of another (96).
	b := NewTokenBucket(rate.Every(time.Hour), 1, WithMaxMemory(16<<10))
	ks := keysInPart(b, 0, 2, 10, "a")
	decideOrPanic(t, b, ks[0], 0, t0) // held, and full: it makes room when asked
	if d := decideOrPanic(t, b, ks[1], 1, t0); !d.Allowed {
		t.Fatalf("a new key, after the only key held had refilled: %+v", d)
	}
	checkPart(t, b, &b.parts[0])

	// 32 KiB: 512 bytes a part. A short key, full (136), and a long one spent for an hour (206):
	// a long key of 280 bytes drops the first, whose spare (96) leaves it too little room, and
	// fits once the spare goes.
	b = NewTokenBucket(rate.Every(time.Hour), 1, WithMaxMemory(32<<10))
	p := &b.parts[0]
	decideOrPanic(t, b, keysInPart(b, 0, 1, 10, "b")[0], 0, t0)
	decideOrPanic(t, b, keyOfCost(t, b, 0, 206, "c"), 1, t0)
	if d := decideOrPanic(t, b, keyOfCost(t, b, 0, 280, "d"), 1, t0); !d.Allowed {
		t.Fatalf("a new key that fits beside the key still spent: %+v", d)
	}
	if p.held != 2 || len(p.free) != 0 {
		t.Fatalf("part holds %d keys and %d spares, want 2 and none", p.held, len(p.free))
	}
	checkPart(t, b, p)

	// 64 KiB: 1,024 bytes a part. A short key spent for an hour and four refilled ones (136
	// each); a long key of 503 bytes drops the four and keeps their four spares (96 each); a
	// long key of 381 then needs all four gone.
	b = NewTokenBucket(rate.Every(time.Hour), 1, WithMaxMemory(64<<10))
	p = &b.parts[0]
	ks = keysInPart(b, 0, 5, 10, "e")
	decide(t, b, ks[0], 1, t0)
	for _, k := range ks[1:] {
		decide(t, b, k, 0, t0)
	}
	for i, n := range []int{503, 381} {
		if d := decideOrPanic(t, b, keyOfCost(t, b, 0, n, "f"+strconv.Itoa(i)), 1, t0.Add(time.Duration(i)*time.Second)); !d.Allowed {
			t.Fatalf("new key %d: %+v", i+1, d)
		}
		checkPart(t, b, p)
		if want := []int{4, 0}[i]; len(p.free) != want {
			t.Fatalf("after new key %d: %d spares, want %d", i+1, len(p.free), want)
		}
	}
	if p.held != 3 {
		t.Fatalf("%d keys held, want 3", p.held)
	}
}

// TestTableKeepsOnlyPlainSpares drops the refilled key of a wide entry to make room for a long
// one: its entry, larger than a plain one, is not kept as a spare, which is counted as a plain
// entry and handed to a short key.
func TestTableKeepsOnlyPlainSpares(t *testing.T) {
	b := NewTokenBucket(rate.Every(time.Hour), 1, WithMaxMemory(32<<10)) // 512 bytes a part
	p := &b.parts[0]
	decide(t, b, keysInPart(b, 0, 1, 10, "a")[0], 1, t0) // 136, spent for an hour
	decide(t, b, keysInPart(b, 0, 1, 20, "w")[0], 0, t0) // 152, full
	if d := decide(t, b, keyOfCost(t, b, 0, 250, "l"), 1, t0); !d.Allowed {
		t.Fatalf("a long key, once the wide one made room: %+v", d)
	}
	if p.held != 2 {
		t.Fatalf("%d keys held, want 2", p.held)
	}
	checkPart(t, b, p)
}

// TestTableForgetsDroppedLastEntry drops the key whose entry a part remembers, to make room for
// a long key that takes no spare: the part must not remember an entry it no longer holds, which
// would give the dropped key its old bucket outside the index.
func TestTableForgetsDroppedLastEntry(t *testing.T) {
	b := NewTokenBucket(rate.Every(time.Hour), 1, WithMaxMemory(32<<10)) // 512 bytes a part
	p := &b.parts[0]
	a := keysInPart(b, 0, 1, 10, "a")[0]
	decide(t, b, a, 0, t0)
	decide(t, b, a, 0, t0) // twice in a row: the part remembers a's entry
	if p.last == nil {
		t.Fatal("the part does not remember a key that came twice in a row")
	}
	if d := decide(t, b, keyOfCost(t, b, 0, 400, "l"), 1, t0); !d.Allowed { // drops a
		t.Fatalf("a long key, once a made room: %+v", d)
	}
	if holds(b, a) || len(p.free) != 1 {
		t.Fatalf("a held: %v, %d spares; want a dropped to the spares", holds(b, a), len(p.free))
	}
	checkPart(t, b, p)
}

// TestTableExactFit checks the byte arithmetic of a part at its edges: a key whose bytes fill
// the part exactly fits, even right after a longer one was refused; one as long as the part's
// whole budget fits once the keys held make room; and making room drops only as many refilled
// keys as it needs, which are then no longer held.
func TestTableExactFit(t *testing.T) {
	const budget = 512 // 32 KiB over 64 parts
	hour := rate.Every(time.Hour)

	b := NewTokenBucket(hour, 1, WithMaxMemory(32<<10))
	decide(t, b, keysInPart(b, 0, 1, 10, "a")[0], 1, t0) // 136 bytes, spent for an hour
	over := budget - keyBytes + 1                        // the least cost of a long key above what is left
	for !costExists(over) {
		over++
	}
	if d := decide(t, b, keyOfCost(t, b, 0, over, "b"), 1, t0); d.Allowed || d.RetryAfter != time.Hour {
		t.Fatalf("%d bytes beside %d spent for an hour: %+v, want refused for that hour", over, keyBytes, d)
	}
	if d := decide(t, b, keyOfCost(t, b, 0, budget-keyBytes, "c"), 1, t0); !d.Allowed {
		t.Fatalf("%d bytes beside %d, in a part of %d: %+v, want admitted", budget-keyBytes, keyBytes, budget, d)
	}
	checkPart(t, b, &b.parts[0])

	b = NewTokenBucket(hour, 1, WithMaxMemory(16<<10)) // 256 bytes a part
	decideOrPanic(t, b, keysInPart(b, 0, 1, 10, "a")[0], 0, t0)
	if d := decideOrPanic(t, b, keyOfCost(t, b, 0, 256, "b"), 1, t0); !d.Allowed {
		t.Fatalf("a key of the part's whole budget, the key held refilled: %+v", d)
	}
	checkPart(t, b, &b.parts[0])

	// Two refilled keys of 136 bytes; a new key of 258 fits once one is dropped (its entry kept
	// as a spare of 96): the other stays.
	b = NewTokenBucket(hour, 1, WithMaxMemory(32<<10))
	for _, k := range keysInPart(b, 0, 2, 10, "a") {
		decide(t, b, k, 0, t0)
	}
	if d := decideOrPanic(t, b, keyOfCost(t, b, 0, 258, "b"), 1, t0); !d.Allowed {
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
	b := NewTokenBucket(rate.Every(time.Hour), 1, WithMaxMemory(shardCount*300)) // 300 bytes: two keys of 136
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
	if !holds(b, stale) {
		stale = ks[1]
	}
	decide(t, b, stale, 1, t0.Add(time.Second))
	if d := decide(t, b, ks[3], 0, t0.Add(2*time.Second)); !d.Allowed {
		t.Fatalf("fourth key: %+v", d)
	}
	check("a stale bound on top")
	if !holds(b, stale) {
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

// TestFilledBucketIsNew checks that a bucket filled in place behaves as rate.NewLimiter's, over
// random requests at random instants, for rates from none to many a second and bursts from 1.
func TestFilledBucketIsNew(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, limit := range []rate.Limit{0, 1e-7, 0.5, 1, 3, 1000} {
		for _, burst := range []int{1, 2, 7, 100} {
			b := NewTokenBucket(limit, burst)
			now := t0.Add(time.Duration(rng.Int64N(int64(time.Hour))))
			var e entry
			b.fill(&e.lim, now)
			want := rate.NewLimiter(limit, burst)
			for i := range 200 {
				now = now.Add(time.Duration(rng.Int64N(int64(2 * time.Second))))
				if i%17 == 0 {
					now = now.Add(-time.Duration(rng.Int64N(int64(time.Second)))) // out of order
				}
				n := rng.IntN(burst + 2)
				if got, w := e.lim.TokensAt(now), want.TokensAt(now); got != w {
					t.Fatalf("limit %v burst %d, request %d: %v tokens, want %v", limit, burst, i, got, w)
				}
				if rng.IntN(2) == 0 {
					if got, w := e.lim.AllowN(now, n), want.AllowN(now, n); got != w {
						t.Fatalf("limit %v burst %d, request %d: AllowN(%d) = %v, want %v", limit, burst, i, n, got, w)
					}
					continue
				}
				r, w := e.lim.ReserveN(now, n), want.ReserveN(now, n)
				if r.OK() != w.OK() || r.DelayFrom(now) != w.DelayFrom(now) {
					t.Fatalf("limit %v burst %d, request %d: ReserveN(%d) = %v %v, want %v %v", limit, burst, i, n, r.OK(), r.DelayFrom(now), w.OK(), w.DelayFrom(now))
				}
				r.CancelAt(now)
				w.CancelAt(now)
			}
		}
	}
}

// TestTableIndexAgainstMap adds keys to a part and drops them at random, short and long, many of
// the same tag, and checks after each step that the part finds exactly the keys a map holds, and
// the bucket it gave each.
func TestTableIndexAgainstMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	b := NewTokenBucket(1, 1, WithMaxMemory(1<<30))
	p := &b.parts[0]
	model := map[string]*rate.Limiter{}
	var keys []string
	for i := range 3000 {
		k := strings.Repeat("k", rng.IntN(40)) + strconv.Itoa(i) // short, wide and long
		if rng.IntN(2) == 0 {
			k = strconv.Itoa(i) // short
		}
		keys = append(keys, k)
	}
	for step := range 20_000 {
		k := keys[rng.IntN(len(keys))]
		h := b.seed.sum(k)
		lim, ok := p.get(h, k)
		if want, held := model[k]; ok != held || lim != want {
			t.Fatalf("step %d: get(%q) = %p %v, want %p %v", step, k, lim, ok, want, held)
		}
		switch {
		case !ok:
			lim, _ = b.add(p, h, k, t0, nil)
			model[k] = lim
		case rng.IntN(3) == 0:
			e := (*entry)(unsafe.Pointer(lim)) // the bucket is the entry's first field
			p.remove(e, &b.seed)
			p.held--
			p.used -= e.cost()
			delete(model, k)
		}
		if step%1000 == 0 || step == 19_999 {
			checkPart(t, b, p)
			for k, want := range model {
				if lim, ok := p.get(b.seed.sum(k), k); !ok || lim != want {
					t.Fatalf("step %d: held key %q not found", step, k)
				}
			}
		}
	}
	if len(p.tags) <= minSlots {
		t.Fatalf("the index never grew: %d slots", len(p.tags))
	}
}

// checkIs fails t unless a part that holds only a finds b, of the same hash, exactly when a
// and b are equal.
func checkIs(t *testing.T, a, b string) {
	t.Helper()
	tb := NewTokenBucket(1, 1)
	p := &tb.parts[0]
	tb.add(p, 0, a, t0, nil)
	if _, ok := p.get(0, b); ok != (a == b) {
		t.Fatalf("the entry of %q is the entry of %q: %v", a, b, ok)
	}
}

// TestEntryIsItsKey compares the entry of keys of every length up to maxWide and two more, short,
// wide and long, of random bytes (zeros among them), with the same key, the key with one byte
// changed, one byte more and one less.
func TestEntryIsItsKey(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	for n := range maxWide + 3 {
		for range 200 {
			b := make([]byte, n)
			for i := range b {
				b[i] = byte(rng.IntN(4)) // zeros and near misses
			}
			k := string(b)
			checkIs(t, k, k)
			checkIs(t, k, k+"\x00")
			if n > 0 {
				checkIs(t, k, k[:n-1])
				c := []byte(k)
				c[rng.IntN(n)] ^= byte(1 + rng.IntN(255))
				checkIs(t, k, string(c))
			}
		}
	}
}

func FuzzEntryIsItsKey(f *testing.F) {
	f.Add("10.0.0.1", "10.0.0.10")
	f.Add("", "\x00")
	f.Add("255.255.255.255", "255.255.255.25")
	f.Add("2001:db8:1:2::/64", "2001:db8:1:3::/64")
	f.Fuzz(checkIs)
}

// TestSpentSpareNotReused drops a key's entry to the spares while a caller still holds its bucket
// and spends from it, as a decision of several layers could before makeRoom kept its buckets: a
// new key must not start from that spent bucket all the same.
func TestSpentSpareNotReused(t *testing.T) {
	b := NewTokenBucket(rate.Every(time.Hour), 1)
	p := &b.parts[0]
	ks := keysInPart(b, 0, 2, 10, "k")
	held, _ := b.add(p, b.seed.sum(ks[0]), ks[0], t0, nil)
	// Dropped as makeRoom drops a refilled key: out of the index, its entry kept as a spare.
	e := (*entry)(unsafe.Pointer(held)) // the bucket is the entry's first field
	p.remove(e, &b.seed)
	p.held--
	p.used += entryBytes - e.cost()
	p.free = append(p.free, e)
	if !held.AllowN(t0, 1) { // the caller that looked it up spends
		t.Fatal("the held bucket was not full")
	}
	if d := decide(t, b, ks[1], 1, t0); !d.Allowed {
		t.Fatalf("a new key started from the spent bucket of a dropped one: %+v", d)
	}
	checkPart(t, b, p)
}

// TestCostCoversAllocation checks that what a part counts for a long key covers what the
// allocator hands out for its copy, over lengths up to 100 KiB and at the edges of the size
// classes where the rounding is widest.
func TestCostCoversAllocation(t *testing.T) {
	lengths := []int{31, 32, 33, 49, 769, 1793, 3457, 4097, 6913, 28673, 32768, 32769, 40961, 65536, 65537}
	for n := 100; n <= 100_000; n = n*9/8 + 1 {
		lengths = append(lengths, n)
	}
	src := strings.Repeat("k", 100_000)
	for _, n := range lengths {
		got := allocated(func() { sink = strings.Clone(src[:n]) })
		if counted := cost(src[:n]) - keyBytes - longBytes; uint64(counted) < got {
			t.Fatalf("a key of %d bytes is counted %d bytes beyond its entry; its copy takes %d", n, counted, got)
		}
	}
	// Each kind of entry is one allocation of what it is counted on 64-bit platforms, and of at
	// most that on 32-bit ones, whose pointers and times are smaller.
	for _, c := range []struct {
		name    string
		new     func()
		counted int
	}{
		{"entry", func() { sinkEntry = new(entry) }, entryBytes},
		{"wideEntry", func() { sinkEntry = &new(wideEntry).entry }, entryBytes + wideBytes},
		{"longEntry", func() { sinkEntry = &new(longEntry).entry }, entryBytes + longBytes},
	} {
		if got := allocated(c.new); got > uint64(c.counted) || (strconv.IntSize == 64 && got != uint64(c.counted)) {
			t.Fatalf("a %s takes %d bytes, counted %d", c.name, got, c.counted)
		}
	}
}

var sinkEntry *entry

// allocated returns the bytes the heap hands out while fn runs: the least of three runs, since
// anything else the runtime allocates meanwhile only adds.
func allocated(fn func()) uint64 {
	got := uint64(math.MaxUint64)
	for range 3 {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		fn()
		runtime.ReadMemStats(&after)
		got = min(got, after.TotalAlloc-before.TotalAlloc)
	}
	return got
}

var sink string

// TestTableFullWaitsForTheRefill refuses a new key at a full part while the key it holds has
// spent two of its three tokens: the wait is exactly until that key's bucket is whole again, and
// the new key is admitted then.
func TestTableFullWaitsForTheRefill(t *testing.T) {
	b := NewTokenBucket(rate.Every(time.Minute), 3, WithMaxMemory(16<<10)) // one key a part
	ks := keysInPart(b, 0, 2, 10, "k")
	decide(t, b, ks[0], 2, t0) // one token left: whole again at t0 + 2 min
	if d := decide(t, b, ks[1], 1, t0.Add(10*time.Second)); d.Allowed || d.RetryAfter != 110*time.Second {
		t.Fatalf("a new key at a full part: %+v, want refused for 110 s", d)
	}
	if d := decide(t, b, ks[1], 1, t0.Add(2*time.Minute)); !d.Allowed {
		t.Fatalf("a new key once the key held is whole again: %+v", d)
	}
}
