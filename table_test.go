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
	"sync"
	"testing"
	"time"

	"github.com/retryafter/retryafter/internal/clock"
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
		return WithMaxMemory(held * keyCost(len("held-100000")))
	}
	return WithMaxMemory(math.MaxInt)
}

// keyCost is what a table counts for one more key of n bytes, its slots in the map and the heap
// included, when neither grows.
func keyCost(n int) int { return entryBytes(n) + slotBytes + dueBytes }

// keysInPart returns n distinct keys of length size, starting with prefix, that b keeps in part
// i: the tests of the table's byte arithmetic fill one part with keys of known cost.
func keysInPart(b *TokenBucket, i, n, size int, prefix string) []string {
	var keys []string
	for j := 0; len(keys) < n; j++ {
		k := fmt.Sprintf("%s%0*d", prefix, size-len(prefix), j)
		if b.partOf(k) == uint64(i) {
			keys = append(keys, k)
		}
	}
	return keys
}

// checkPart fails t unless p counts exactly its keys, within its budget, and its heap, once
// made, holds every key once, each due at or after its parent.
func checkPart(t *testing.T, p *table) {
	t.Helper()
	want := 0
	for k := range p.keys {
		want += entryBytes(len(k))
	}
	if p.used != want || p.counted() > p.budget || p.peak < len(p.keys) {
		t.Fatalf("part counts %d bytes (%d in all, peak %d) for %d keys, which take %d; budget %d", p.used, p.counted(), p.peak, len(p.keys), want, p.budget)
	}
	if p.due == nil {
		return
	}
	seen := make(map[string]bool, len(p.due))
	for i, d := range p.due {
		if seen[d.key] || p.keys[d.key] == nil {
			t.Fatalf("heap slot %d: %q twice, or a key the map does not hold", i, d.key)
		}
		seen[d.key] = true
		if parent := (i - 1) / 2; i > 0 && p.due[parent].at > d.at {
			t.Fatalf("heap slot %d is due before its parent", i)
		}
	}
	if len(p.due) != len(p.keys) {
		t.Fatalf("the heap holds %d keys, the map %d", len(p.due), len(p.keys))
	}
}

// holds reports whether b holds key.
func (b *TokenBucket) holds(key string) bool {
	p := b.part(key)
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.keys[key] != nil
}

// TestTableFullWaitsForTheRefill refuses a new key at a full part while the key it holds has
// not refilled, with the wait until it has, and admits it then.
func TestTableFullWaitsForTheRefill(t *testing.T) {
	b := NewTokenBucket(rate.Every(time.Minute), 3, WithMaxMemory(partCount*(keyCost(10)+keyCost(10)/2))) // one key a part
	ks := keysInPart(b, 0, 2, 10, "k")
	decide(t, b, ks[0], 2, t0) // one token left: whole again at t0 + 2 min
	if d := decide(t, b, ks[1], 1, t0.Add(10*time.Second)); d.Allowed || d.RetryAfter != 110*time.Second || d.Reset != d.RetryAfter {
		t.Fatalf("a new key at a full part: %+v, want refused for 110 s", d)
	}
	if d := decide(t, b, ks[1], 1, t0.Add(2*time.Minute)); !d.Allowed {
		t.Fatalf("a new key once the key held is whole again: %+v", d)
	}
	checkPart(t, &b.parts[0])
	if b.holds(ks[0]) {
		t.Fatal("the refilled key is still held: the new one did not take its place")
	}
}

// TestTableHeldWithinBudget makes room in a part at the instants where the heap's lower bounds
// are exact and where they are stale (a key spent since it was pushed): the part holds two keys,
// within its budget, and never drops the one spent.
func TestTableHeldWithinBudget(t *testing.T) {
	b := NewTokenBucket(rate.Every(time.Hour), 1, WithMaxMemory(partCount*(2*keyCost(10)+keyCost(10)/2)))
	p := &b.parts[0]
	ks := keysInPart(b, 0, 4, 10, "k")
	check := func(when string) {
		t.Helper()
		if len(p.keys) != 2 {
			t.Fatalf("%s: %d keys, want 2", when, len(p.keys))
		}
		checkPart(t, p)
	}
	decide(t, b, ks[0], 0, t0)
	decide(t, b, ks[1], 0, t0)
	// The third key needs room at t0: the heap is made, at t0 for both (full) keys.
	if d := decide(t, b, ks[2], 0, t0); !d.Allowed {
		t.Fatalf("third key: %+v", d)
	}
	check("a key pushed at the instant of the next")
	// Spend a key left of the first two: its bound on the heap goes stale, and the next key
	// must look past it, to the one pushed at t0 and still full.
	stale := ks[0]
	if !b.holds(stale) {
		stale = ks[1]
	}
	decide(t, b, stale, 1, t0.Add(time.Second))
	if d := decide(t, b, ks[3], 0, t0.Add(2*time.Second)); !d.Allowed {
		t.Fatalf("fourth key: %+v", d)
	}
	check("a stale bound on top")
	if !b.holds(stale) {
		t.Fatal("the spent key was dropped")
	}
}

// TestTableHeap checks the heap of a part over random pushes, pops and raises of the top (a key
// spent since it was pushed): each keeps the heap's order, and pops come out sorted.
func TestTableHeap(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	valid := func(p *table, op string) {
		t.Helper()
		for i := 1; i < len(p.due); i++ {
			if parent := (i - 1) / 2; p.due[parent].at > p.due[i].at {
				t.Fatalf("after %s: due[%d] = %d above its child due[%d] = %d", op, parent, p.due[parent].at, i, p.due[i].at)
			}
		}
	}
	for range 200 {
		p := new(table)
		for range 1 + rng.IntN(40) {
			p.due = append(p.due, due{at: rng.Int64N(50)})
		}
		p.heapify()
		valid(p, "heapify")
		for range 100 {
			switch rng.IntN(3) {
			case 0:
				p.push(due{at: rng.Int64N(50)})
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

// TestTableAgainstModel decides random requests of keys short and long in a small bucket and
// holds the table, after each, to its invariants: what it counts is what it holds, within its
// budget, and its heap has every key once.
func TestTableAgainstModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for round := range 20 {
		b := NewTokenBucket(rate.Every(time.Duration(1+rng.IntN(100))*time.Millisecond), 1+rng.IntN(5), WithMaxMemory(16<<10+rng.IntN(64<<10)))
		now := t0
		for range 2000 {
			now = now.Add(time.Duration(rng.IntN(int(20 * time.Millisecond))))
			size := 1 + rng.IntN(20)
			if rng.IntN(10) == 0 {
				size = 100 + rng.IntN(400)
			}
			key := strings.Repeat("k", size-1) + strconv.Itoa(rng.IntN(10))
			decide(t, b, key, rng.IntN(3), now)
		}
		for i := range b.parts {
			p := &b.parts[i]
			p.mu.Lock()
			checkPart(t, p)
			p.mu.Unlock()
		}
		if b.Len() == 0 {
			t.Fatalf("round %d: no key held", round)
		}
	}
}

// TestWithMaxMemoryBound checks the smallest bound WithMaxMemory takes: 16 KiB, not a byte less.
func TestWithMaxMemoryBound(t *testing.T) {
	NewTokenBucket(1, 1, WithMaxMemory(16<<10))
	wantPanics(t, map[string]func(){"16 KiB - 1": func() { WithMaxMemory(16<<10 - 1) }})
}

// TestTableKeepsKeysFullAfterUnixNano spends a bucket that is full again only after 2262, the
// last instant UnixNano can name: the key is kept, never taken for one that has refilled.
func TestTableKeepsKeysFullAfterUnixNano(t *testing.T) {
	b := NewTokenBucket(1.2e-7, 1000, WithMaxMemory(partCount*(keyCost(10)+keyCost(10)/2))) // one key a part
	ks := keysInPart(b, 0, 2, 10, "k")
	decide(t, b, ks[0], 1000, t0)
	if d := decide(t, b, ks[1], 1, t0.Add(time.Hour)); d.Allowed {
		t.Fatalf("a new key took the place of one spent until after 2262: %+v", d)
	}
	if d := decide(t, b, ks[0], 1, t0.Add(time.Hour)); d.Allowed {
		t.Fatalf("the key spent until after 2262 was forgotten: %+v", d)
	}
}

// TestNewBucketIsFull checks that a table's new bucket holds its whole burst whatever its
// limit, 0 included, as NewTokenBucket promises: a limit of 0 admits each key's first burst.
func TestNewBucketIsFull(t *testing.T) {
	for _, limit := range []rate.Limit{0, 1e-12, 1e-7, 0.5, 1, 1000} {
		for _, burst := range []int{1, 2, 7, 100} {
			b := NewTokenBucket(limit, burst)
			for i := range burst {
				if d := decide(t, b, "k", 1, t0); !d.Allowed {
					t.Fatalf("limit %v burst %d: request %d of the first burst refused: %+v", limit, burst, i, d)
				}
			}
			if limit < 1 {
				if d := decide(t, b, "k", 1, t0); d.Allowed {
					t.Fatalf("limit %v burst %d: admitted past the burst", limit, burst)
				}
			}
		}
	}
}

// TestTableClockStepsBack fills a part, steps a clock without monotonic readings back an hour,
// and asks for a new key once every held bucket has refilled: it is admitted. The part once kept
// the instant of its refusal from the old clock and refused new keys for the whole hour.
func TestTableClockStepsBack(t *testing.T) {
	b := NewTokenBucket(rate.Every(time.Second), 10, WithMaxMemory(partCount*(keyCost(10)+keyCost(10)/2))) // one key a part
	ks := keysInPart(b, 0, 3, 10, "k")
	late := t0.Add(time.Hour)
	decide(t, b, ks[0], 10, late)
	if d := decide(t, b, ks[1], 1, late); d.Allowed || d.RetryAfter != 10*time.Second {
		t.Fatalf("a new key at a full part: %+v, want refused for 10 s", d)
	}
	back := t0.Add(20 * time.Second) // an hour back, then 20 s on: the held bucket has refilled
	if d := decide(t, b, ks[0], 0, back.Add(-10*time.Second)); d.Remaining != 0 {
		t.Fatalf("after the step, the held key: %+v, want its bucket as it was", d)
	}
	if d := decide(t, b, ks[2], 1, back); !d.Allowed {
		t.Fatalf("a new key after the clock stepped back and the held key refilled: %+v, want admitted", d)
	}
	checkPart(t, &b.parts[0])
}

// TestTableClockStepsBackInEveryPart fills NewTokenBucket(10, 1, WithMaxMemory(16 KiB)), a key
// a part, with keys spent at t0 until it refuses new keys, in every part, then peeks at one key
// at t0 − 1 h (a clock without monotonic readings stepped back) and asks for a new key in each
// part at t0 − 1 h + 10 s: each is admitted, since every held bucket has had 10 s to refill since
// the bucket saw the step. Only the part of the peek once learnt of the step: each other part
// took the later reading for the step, kept its buckets at t0, and refused new keys for the hour,
// each time with a RetryAfter of 100 ms.
func TestTableClockStepsBackInEveryPart(t *testing.T) {
	b := NewTokenBucket(10, 1, WithMaxMemory(16<<10))
	var held, fresh []string
	for i := range partCount {
		ks := keysInPart(b, i, 3, 10, "k")
		held, fresh = append(held, ks[0]), append(fresh, ks[2])
		decide(t, b, ks[0], 1, t0)
		if d := decide(t, b, ks[1], 1, t0); d.Allowed || d.RetryAfter != 100*time.Millisecond {
			t.Fatalf("part %d, a new key at the bound: %+v, want refused for 100 ms", i, d)
		}
	}
	back := t0.Add(-time.Hour)
	decide(t, b, held[0], 0, back)
	for i, k := range fresh {
		if d := decide(t, b, k, 1, back.Add(10*time.Second)); !d.Allowed {
			t.Fatalf("part %d, a new key 10 s after the step: %+v, want admitted", i, d)
		}
		checkPart(t, &b.parts[i])
	}
	// The key that took the place of a held one refills on the new clock, as any other.
	if d := decide(t, b, fresh[1], 1, back.Add(10*time.Second)); d.Allowed || d.RetryAfter != 100*time.Millisecond-slack {
		t.Fatalf("a new key spent after the step: %+v, want refused for 100 ms", d)
	}
	if d := decide(t, b, fresh[1], 1, back.Add(10*time.Second+100*time.Millisecond)); !d.Allowed {
		t.Fatalf("a new key spent after the step, 100 ms on: %+v, want admitted", d)
	}
}

// TestTableClockStepsBackConcurrently steps a clock without monotonic readings back an hour while
// 8 goroutines decide keys in every part at the new readings, the step and clock.ConfirmStep after it:
// the step is taken once, whichever part confirms it, by exactly the hour, so that a key spent at
// t0 has had time to refill: admitted once, then refused for exactly a second.
func TestTableClockStepsBackConcurrently(t *testing.T) {
	b := NewTokenBucket(1, 1)
	var keys []string
	for i := range partCount {
		k := keysInPart(b, i, 1, 10, "k")[0]
		keys = append(keys, k)
		decide(t, b, k, 1, t0)
	}
	back := t0.Add(-time.Hour)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for _, at := range []time.Time{back, back.Add(clock.ConfirmStep)} {
				for i := range keys {
					b.Decide(context.Background(), keys[(i+g*8)%len(keys)], 0, at)
				}
			}
		})
	}
	wg.Wait()
	if got := b.steps.Shift(); got != time.Hour {
		t.Fatalf("the readings are shifted by %v, want the step of an hour", got)
	}
	later := back.Add(clock.ConfirmStep)
	for _, k := range keys {
		if d := decide(t, b, k, 1, later); !d.Allowed {
			t.Fatalf("a key spent at t0, %v after the step: %+v, want admitted", clock.ConfirmStep, d)
		}
		if d := decide(t, b, k, 1, later); d.Allowed || d.RetryAfter != time.Second-slack {
			t.Fatalf("a key spent after the step, again: %+v, want refused for a second", d)
		}
	}
}

// TestAllClockStepsBack decides an All of two TokenBuckets, a key a part in each and every part
// held by a key spent at t0, whose clock without monotonic readings steps back an hour: 10 s
// after the step, as the All saw it, every held bucket has refilled, and new keys find room in
// every part of both (peeks, whose full buckets make room for the next).
func TestAllClockStepsBack(t *testing.T) {
	a, b := NewTokenBucket(10, 1, WithMaxMemory(16<<10)), NewTokenBucket(1, 10, WithMaxMemory(16<<10))
	all := All(a, b)
	ctx := context.Background()
	var fresh []string
	for i := range partCount {
		ks := keysInPart(a, i, 2, 10, "k")
		decide(t, a, ks[0], 1, t0)
		fresh = append(fresh, ks[1])
		ks = keysInPart(b, i, 2, 10, "k")
		decide(t, b, ks[0], 10, t0)
		fresh = append(fresh, ks[1])
	}
	back := t0.Add(-time.Hour)
	if _, err := all.Decide(ctx, fresh[0], 0, back); err != nil {
		t.Fatal(err)
	}
	for _, k := range fresh {
		if d, err := all.Decide(ctx, k, 0, back.Add(10*time.Second)); err != nil || !d.Allowed {
			t.Fatalf("a new key %q 10 s after the step: %+v, %v, want admitted", k, d, err)
		}
	}
}

// TestTableBoundInBytes fills buckets bounded to 8 MiB with each mix of keys a flood can bring
// (IPv4 addresses, IPv6 /64s, 4 KiB keys, 33 KB keys, 200,000 short keys followed by 3 KB ones,
// which leave the map's slots behind) and measures the heap after a collection: within 2% of
// the bound, whatever the mix.
func TestTableBoundInBytes(t *testing.T) {
	if testing.Short() {
		t.Skip("fills 8 MiB several times")
	}
	const bound = 8 << 20
	type mix struct {
		name string
		keys func(yield func(string) bool)
	}
	keys := func(n, size int, prefix string) func(func(string) bool) {
		return func(yield func(string) bool) {
			pad := ""
			if size > len(prefix)+10 {
				pad = strings.Repeat("x", size-len(prefix)-10)
			}
			for i := range n {
				if !yield(fmt.Sprintf("%s%s%010d", prefix, pad, i)) {
					return
				}
			}
		}
	}
	then := func(a, b func(func(string) bool)) func(func(string) bool) {
		return func(yield func(string) bool) {
			for k := range a {
				if !yield(k) {
					return
				}
			}
			for k := range b {
				if !yield(k) {
					return
				}
			}
		}
	}
	ipv4 := func(yield func(string) bool) {
		for i := range 200_000 {
			if !yield(fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255)) {
				return
			}
		}
	}
	for _, m := range []mix{
		{"IPv4", ipv4},
		{"IPv6 /64", keys(200_000, 22, "2001:db8:")},
		{"4 KiB", keys(4000, 4096, "k")},
		{"33 KB", keys(600, 33_000, "k")},
		{"short, then 3 KB", then(keys(200_000, 12, "s"), keys(6000, 3000, "l"))},
	} {
		runtime.GC()
		var before runtime.MemStats
		runtime.ReadMemStats(&before)
		b := NewTokenBucket(rate.Every(time.Hour), 1, WithMaxMemory(bound))
		now := t0
		for k := range m.keys {
			now = now.Add(time.Hour) // every key held has refilled: each new one makes room
			b.Decide(context.Background(), k, 1, now)
		}
		runtime.GC()
		var after runtime.MemStats
		runtime.ReadMemStats(&after)
		held := int64(after.HeapAlloc) - int64(before.HeapAlloc)
		ratio := float64(held) / bound
		t.Logf("%s: %d keys, %.3f of the bound", m.name, b.Len(), ratio)
		if ratio > 1.02 {
			t.Errorf("%s: %d bytes held for a bound of %d: %.3f of it", m.name, held, bound, ratio)
		}
		runtime.KeepAlive(b)
	}
}

// TestTableShrinks drops most keys of a part to make room for long ones: the map and the heap
// are made again at their size, and what the part counts for them falls.
func TestTableShrinks(t *testing.T) {
	b := NewTokenBucket(rate.Every(time.Hour), 1, WithMaxMemory(partCount*4096))
	p := &b.parts[0]
	short := keysInPart(b, 0, 4096/keyCost(10), 10, "s")
	now := t0
	for _, k := range short {
		decide(t, b, k, 0, now)
	}
	peak := p.peak
	long := keysInPart(b, 0, 2, 1500, "l")
	for _, k := range long {
		now = now.Add(time.Hour)
		if d := decide(t, b, k, 1, now); !d.Allowed {
			t.Fatalf("a long key: %+v", d)
		}
	}
	checkPart(t, p)
	if p.peak >= peak || p.peak > len(p.keys)+1 {
		t.Fatalf("after dropping %d short keys for %d long ones: peak %d (was %d)", peak, len(long), p.peak, peak)
	}
}

// TestKeyBytesCoverAllocation checks that what a table counts for a key's copy covers what the
// allocator hands out for it, and by no more than a quarter and a size class: the bound holds in
// bytes, and a key is not counted twice its size.
func TestKeyBytesCoverAllocation(t *testing.T) {
	sizes := []int{1, 7, 8, 9, 15, 16, 17, 24, 31, 32, 33, 100, 255, 256, 257, 300, 1000, 1024, 1025, 3000, 4096, 5000, 8192, 10000, 32 << 10, 32<<10 + 1, 33_000, 40_000, 40 << 10, 100_000, 128 << 10}
	for _, n := range sizes {
		// append rounds a slice's capacity up to the allocator's size class, as it allocates.
		got := uint64(cap(append([]byte(nil), make([]byte, n)...)))
		if kb := uint64(keyBytes(n)); kb < got || kb > got+got/4+16 || (n > 32<<10 && kb != got) {
			t.Errorf("a key of %d bytes: counted %d, allocated %d (whole pages above 32 KiB)", n, kb, got)
		}
	}
	if keyBytes(0) != 0 {
		t.Errorf("an empty key counted %d bytes", keyBytes(0))
	}
}

// TestTableExactFitBesideAWait: a part refuses a long key until a key it holds refills; a short
// key that fits what is left exactly is held at once, without that wait.
func TestTableExactFitBesideAWait(t *testing.T) {
	var tb table
	tb.init(2*(entryBytes(10)+slotBytes+dueBytes), new(clock.Steps))
	held, _ := tb.add(strings.Repeat("a", 10), t0, 1, 1, nil)
	held.ReserveN(t0, 1) // full again a second on
	if lim, wait := tb.add(strings.Repeat("l", 100), t0, 1, 1, nil); lim != nil || wait != time.Second {
		t.Fatalf("a long key: %v, %v; want refused until the held key refills", lim, wait)
	}
	if lim, wait := tb.add(strings.Repeat("b", 10), t0, 1, 1, nil); lim == nil {
		t.Fatalf("a short key that fits exactly: refused for %v", wait)
	}
	checkPart(t, &tb)
}

// TestTableExactFit fills a part's budget exactly with one key: it is held, and one byte less
// of budget refuses it for ever.
func TestTableExactFit(t *testing.T) {
	for _, n := range []int{10, 300, 40_000} {
		key := strings.Repeat("k", n)
		var tb table
		tb.init(entryBytes(n)+slotBytes+dueBytes, new(clock.Steps))
		if lim, wait := tb.add(key, t0, 1, 1, nil); lim == nil {
			t.Fatalf("a key of %d bytes in a budget it fills exactly: refused for %v", n, wait)
		}
		checkPart(t, &tb)
		// Once it has refilled, another key of its length takes its place, exactly; one of the
		// next size class never fits, and the key held stays.
		m := n + 1
		for keyBytes(m) == keyBytes(n) {
			m++
		}
		if lim, wait := tb.add(strings.Repeat("l", m), t0.Add(time.Second), 1, 1, nil); lim != nil || wait != rate.InfDuration {
			t.Fatalf("a key of %d bytes after one of %d that fills the budget: %v, %v; want refused for ever", m, n, lim, wait)
		}
		if tb.keys[key] == nil {
			t.Fatalf("a key of %d bytes that never fits dropped the one held", m)
		}
		other := strings.Repeat("o", n)
		if lim, wait := tb.add(other, t0.Add(time.Second), 1, 1, nil); lim == nil || tb.keys[key] != nil {
			t.Fatalf("another key of %d bytes once the first refilled: refused for %v, or the first kept", n, wait)
		}
		checkPart(t, &tb)
		tb = table{}
		tb.init(entryBytes(n)+slotBytes+dueBytes-1, new(clock.Steps))
		if lim, wait := tb.add(key, t0, 1, 1, nil); lim != nil || wait != rate.InfDuration {
			t.Fatalf("a key of %d bytes in a budget a byte short: %v, %v; want refused for ever", n, lim, wait)
		}
	}
}

// TestTableClockStepsBackFromAnIdlePart: a clock steps back 1,000 s, and the first reading of its
// new line falls in a part idle for 900 s, which proposes a step of only 100 s; the next falls in
// the part that was decided last. It is read as far after that part's latest instant as the
// new line has run on, so its key, spent 0.1 s before the step, is told to wait the rest of its
// second, not the 900 s between the parts, and is admitted once that is over.
func TestTableClockStepsBackFromAnIdlePart(t *testing.T) {
	b := NewTokenBucket(1, 1)
	idle, busy := "idle", ""
	for i := 0; busy == ""; i++ {
		if k := "busy-" + strconv.Itoa(i); b.partOf(k) != b.partOf(idle) {
			busy = k
		}
	}
	decide(t, b, idle, 0, t0.Add(100*time.Second))
	decide(t, b, busy, 1, t0.Add(999900*time.Millisecond))
	// The clock steps back 1,000 s: the readings from here are t0 + the time since the step.
	decide(t, b, idle, 0, t0.Add(500*time.Millisecond))
	d := decide(t, b, busy, 1, t0.Add(600*time.Millisecond))
	if d.Allowed || d.RetryAfter > time.Second {
		t.Fatalf("the busy key 0.2 s after it spent, read on the new line: %+v, want a refusal of under a second", d)
	}
	if r := decide(t, b, busy, 1, t0.Add(600*time.Millisecond+d.RetryAfter)); !r.Allowed {
		t.Fatalf("the busy key, back after the %v it was told: %+v", d.RetryAfter, r)
	}
}

// TestTableClockStepsBackThenFrequent: after the clock steps back 1,000 s, a key asking every 10
// ms for 10 s at 1 a second is admitted about once a second, as before the step: the step
// proposed does not grow with the new line's own readings.
func TestTableClockStepsBackThenFrequent(t *testing.T) {
	b := NewTokenBucket(1, 1)
	decide(t, b, "k", 1, t0)
	back := t0.Add(-1000 * time.Second)
	admitted := 0
	for i := range 1000 {
		if decide(t, b, "k", 1, back.Add(time.Duration(i)*10*time.Millisecond)).Allowed {
			admitted++
		}
	}
	if admitted > 11 || b.steps.Shift() != 1000*time.Second {
		t.Errorf("after a step back of 1,000 s, %d admitted in 10 s at 1 a second, the shift %v; want at most 11, and 1,000 s",
			admitted, b.steps.Shift())
	}
}
