package retryafter

import (
	"cmp"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/retryafter/retryafter/internal/clock"
	"golang.org/x/time/rate"
)

// A table holds the token buckets of some keys, in Go's map, within a budget of bytes. It knows
// rate.Limiter and nothing above it: what a bucket's rate and burst are, it learns from the
// bucket.
//
// It keeps every key until a new one does not fit its budget. From then on it keeps a min-heap
// of all its keys by an instant at or before which each one's bucket cannot be full again (a
// lower bound: spending since only moves the true instant later). To make room it looks at the
// top: a key whose bucket has refilled is dropped, since it is the same as a key never seen; one
// that was spent since it was pushed goes back down with its true instant. So a new key at the
// bound costs O(log n), and no key over its limit is ever forgotten.
//
// A table must be locked (mu) for every method but init.
type table struct {
	mu         sync.Mutex
	rank       uint64 // its place in the one order in which a decision of several locks its tables
	clock.Line        // the latest instant a decision in this table was made at, and the clock's steps

	keys   map[string]*rate.Limiter
	budget int // the most bytes it counts (see counted)
	used   int // the bytes counted for the keys held and their buckets
	peak   int // the most keys held since keys was made: the map never gives its slots back
	drops  int // the keys dropped since keys was made
	due    []due
	full   time.Time // no key will have refilled before this instant
}

// due is an entry of a table's heap: a key and an instant, in Unix nanoseconds, at or before
// which its bucket cannot be full.
type due struct {
	at  int64
	key string
}

// What a table counts, upper estimates of what the allocator hands out, so that the bound holds
// in bytes: a rate.Limiter; the map's share of a key, three slots of a string and a pointer
// with their control bytes, since a map grows at 7/8 full to 7/16 and the tombstones of dropped
// keys take some of its room until it is made again (see shrink); and a slot of the heap.
const (
	limiterBytes = 80
	slotBytes    = 3 * 25
	dueBytes     = 24
)

// keyBytes returns the bytes a table counts for the copy of a key of n bytes: n rounded up to
// the allocator's size class, which above 256 bytes are at most a fifth apart, and above 32 KiB
// whole pages.
func keyBytes(n int) int {
	switch {
	case n == 0:
		return 0
	case n <= 256:
		return (n + 15) &^ 15
	case n <= 32<<10:
		return n + n/4
	}
	return (n + 8<<10 - 1) &^ (8<<10 - 1)
}

// entryBytes returns the bytes a table counts for a key of n bytes and its bucket, but its slots
// in the map and the heap.
func entryBytes(n int) int { return limiterBytes + keyBytes(n) }

// counted returns the bytes the table counts: its keys and buckets, a slot of the map for the
// most keys it held since the map was made, and a slot of the heap for each key or, once the
// heap is made, for each slot it has.
func (t *table) counted() int {
	return t.used + t.peak*slotBytes + max(len(t.keys), cap(t.due))*dueBytes
}

// need returns the bytes a new key of n bytes adds to what the table counts.
func (t *table) need(n int) int {
	need := entryBytes(n)
	if len(t.keys) >= t.peak {
		need += slotBytes
	}
	switch {
	case t.due == nil:
		need += dueBytes
	case len(t.due) == cap(t.due):
		need += grownBy(cap(t.due)) * dueBytes
	}
	return need
}

// grownBy returns the slots a heap of n slots grows by when it is full.
func grownBy(n int) int { return n/4 + 1 }

// tableRanks numbers the tables of the process, for the one order in which a decision of several
// layers locks them.
var tableRanks atomic.Uint64

// init readies t to hold budget bytes, its readings of the clock shifted by s.
func (t *table) init(budget int, s *clock.Steps) {
	t.rank = tableRanks.Add(1)
	t.Steps = s
	t.budget = budget
	t.keys = make(map[string]*rate.Limiter)
}

// add creates the bucket of key, a key the table does not hold, with limit and burst, full.
// When there is no room for it and none of the keys held has refilled, it returns nil and how
// long until the first may have. The buckets of keep, which the caller's decision holds (the
// earlier layers of an All), are not dropped to make room.
func (t *table) add(key string, now time.Time, limit rate.Limit, burst int, keep []*rate.Limiter) (*rate.Limiter, time.Duration) {
	if wait := t.makeRoom(len(key), now, keep); wait > 0 {
		return nil, wait
	}
	lim := rate.NewLimiter(limit, burst) // the whole burst, whatever the limit, 0 included
	key = strings.Clone(key)             // so that a key cut from a long header does not keep it alive
	t.keys[key] = lim
	t.used += entryBytes(len(key))
	t.peak = max(t.peak, len(t.keys))
	if t.due != nil {
		t.push(due{at: now.UnixNano(), key: key})
	}
	return lim, 0
}

// makeRoom drops keys whose bucket is full at now until a new key of n bytes fits the budget,
// and returns 0, or, when too few have refilled, how long until the next one may have. It
// neither drops the buckets of keep nor counts on them refilling: they go back in the heap, due
// now at the latest.
func (t *table) makeRoom(n int, now time.Time, keep []*rate.Limiter) time.Duration {
	if t.counted()+t.need(n) <= t.budget {
		return 0
	}
	if entryBytes(n)+slotBytes+dueBytes > t.budget {
		return rate.InfDuration // a key longer than the budget never fits
	}
	if now.Before(t.full) {
		return t.full.Sub(now)
	}
	if t.due == nil {
		t.due = make([]due, 0, len(t.keys))
		for key, lim := range t.keys {
			t.due = append(t.due, due{at: fullAt(lim, now), key: key})
		}
		t.heapify()
	}
	ns := now.UnixNano()
	var kept []due // the keys of keep met at the top, out of the heap meanwhile
	defer func() {
		for _, d := range kept {
			// Due now at the latest: the decision may give back what it spent from them.
			d.at = min(d.at, ns)
			t.push(d)
		}
	}()
	for t.counted()+t.need(n) > t.budget {
		if wait, stop := t.dropTop(now, keep, &kept); stop {
			return wait
		}
	}
	return 0
}

// dropTop takes one step towards room, with the heap made: it remakes the map and the heap
// when they have shrunk, sets aside the top key when keep holds its bucket (appending it to
// kept), puts a top key spent since it was pushed back down, or drops the top key when its
// bucket is full at now. It reports true, with how long until the first key may have refilled,
// when no step can make room at now.
func (t *table) dropTop(now time.Time, keep []*rate.Limiter, kept *[]due) (time.Duration, bool) {
	ns := now.UnixNano()
	if len(t.keys) < t.peak/2 || len(t.due) < cap(t.due)/2 || t.drops > len(t.keys)/2+16 {
		t.shrink()
		return 0, false
	}
	if len(t.due) == 0 {
		return rate.InfDuration, true // every key left is one keep holds
	}
	top := &t.due[0]
	lim := t.keys[top.key]
	switch {
	case holds(keep, lim):
		*kept = append(*kept, *top)
		t.pop()
	case top.at > ns:
		full := time.Unix(0, top.at)
		if len(*kept) == 0 {
			t.full = full // else a key of keep may have refilled already, for others
		}
		return full.Sub(now), true
	default:
		if at := fullAt(lim, now); at > ns {
			// Spent since it was pushed: down again, with the instant it will be full.
			top.at = at
			t.down(0)
			return 0, false
		}
		delete(t.keys, top.key)
		t.drops++
		t.used -= entryBytes(len(top.key))
		t.pop()
	}
	return 0, false
}

// holds reports whether keep holds lim.
func holds(keep []*rate.Limiter, lim *rate.Limiter) bool {
	for _, k := range keep {
		if k == lim {
			return true
		}
	}
	return false
}

// shrink moves the keys to a map of their own size and the heap to a slice of its own length,
// giving back the slots of the keys dropped since they were made (a map never shrinks, and its
// tombstones make it grow), which the table counted. Made again once half its keys have been
// dropped, the map costs O(1) a dropped key.
func (t *table) shrink() {
	keys := make(map[string]*rate.Limiter, len(t.keys))
	for k, lim := range t.keys {
		keys[k] = lim
	}
	t.keys, t.peak, t.drops = keys, len(keys), 0
	t.due = append(make([]due, 0, len(t.due)), t.due...)
}

// fullAt returns the instant, in Unix nanoseconds, from which lim's bucket may be full if it
// spends nothing more: now or earlier when it is full already, the largest int64 when it never
// will be. Full means the whole burst: a bucket dropped then is the same as a new one.
func fullAt(lim *rate.Limiter, now time.Time) int64 {
	tokens := lim.TokensAt(now)
	ns := now.UnixNano()
	missing := float64(lim.Burst()) - tokens
	if missing <= 0 {
		return ns
	}
	// At least a nanosecond on, since refill is truncated, and at most the largest int64, which
	// a refill of rate.InfDuration reaches.
	return ns + min(max(int64(refill(lim.Limit(), missing)), 1), math.MaxInt64-ns)
}

// refill returns how long a rate of limit takes to add missing tokens: 0 when none are missing,
// rate.InfDuration when the time does not fit a Duration or the rate is 0.
func refill(limit rate.Limit, missing float64) time.Duration {
	if missing <= 0 {
		return 0
	}
	ns := missing / float64(limit) * float64(time.Second) // +Inf at a rate of 0
	if ns >= float64(rate.InfDuration) {
		return rate.InfDuration
	}
	return time.Duration(ns)
}

// The heap, by hand: container/heap would box every element.

func (t *table) push(d due) {
	if len(t.due) == cap(t.due) {
		// Grown by as much as need counted: append would choose for itself.
		t.due = append(make([]due, 0, cap(t.due)+grownBy(cap(t.due))), t.due...)
	}
	t.due = append(t.due, d)
	i := len(t.due) - 1
	for i > 0 {
		parent := (i - 1) / 2
		if t.due[parent].at <= t.due[i].at {
			break
		}
		t.due[parent], t.due[i] = t.due[i], t.due[parent]
		i = parent
	}
}

func (t *table) pop() {
	n := len(t.due) - 1
	t.due[0] = t.due[n]
	t.due[n] = due{}
	t.due = t.due[:n]
	t.down(0)
}

func (t *table) down(i int) {
	n := len(t.due)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		m := l
		if r := l + 1; r < n && t.due[r].at < t.due[l].at {
			m = r
		}
		if t.due[i].at <= t.due[m].at {
			return
		}
		t.due[i], t.due[m] = t.due[m], t.due[i]
		i = m
	}
}

// heapify orders the heap: a sorted slice is one.
func (t *table) heapify() {
	slices.SortFunc(t.due, func(a, b due) int { return cmp.Compare(a.at, b.at) })
}
