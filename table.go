package retryafter

import (
	"encoding/binary"
	"math"
	"slices"
	"strings"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/time/rate"
)

// The key table of a TokenBucket: 64 independently locked parts, each an index from key to
// entry and a budget of bytes.
//
// An entry is one allocation that holds a key's rate.Limiter and, inline, the key itself when
// it has at most 15 bytes (an IPv4 address has at most 15), so that such a key costs nothing
// more than its bucket's 80 bytes and 16 of key, and is read in the same few cache lines. A key
// of 16 to 30 bytes (the /64 of an IPv6 client, "2001:db8:85a3:8d3::/64") is inline too, in an
// entry of 16 bytes more; a longer key is a string beside its entry. The index is open
// addressing with linear probing: a slot is a pointer to an entry and a byte of tag, 7 bits of
// the key's hash, which a probe compares before it reads the entry.
//
// A part keeps every key until a new one does not fit its budget. From then on it keeps a
// min-heap of all its keys by an instant at or before which each one's bucket cannot be full
// again (a lower bound: spending since only moves the true instant later). To make room it
// looks at the top: a key whose bucket has refilled is dropped; one that was spent since it was
// pushed goes back down with its true instant. Each key is pushed once, and goes back down at
// most once per request that spent it, so a new key at the bound costs O(log n), where a scan of
// the part would cost O(n) for every new key while held keys refill one at a time.

// shardCount is the number of independently locked parts of a TokenBucket's key table, and
// shardBits its logarithm: a key's part is the low bits of its hash, and its slot in the part's
// index the bits above them.
const (
	shardCount = 1 << shardBits
	shardBits  = 6
)

// defaultMaxMemory is the bound on the bytes a TokenBucket's table holds when no WithMaxMemory
// is given: nearly 1.5 million IPv4 clients.
const defaultMaxMemory = 192 << 20

// What a part counts for each key, an upper estimate so that the bound holds in bytes: its
// entry (entryBytes, an allocation of the allocator's size class of 96), its share of the index
// (indexBytes: a slot of 9 bytes at the lowest load the index has, 3/8, right after it
// doubles) and its place in the heap (heapBytes). A key longer than maxInline adds the 16
// bytes more of its entry (wideBytes, or longBytes for its string header) and, when it is
// longer than maxWide, its bytes, rounded up by the allocator: to a size class up to 32 KiB,
// some of which are 16 bytes or a seventh apart, beyond it to a page of 8 KiB; n + n/4 + 16
// covers both.
const (
	entryBytes = 96
	indexBytes = 24
	heapBytes  = 16
	keyBytes   = entryBytes + indexBytes + heapBytes
	wideBytes  = 16
	longBytes  = 16
)

// maxInline is the longest key an entry holds inline, and maxWide the longest a wideEntry
// holds; wideKey and longKey, in place of an inline key's length, mark the entry of a longer
// one.
const (
	maxInline = 15
	maxWide   = 2 * maxInline
	wideKey   = 0xfe
	longKey   = 0xff
)

// maxLoad is the most keys an index holds for each of its slots before it doubles, in
// sixteenths.
const maxLoad = 12

// maxFree is how many entries of dropped keys a part keeps for new keys, which then cost no
// allocation.
const maxFree = 64

// cost returns the bytes a part counts for key.
func cost(key string) int { return costOf(len(key)) }

// costOf returns the bytes a part counts for a key of n bytes.
func costOf(n int) int {
	switch {
	case n <= maxInline:
		return keyBytes
	case n <= maxWide:
		return keyBytes + wideBytes
	default:
		return keyBytes + longBytes + n + n/4 + 16
	}
}

// entry is a key of a part and its bucket, one allocation.
type entry struct {
	lim rate.Limiter
	// The key, when it has at most maxInline bytes, and its length in the last byte. For a
	// longer key, wideKey or longKey in the last byte: the entry is the first field of a
	// wideEntry or a longEntry.
	key [maxInline + 1]byte
}

// wideEntry is the entry of a key of more than maxInline bytes and at most maxWide: its first
// maxInline bytes in the entry's key, the others in more, and its length in more's last byte.
type wideEntry struct {
	entry
	more [maxInline + 1]byte
}

// longEntry is the entry of a key longer than maxWide.
type longEntry struct {
	entry
	long string
}

// is reports whether e is the entry of key.
func (e *entry) is(key string) bool {
	n := len(key)
	switch m := e.key[maxInline]; {
	case m <= maxInline:
		return int(m) == n && key == string(e.key[:n])
	case m == wideKey:
		w := (*wideEntry)(unsafe.Pointer(e))
		return int(w.more[maxInline]) == n && key[:maxInline] == string(e.key[:maxInline]) &&
			key[maxInline:] == string(w.more[:n-maxInline])
	case m == longKey:
		return (*longEntry)(unsafe.Pointer(e)).long == key
	}
	return false // no entry is marked otherwise: not read as a larger one than it is
}

// hash returns the hash of e's key.
func (e *entry) hash(seed *hashSeed) uint64 {
	switch m := e.key[maxInline]; {
	case m <= maxInline:
		return seed.sum(unsafe.String(&e.key[0], m)) // read, not kept
	case m == wideKey:
		w := (*wideEntry)(unsafe.Pointer(e))
		var key [maxWide]byte
		copy(key[:], e.key[:maxInline])
		n := maxInline + copy(key[maxInline:], w.more[:w.more[maxInline]-maxInline])
		return seed.sum(unsafe.String(&key[0], n))
	}
	return seed.sum((*longEntry)(unsafe.Pointer(e)).long)
}

// cost returns the bytes a part counts for e's key.
func (e *entry) cost() int { return costOf(e.keyLen()) }

// keyLen returns the length of e's key.
func (e *entry) keyLen() int {
	switch m := e.key[maxInline]; {
	case m <= maxInline:
		return int(m)
	case m == wideKey:
		return int((*wideEntry)(unsafe.Pointer(e)).more[maxInline])
	}
	return len((*longEntry)(unsafe.Pointer(e)).long)
}

// part is one independently locked part of a TokenBucket's key table.
type part struct {
	partFields
	// Whole cache lines a part, so that parts do not share one, on 32-bit platforms too.
	_ [(cacheLine - unsafe.Sizeof(partFields{})%cacheLine) % cacheLine]byte
}

// cacheLine is the size of a cache line on the platforms that matter most for speed.
const cacheLine = 64

// partFields are the fields of a part.
type partFields struct {
	mu     sync.Mutex
	latest time.Time // the latest instant a Decide in this part was made at
	// The entry of the key get found twice in a row last, and the hash of the key it looked up
	// last: a key of 8 to 15 bytes that many requests share (a client in a burst) skips the
	// index. The entry is kept only once its key comes twice in a row, so that a stream of
	// distinct keys stores no pointer, which the collector would have to see. Both sit on the
	// cache line of the lock, which every decision writes anyway.
	last     *entry
	lastHash uint64
	tags     []uint8   // for each slot of index: 0 when it is empty, else its key's tag
	index    []*entry  // a power of two of slots
	held     int       // the keys held
	used     int       // the bytes counted for the keys held and the spare entries
	due      []dueKey  // from the first time the part is full: every key, a min-heap by at
	free     []*entry  // entries of dropped keys, their buckets full, for new keys
	full     time.Time // no key will have refilled before this instant
}

// minSlots is the size of a part's index when it holds no key.
const minSlots = 8

func (p *part) init() {
	p.tags = make([]uint8, minSlots)
	p.index = make([]*entry, minSlots)
}

// slot returns the slot of a key of hash h in an index of mask+1 slots, where a probe for it
// starts: the bits of h above those that chose its part.
func slot(h, mask uint64) uint64 { return h >> shardBits & mask }

// tag returns the tag of a key of hash h in an index: never 0, which marks an empty slot.
func tag(h uint64) uint8 { return uint8(h>>57) | 0x80 }

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
		return p.behind(now)
	}
	p.latest = now
	return now
}

// behind is at for a now before the latest instant p has seen.
func (p *part) behind(now time.Time) time.Time {
	if p.latest.Sub(now) <= maxLag || now != now.Round(0) {
		return p.latest
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
	n := len(key)
	if n < 8 || n > maxInline {
		return p.find(h, key)
	}
	// A key of 8 to 15 bytes, most IPv4 addresses: its first and its last 8 bytes, which
	// overlap, against the same bytes of each entry, where comparing strings costs a call.
	first, last := words(key)
	if e := p.last; e != nil && e.holds(n, first, last) {
		return &e.lim, true
	}
	mask := uint64(len(p.tags) - 1)
	t := tag(h)
	for i := slot(h, mask); ; i = (i + 1) & mask {
		switch p.tags[i] {
		case 0:
			p.lastHash = h
			return nil, false
		case t:
			if e := p.index[i]; e.holds(n, first, last) {
				if h == p.lastHash {
					p.last = e
				}
				p.lastHash = h
				return &e.lim, true
			}
		}
	}
}

// holds reports whether e is the entry of a key of n bytes, 8 to maxInline, whose first and
// last 8 bytes are first and last.
func (e *entry) holds(n int, first, last uint64) bool {
	return e.key[maxInline] == uint8(n) && binary.LittleEndian.Uint64(e.key[:]) == first &&
		binary.LittleEndian.Uint64(e.key[n-8:]) == last
}

// find is get for any key.
func (p *part) find(h uint64, key string) (*rate.Limiter, bool) {
	mask := uint64(len(p.tags) - 1)
	t := tag(h)
	for i := slot(h, mask); ; i = (i + 1) & mask {
		switch p.tags[i] {
		case 0:
			return nil, false
		case t:
			if e := p.index[i]; e.is(key) {
				return &e.lim, true
			}
		}
	}
}

// insert puts e, whose key has hash h and is not in p, in p's index, first doubling it when it
// is too full.
func (p *part) insert(h uint64, e *entry, seed *hashSeed) {
	if (p.held+1)*16 > len(p.tags)*maxLoad {
		p.resize(2*len(p.tags), seed)
	}
	p.place(h, e)
}

// place puts e, of hash h, in the first empty slot from its own.
func (p *part) place(h uint64, e *entry) {
	mask := uint64(len(p.tags) - 1)
	i := slot(h, mask)
	for p.tags[i] != 0 {
		i = (i + 1) & mask
	}
	p.tags[i], p.index[i] = tag(h), e
}

// resize moves p's index to n slots.
func (p *part) resize(n int, seed *hashSeed) {
	old := p.index
	p.tags, p.index = make([]uint8, n), make([]*entry, n)
	for _, e := range old {
		if e != nil {
			p.place(e.hash(seed), e)
		}
	}
}

// remove takes e out of p's index.
func (p *part) remove(e *entry, seed *hashSeed) {
	if p.last == e {
		p.last = nil
	}
	mask := uint64(len(p.tags) - 1)
	i := slot(e.hash(seed), mask)
	for p.index[i] != e {
		i = (i + 1) & mask
	}
	// Linear probing's deletion: each entry after the hole, up to an empty slot, moves into it
	// unless its own slot is cyclically after the hole, so that every probe still finds it.
	for j := (i + 1) & mask; p.tags[j] != 0; j = (j + 1) & mask {
		home := slot(p.index[j].hash(seed), mask)
		if (j-home)&mask >= (j-i)&mask {
			p.tags[i], p.index[i] = p.tags[j], p.index[j]
			i = j
		}
	}
	p.tags[i], p.index[i] = 0, nil
}

// dueKey is an entry of a part's heap and an instant at or before which its bucket cannot be
// full.
type dueKey struct {
	at int64 // Unix nanoseconds
	e  *entry
}

// add creates the bucket of key, of hash h, a key new to p, which the caller has locked. When p
// has no room and none of its keys has refilled, it returns nil and how long until the first
// may have. The buckets of keep, which the caller's decision holds (the earlier layers of an
// All), are not dropped to make room, whether or not they have refilled.
func (b *TokenBucket) add(p *part, h uint64, key string, now time.Time, keep []*rate.Limiter) (*rate.Limiter, time.Duration) {
	need := cost(key)
	if p.used+need > b.budget {
		if wait := b.makeRoom(p, need, now, keep); wait > 0 {
			return nil, wait
		}
	}
	if n := len(p.free); n > 0 && p.free[n-1].lim.TokensAt(now) < float64(b.burst) {
		// A spare that is not full was spent after it was dropped, which keep prevents for the
		// layers of one decision: should it happen all the same, it goes.
		p.takeSpare()
	}
	var e *entry
	switch n := len(p.free); {
	case len(key) > maxWide:
		// A copy, so that a key cut from a long header does not keep the header alive.
		l := &longEntry{long: strings.Clone(key)}
		e = &l.entry
		e.key[maxInline] = longKey
		b.fill(&e.lim, now)
	case len(key) > maxInline:
		w := new(wideEntry)
		e = &w.entry
		copy(e.key[:], key[:maxInline])
		e.key[maxInline] = wideKey
		copy(w.more[:], key[maxInline:])
		w.more[maxInline] = uint8(len(key))
		b.fill(&e.lim, now)
	case n > 0:
		// A refilled bucket is the same as a new one: full, whenever it last spent.
		e = p.takeSpare()
	default:
		e = new(entry)
		b.fill(&e.lim, now)
	}
	if len(key) <= maxInline {
		copy(e.key[:], key)
		e.key[maxInline] = uint8(len(key))
	}
	p.insert(h, e, &b.seed)
	p.held++
	p.used += need
	if p.due != nil {
		p.push(dueKey{at: now.UnixNano(), e: e})
	}
	return &e.lim, 0
}

// fill makes lim, a zero rate.Limiter, what rate.NewLimiter(b.limit, b.burst) returns, in
// place (a rate.Limiter holds a mutex, and is not to be copied): with b's burst, no rate, and
// then an infinite one, so that a nanosecond later it holds the whole burst, it takes b's rate
// at t.
func (b *TokenBucket) fill(lim *rate.Limiter, t time.Time) {
	before := t.Add(-1)
	lim.SetBurstAt(before, b.burst)
	lim.SetLimitAt(before, rate.Inf)
	lim.SetLimitAt(t, b.limit)
}

// makeRoom drops keys of p whose bucket is full at now, and when none is, the spare entries it
// keeps, until need more bytes fit its budget, and returns 0, or, when too few have refilled,
// how long until the next one may have. It neither drops the buckets of keep nor counts on them
// refilling: they go back in the heap, due now at the latest.
func (b *TokenBucket) makeRoom(p *part, need int, now time.Time, keep []*rate.Limiter) time.Duration {
	if need > b.budget {
		return rate.InfDuration // a key longer than a part's budget never fits
	}
	if now.Before(p.full) {
		return p.full.Sub(now)
	}
	if p.due == nil {
		// Room for as many keys as the budget can ever count, so that it never grows.
		p.due = make([]dueKey, 0, b.budget/keyBytes)
		for _, e := range p.index {
			if e != nil {
				p.due = append(p.due, dueKey{at: b.fullAt(&e.lim, now), e: e})
			}
		}
		p.heapify()
	}
	ns := now.UnixNano()
	var kept [maxLayers]dueKey // the keys of keep met at the top, out of the heap meanwhile
	n := 0
	defer func() {
		for _, d := range kept[:n] {
			// Due now at the latest: the decision may give back what it spent from them,
			// which makes them full sooner than their place said.
			d.at = min(d.at, ns)
			p.push(d)
		}
	}()
	for p.used+need-p.spare(need) > b.budget {
		if len(p.due) > 0 && slices.Contains(keep, &p.due[0].e.lim) {
			kept[n] = p.due[0]
			n++
			p.pop()
			continue
		}
		if len(p.due) == 0 || p.due[0].at > ns {
			// No key held can make room now. The spare entries, kept only to save new keys an
			// allocation, give way before a new key is refused; once the last key is dropped
			// they are all that is left, and since need fits the budget, enough.
			if len(p.free) > 0 {
				p.takeSpare()
				continue
			}
			if len(p.due) == 0 {
				return rate.InfDuration // every key left is one keep holds
			}
			full := time.Unix(0, p.due[0].at)
			if n == 0 {
				p.full = full // else a key of keep may have refilled already, for others
			}
			return full.Sub(now)
		}
		top := &p.due[0]
		e := top.e
		if at := b.fullAt(&e.lim, now); at > ns {
			// Spent since it was pushed: down again, with the instant it will be full.
			top.at = at
			p.down(0)
			continue
		}
		p.remove(e, &b.seed)
		p.held--
		p.used -= e.cost()
		if e.key[maxInline] <= maxInline && len(p.free) < maxFree {
			p.free = append(p.free, e)
			p.used += entryBytes
		}
		p.pop()
	}
	return 0
}

// takeSpare takes the last of p's spare entries, which it no longer counts, and returns it.
func (p *part) takeSpare() *entry {
	n := len(p.free) - 1
	e := p.free[n]
	p.free[n] = nil
	p.free = p.free[:n]
	p.used -= entryBytes
	return e
}

// spare returns the bytes counted for the entry a new key of p, of need bytes, would take from
// its spares: that room is the new key's. A key longer than maxInline takes none, since its
// entry is larger.
func (p *part) spare(need int) int {
	if len(p.free) > 0 && need == keyBytes {
		return entryBytes
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
		n += p.held
		p.mu.Unlock()
	}
	return n
}

// WithMaxMemory bounds the bytes a [TokenBucket]'s table holds, whatever its key function
// returns: it counts each key of up to 15 bytes (an IPv4 address) as 136 bytes, its bucket and
// the key in one allocation of 96 and its place in the table's index and heap, an upper
// estimate; a key of 16 to 30 bytes (the /64 of an IPv6 client) as 152; a longer key as 168
// bytes plus its length and a quarter. The default is 192 MiB, nearly 1.5 million IPv4 clients.
//
// The table keeps every key until a new one does not fit, so that a client that comes back
// finds its bucket. Then keys whose bucket has refilled make room; when none has, the new key is
// refused with 429 and a Retry-After of when the first may have, so that no client over its
// limit is ever admitted to make room for another. That Retry-After is the one answer of the
// package that is an estimate rather than exact: the held key it counts on may spend again
// meanwhile, or another new key may take its place first, and the client is then refused
// again. The table is split in 64 independently locked parts of bytes/64 each, so a new key can
// meet a full part a little before the whole table is full. In an [All] whose layers share a
// TokenBucket, the keys of one request never make room for each other: a request whose keys
// need more room in one part than it will ever have is refused with no Retry-After. It panics
// if bytes is below 16 KiB.
func WithMaxMemory(bytes int) TokenBucketOption {
	if bytes < 16<<10 {
		panic("retryafter: WithMaxMemory below 16 KiB")
	}
	return func(c *bucketConfig) { c.maxMemory = bytes }
}
