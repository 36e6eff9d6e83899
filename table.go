package retryafter

import (
	"math"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// The key table of a TokenBucket: 64 independently locked parts, each a map from key to bucket
// and a budget of bytes.
//
// A part keeps every key until a new one does not fit its budget. From then on it keeps a
// min-heap of all its keys by an instant at or before which each one's bucket cannot be full
// again (a lower bound: spending since only moves the true instant later). To make room it
// looks at the top: a key whose bucket has refilled is dropped; one that was spent since it was
// pushed goes back down with its true instant. Each key is pushed once, and goes back down at
// most once per request that spent it, so a new key at the bound costs O(log n), where a scan of
// the part would cost O(n) for every new key while held keys refill one at a time.

// shardCount is the number of independently locked parts of a TokenBucket's key table.
const shardCount = 64

// defaultMaxMemory is the bound on the bytes a TokenBucket's table holds when no WithMaxMemory
// is given: about a million IPv4 clients.
const defaultMaxMemory = 192 << 20

// keyBytes is what a part counts for each key besides the key's own bytes, an upper estimate so
// that the bound holds in bytes: its bucket (80), its map slot (24, and a byte of control) at
// the lowest load of a Go map's tables (7/16), its heap slot (24) and the rounding of the key's
// allocation to a size class (up to 16).
const keyBytes = bucketBytes + 57 + 24 + 15

// bucketBytes is the size of a rate.Limiter, which a part counts while it keeps one spare.
const bucketBytes = 80

// maxFree is how many buckets of dropped keys a part keeps for new keys, which then cost no
// allocation for their bucket.
const maxFree = 64

// part is one independently locked part of a TokenBucket's key table.
type part struct {
	mu     sync.Mutex
	keys   map[string]*rate.Limiter
	latest time.Time       // the latest instant a Decide in this part was made at
	used   int             // the bytes counted for the keys held
	due    []dueKey        // from the first time the part is full: every key, a min-heap by at
	free   []*rate.Limiter // buckets of dropped keys, full, for new keys
	full   time.Time       // no key will have refilled before this instant
	// The key decided twice in a row last, and its bucket: a key that many requests share (a
	// client in a burst, the one key of a Shared layer) skips the map under the lock. A key is
	// copied here, so that the part keeps no string of its caller's alive, only once it has
	// come twice in a row (seen by its hash), so that distinct keys cost one compare.
	lastLim  *rate.Limiter
	lastHash uint64
	lastSeen uint64 // the hash of the key looked up last
	lastLen  uint8
	lastKey  [31]byte
	_        [192 - 176]byte // three cache lines a part, so that parts do not share one
}

// at returns the instant p decides a request of the caller's now at, the latest it has seen,
// and records it. p must be locked.
//
// A clock without monotonic readings (an injected one, or a wall clock that was set back) can
// step back. Were p to wait for it to reach the latest instant again, every key of p would be
// frozen for the length of the step: so a now more than maxLag behind is taken as the clock's
// new reading. The buckets then count on from it, and each may have a burst's worth of tokens
// credited twice, once. time.Now's readings are monotonic, and never step back.
func (p *part) at(now time.Time) time.Time {
	if now.Before(p.latest) {
		if p.latest.Sub(now) <= maxLag || now != now.Round(0) {
			return p.latest
		}
	}
	p.latest = now
	return now
}

// maxLag is how far behind the latest instant a part has seen a reading can be and still be
// taken for a request that read the clock before another took the lock, rather than a step of
// the clock.
const maxLag = time.Second

// get returns the bucket of key, of hash h, if p holds it. p must be locked.
func (p *part) get(h uint64, key string) (*rate.Limiter, bool) {
	if h == p.lastHash && p.lastLim != nil && key == string(p.lastKey[:p.lastLen]) {
		return p.lastLim, true
	}
	lim, ok := p.keys[key]
	if ok && h == p.lastSeen && len(key) <= len(p.lastKey) {
		p.lastLim, p.lastHash, p.lastLen = lim, h, uint8(copy(p.lastKey[:], key))
	}
	p.lastSeen = h
	return lim, ok
}

// dueKey is a key of a part's heap and an instant at or before which its bucket cannot be full.
type dueKey struct {
	at  int64 // Unix nanoseconds
	key string
}

// cost returns the bytes a part counts for key.
func cost(key string) int { return keyBytes + len(key) }

// add creates the bucket of key, a key new to p, which the caller has locked. When p has no
// room and none of its keys has refilled, it returns nil and how long until the first may have.
func (b *TokenBucket) add(p *part, key string, now time.Time) (*rate.Limiter, time.Duration) {
	need := cost(key)
	if p.used+need > b.budget {
		if wait := b.makeRoom(p, need, now); wait > 0 {
			return nil, wait
		}
	}
	var lim *rate.Limiter
	if n := len(p.free); n > 0 {
		// A refilled bucket is the same as a new one: full, whenever it last spent.
		lim, p.free = p.free[n-1], p.free[:n-1]
		p.used -= bucketBytes // counted while spare
	} else {
		lim = rate.NewLimiter(b.limit, b.burst)
	}
	// A copy, so that a key cut from a long header does not keep the header alive.
	key = strings.Clone(key)
	p.keys[key] = lim
	p.used += need
	if p.due != nil {
		p.push(dueKey{at: now.UnixNano(), key: key})
	}
	return lim, 0
}

// makeRoom drops keys of p whose bucket is full at now, and when none is, the spare buckets it
// keeps, until need more bytes fit its budget, and returns 0, or, when too few have refilled, how
// long until the next one may have.
func (b *TokenBucket) makeRoom(p *part, need int, now time.Time) time.Duration {
	if need > b.budget {
		return rate.InfDuration // a key longer than a part's budget never fits
	}
	if now.Before(p.full) {
		return p.full.Sub(now)
	}
	if p.due == nil {
		// Room for as many keys as the budget can ever count, so that it never grows.
		p.due = make([]dueKey, 0, b.budget/keyBytes)
		for k, lim := range p.keys {
			p.due = append(p.due, dueKey{at: b.fullAt(lim, now), key: k})
		}
		p.heapify()
	}
	ns := now.UnixNano()
	for p.used+need-p.spare() > b.budget {
		if len(p.due) == 0 || p.due[0].at > ns {
			// No key held can make room now. The spare buckets, kept only to save new keys an
			// allocation, give way before a new key is refused; once the last key is dropped
			// they are all that is left, and since need fits the budget, enough.
			if n := len(p.free); n > 0 {
				p.free[n-1] = nil
				p.free = p.free[:n-1]
				p.used -= bucketBytes
				continue
			}
			p.full = time.Unix(0, p.due[0].at)
			return p.full.Sub(now)
		}
		top := &p.due[0]
		lim := p.keys[top.key]
		if at := b.fullAt(lim, now); at > ns {
			// Spent since it was pushed: down again, with the instant it will be full.
			top.at = at
			p.down(0)
			continue
		}
		delete(p.keys, top.key)
		if p.lastLim == lim {
			p.lastLim = nil
		}
		p.used -= cost(top.key)
		if len(p.free) < maxFree {
			p.free = append(p.free, lim)
			p.used += bucketBytes
		}
		p.pop()
	}
	return 0
}

// fullAt returns the instant, in Unix nanoseconds, from which lim's bucket may be full if it
// spends nothing more: now or earlier when it is full already, the largest int64 when it never
// will be. Full means the whole burst, not within the slack: a bucket dropped then is handed to
// a new key, and must be the same as a new one.
func (b *TokenBucket) fullAt(lim *rate.Limiter, now time.Time) int64 {
	tokens := lim.TokensAt(now)
	ns := now.UnixNano()
	if tokens >= float64(b.burst) {
		return ns
	}
	refill := b.refill(float64(b.burst) - tokens)
	if refill >= rate.InfDuration || int64(refill) >= math.MaxInt64-ns {
		return math.MaxInt64
	}
	return ns + max(int64(refill), 1) // at least a nanosecond on: refill is truncated
}

// spare returns the bytes counted for the bucket a new key of p would take from its spares: that
// room is the new key's.
func (p *part) spare() int {
	if len(p.free) > 0 {
		return bucketBytes
	}
	return 0
}

// The heap of a part, by hand: container/heap would box every element.

func (p *part) push(d dueKey) {
	p.due = append(p.due, d)
	i := len(p.due) - 1
	for i > 0 {
		parent := (i - 1) / 2
		if p.due[parent].at <= p.due[i].at {
			break
		}
		p.due[parent], p.due[i] = p.due[i], p.due[parent]
		i = parent
	}
}

func (p *part) pop() {
	n := len(p.due) - 1
	p.due[0] = p.due[n]
	p.due[n] = dueKey{}
	p.due = p.due[:n]
	p.down(0)
}

func (p *part) down(i int) {
	n := len(p.due)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		m := l
		if r := l + 1; r < n && p.due[r].at < p.due[l].at {
			m = r
		}
		if p.due[i].at <= p.due[m].at {
			return
		}
		p.due[i], p.due[m] = p.due[m], p.due[i]
		i = m
	}
}

func (p *part) heapify() {
	for i := len(p.due)/2 - 1; i >= 0; i-- {
		p.down(i)
	}
}

// Len returns the number of keys b holds state for.
func (b *TokenBucket) Len() int {
	n := 0
	for i := range b.parts {
		p := &b.parts[i]
		p.mu.Lock()
		n += len(p.keys)
		p.mu.Unlock()
	}
	return n
}

// WithMaxMemory bounds the bytes a [TokenBucket]'s table holds, whatever its key function
// returns: it counts each key as 176 bytes (its bucket, its map and heap slots, an upper
// estimate) plus the key's length. The default is 192 MiB, about a million IPv4 clients.
//
// The table keeps every key until a new one does not fit, so that a client that comes back
// finds its bucket. Then keys whose bucket has refilled make room; when none has, the new key is
// refused with 429 and a Retry-After of when the first may have, so that no client over its
// limit is ever admitted to make room for another. That Retry-After is the one answer of the
// package that is an estimate rather than exact: the held key it counts on may spend again
// meanwhile, or another new key may take its place first, and the client is then refused
// again. The table is split in 64 independently locked parts of bytes/64 each, so a new key can
// meet a full part a little before the whole table is full. It panics if bytes is below 16 KiB.
func WithMaxMemory(bytes int) TokenBucketOption {
	if bytes < 16<<10 {
		panic("retryafter: WithMaxMemory below 16 KiB")
	}
	return func(c *bucketConfig) { c.maxMemory = bytes }
}
