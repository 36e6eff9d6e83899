package redisstore

import (
	"context"
	"hash/maphash"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/time/rate"

	"github.com/retryafter/retryafter"
)

// DefaultRefusalMemory is the most memory, in bytes, that a [Store] spends remembering refusals
// when no [WithRefusalMemory] is given: 1 MiB, some 4,000 keys of 20 bytes.
const DefaultRefusalMemory = 1 << 20

// WithRefusalMemory sets the most memory, in bytes, that a Store spends remembering the
// refusals Redis gave it, so that it answers the requests they cover itself, without asking
// Redis; 0 turns that off. The default is [DefaultRefusalMemory], 1 MiB.
//
// When Redis refuses a request of cost c on a key, with the wait w, the Store remembers that the
// key refuses every request of cost c or more until w after the instant its answer arrived
// (on the local monotonic clock, or at the caller's instants with an injected clock), and
// answers those requests itself until then: refused, with the rest of the wait, and the
// Remaining and Reset that Redis would give if nothing else had spent the key's quota. The
// requests of other replicas can only spend the key's quota, never give it back, so they can
// only make Redis refuse longer, and the first request at the remembered instant goes to Redis,
// which tells the rest. The wait is timed from the answer's arrival, after Redis read its clock,
// so a remembered wait is never shorter than Redis's: a client that waits it out is not refused
// for having come back too early. It is longer by at most the round trip, so that in the last
// round trip before the instant a remembered refusal may refuse a request that Redis would
// admit, with a Retry-After of a second. Remembered refusals are answered while Redis is down too.
//
// When the key's bucket, as last seen, may hold the tokens of one request but not of two (its
// remembered wait just over, as at each token of a flood), one request goes to Redis, and the
// key's requests that come while it is in the air wait for its answer rather than each send
// their own: it most likely refuses them too, and they are answered from it as above, or else
// ask Redis themselves. So at each new token a replica asks Redis once, not once for every
// request of the round trip. They wait within the store's timeout (or their own deadline) in all:
// one that runs out of time, or whose round trip Redis fails, fails as a round trip of its own
// would have, or is decided locally (see [WithLocalFallback]); one that then asks Redis itself
// has what is left of the timeout, so that against a Redis slower than half the timeout it may
// fail where it would not have waited, a failure not counted against Redis's health. When the
// bucket may hold more, each request asks as it comes.
//
// An answer that Redis gave while the Store charged the key (a Charge sent, held back, or carried
// to Redis by another decision) is not remembered, since it may predate the charge and tell too
// short a wait; nor one given while the Store's own decision spent the key, for the same reason.
//
// What can make a remembered refusal refuse what Redis would admit, until its instant at the
// latest, never longer than the wait Redis gave:
//
//   - A [Store.Charge] that gives quota back (a negative cost, as [retryafter.All] does to undo
//     what a layer spent): the Store forgets its refusals of that key when it does so itself,
//     and a refusal that was in flight meanwhile is not remembered; one given back by another
//     Store (another replica, another Store on the same prefix) is not seen until the instant.
//   - A change of the policy on the key's prefix: a Store remembers only the refusals of its own
//     rate and burst, so a replica started with a new policy begins with none, but the replicas
//     still on the old one keep theirs. A key's own policy ([WithPolicyFunc]) is asked at each
//     request, and a refusal given at another is forgotten; but a replica whose policy function
//     has not yet learned of the change keeps the refusal it remembers.
//   - The key lost in Redis: a restart without persistence, a failover to a replica that lacks
//     the last writes, eviction under a maxmemory-policy of allkeys-*, deleted by hand, or
//     Redis's clock stepping forward (see "What Redis must keep" in the package doc).
//
// The memory is bounded by bytes as the in-memory table's is: each refusal takes its key's
// length, its policy's name and about 230 bytes. When a refusal would pass the budget, an
// eighth of it is made room for at once: refusals whose instant is over go first, then others at
// random, which then only cost a round trip again; so making room costs about the same per
// refusal whatever the budget. It panics if bytes is negative.
func WithRefusalMemory(bytes int) Option {
	if bytes < 0 {
		panic("redisstore: WithRefusalMemory below 0")
	}
	return func(s *Store) { s.refusals = newRefusals(bytes) }
}

// refusalShards is how many independently locked parts a refusals divides its keys into.
const refusalShards = 16

// refusalBytes is what one remembered refusal costs besides its key's bytes: the entry and its
// share of the map, which grows by doubling, at the map's lowest load; measured by
// TestRefusalBytes (203 to 218 bytes on a 64-bit platform, up to 306 on a 32-bit one, where the
// smaller entries are held in the map's slots, a half-empty map's too).
const refusalBytes = 232 + 3*(64-bits.UintSize)

// refusals remembers, per key, that a request of cost at least c is refused until an instant.
type refusals struct {
	total  int // bytes, WithRefusalMemory's
	budget int // per shard, bytes
	// answered counts the requests the memory answered, for the Store's LocalAnswers.
	answered atomic.Uint64
	// group says whether the refusals are a group's: keyed by the request's key rather than a
	// Store's own, each covers only the cost it refused (the layer that binds may change with the
	// cost), and a refund in any layer's Store invalidates them all (answer takes the count).
	group  bool
	seed   maphash.Seed
	shards [refusalShards]refusalShard
	// gens and changing count, for the keys 256 ways, the changes the Store made to their
	// buckets in Redis and those in flight (see ticket).
	gens     [refusalGens]atomic.Uint64
	changing [refusalGens]atomic.Int32
}

// refusalGens is how many counters of changes a refusals keeps for its keys (see ticket).
const refusalGens = 256

type refusalShard struct {
	mu    sync.Mutex
	n     atomic.Int32 // len(m), read without the lock
	m     map[string]refusal
	bytes int
}

// A refusal is what a Store remembers of one refusal of a key: that the key's bucket was to be
// full no sooner than d after the instant learned, which the requests of other replicas can only
// put off. A request of cost n at a later instant at is then refused if the bucket lacks n tokens
// even so: d - (at - learned) + n*interval > horizon, with the wait the excess, to Redis's
// microsecond.
type refusal struct {
	cost     int   // the refused cost (a group's refusal covers only it)
	learned  int64 // the instant its answer arrived (see Store.instant)
	until    int64 // the instant from which the refused request would be admitted
	valid    int64 // a group's: the instant until which it covers the refused cost
	d        int64 // nanoseconds the key's bucket was to be full in, at learned
	interval int64 // of the layer that refused
	horizon  int64
	burst    int
	sharing  int                 // a group's: the layers spending in the refusing layer's key (see group.sharing)
	plans    uint64              // the fingerprint of the plans it was given at (see plan.mix)
	dec      retryafter.Decision // what Redis answered
	refunds  uint64              // the count of refunds when the request was sent (group only)
	flight   *flight             // the key's round trip in the air, if one is (see board)
}

// expires returns the instant after which e covers no request: its bucket is full then, and
// for a group the refused request is admitted.
func (e *refusal) expires() int64 {
	if e.valid > 0 {
		return e.valid
	}
	return e.learned + e.d
}

// newRefusals returns a memory of refusals of at most budget bytes, or nil for none.
func newRefusals(budget int) *refusals {
	if budget <= 0 {
		return nil
	}
	r := &refusals{total: budget, budget: max(budget/refusalShards, 1), seed: maphash.MakeSeed()}
	for i := range r.shards {
		r.shards[i].m = map[string]refusal{}
	}
	return r
}

func (r *refusals) shard(key string) *refusalShard {
	return &r.shards[maphash.String(r.seed, key)%refusalShards]
}

// answer returns, if a refusal of key covers a request of cost at the instant at, the Decision
// Redis would give it then if nothing else had spent the key's quota. refunds is the count of
// refunds now, for a group's memory, and plans the fingerprint of the request's plans: a
// refusal given at other plans is forgotten.
func (r *refusals) answer(key string, cost int, at int64, refunds, plans uint64) (retryafter.Decision, bool) {
	sh := r.shard(key)
	if sh.n.Load() == 0 {
		return retryafter.Decision{}, false
	}
	sh.mu.Lock()
	e, ok := sh.m[key]
	if ok && (at >= e.expires() || e.plans != plans || r.group && e.refunds != refunds) {
		sh.remove(key, e)
		ok = false
	}
	sh.mu.Unlock()
	if !ok || at < e.learned {
		return retryafter.Decision{}, false
	}
	d := e.dec
	d.Allowed = false
	left := max(e.d-(at-e.learned), 0)
	switch {
	case r.group:
		if cost != e.cost || at >= e.valid {
			return retryafter.Decision{}, false
		}
		d.RetryAfter = time.Duration(e.until - at)
	case cost > e.burst:
		d.RetryAfter = rate.InfDuration
	default:
		over := left - e.horizon + int64(cost)*e.interval
		if over <= 0 {
			return retryafter.Decision{}, false
		}
		d.RetryAfter = time.Duration((over+999)/1000) * time.Microsecond
	}
	d.Remaining = int(max(e.horizon-left, 0)/e.interval) / max(e.sharing, 1)
	d.Reset = time.Duration((left+999)/1000) * time.Microsecond
	return d, true
}

// testHookBoarded, if set, is called when a request of a Store or a Leased starts to wait for a
// flight.
var testHookBoarded func(context.Context)

// board returns, if key's remembered bucket holds the cost tokens of a request at the instant at
// but not twice as many (so that it may admit this request, but not a second), a flight to take:
// the key's round trip in the air, to wait for, or a new one, which the caller leads and must
// land. The key's requests that come while a round trip is in the air would most likely be
// refused by its answer: they wait for it rather than each ask Redis. It returns nil if the
// bucket may hold more, or nothing is remembered of key.
func (r *refusals) board(key string, cost int, at int64, plans uint64) (f *flight, lead bool) {
	sh := r.shard(key)
	if cost <= 0 || r.group || sh.n.Load() == 0 {
		return nil, false
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e, ok := sh.m[key]
	if !ok || e.plans != plans || at < e.learned || at >= e.expires() || cost > e.burst {
		return nil, false
	}
	if e.d-(at-e.learned)-e.horizon+2*int64(cost)*e.interval <= 0 {
		return nil, false // room for two: each asks
	}
	if e.flight != nil {
		return e.flight, false
	}
	e.flight = &flight{done: make(chan struct{})}
	sh.m[key] = e
	return e.flight, true
}

// land ends a's flight, if a led one, once its answer is remembered, with the failure of Redis
// that it met, if any, which its waiters share.
func (r *refusals) land(a *ask) {
	f := a.lead
	if f == nil {
		return
	}
	sh := r.shard(a.key)
	sh.mu.Lock()
	if e, ok := sh.m[a.key]; ok && e.flight == f {
		e.flight = nil
		sh.m[a.key] = e
	}
	sh.mu.Unlock()
	f.err, f.down = a.failure, a.failure != nil
	close(f.done)
}

// A ticket is what the answer to a round trip on a key needs to be taken into the memory: the
// count of the changes that the Store made to the key's bucket in Redis (its charges, sent or
// held back, its refunds, and the decisions that spent it) when the round trip was sent, and how
// many of those in flight on the key's counter were its own. An answer is taken only if no
// change was made since, and none but its own is in flight (see valid): an answer that Redis
// gave before a change lacks it, and would tell too short a wait. The keys share 256 counters,
// so that a change to another key of the same counter costs an answer, no more.
type ticket struct {
	i   int
	gen uint64
	own int32
}

// ticket returns the ticket of a round trip on key, own saying whether a change in flight on
// key is the round trip's own (see begin).
func (r *refusals) ticket(key string, own bool) ticket {
	t := ticket{i: r.counter(key)}
	t.gen = r.gens[t.i].Load()
	if own {
		t.own = 1
	}
	return t
}

// valid reports whether an answer to the round trip of t may be taken.
func (r *refusals) valid(t ticket) bool {
	return r.gens[t.i].Load() == t.gen && r.changing[t.i].Load() == t.own
}

// counter returns the index of key's counters of changes (see ticket).
func (r *refusals) counter(key string) int {
	return int(maphash.String(r.seed, key) >> 32 % refusalGens)
}

// changed counts a change made to key's bucket (see ticket).
func (r *refusals) changed(key string) { r.gens[r.counter(key)].Add(1) }

// begin counts a change to key's bucket in flight, until end: a charge sent, or held back and
// taken to be sent.
func (r *refusals) begin(key string) { r.changing[r.counter(key)].Add(1) }

// end counts the change in flight on key that begin counted as made.
func (r *refusals) end(key string) {
	i := r.counter(key)
	r.gens[i].Add(1)
	r.changing[i].Add(-1)
}

// remember records e as key's refusal, in place of any before, if the ticket t of its round
// trip is still valid.
func (r *refusals) remember(key string, e refusal, t ticket) {
	sh := r.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if !r.valid(t) {
		return // the answer may predate a change: what is remembered, if anything, is newer
	}
	if old, ok := sh.m[key]; ok {
		sh.remove(key, old)
	}
	size := e.size(key)
	if sh.bytes+size > r.budget {
		sh.makeRoom(r.budget-r.budget/8-size, e.learned)
		if sh.bytes+size > r.budget {
			return // a key longer than the budget
		}
	}
	sh.m[key] = e
	sh.bytes += size
	sh.n.Store(int32(len(sh.m)))
}

// refresh replaces key's refusal, if it has one, by e: an answer of Redis's for it since, to a
// round trip that spent the key's quota. If the ticket t of that round trip is no longer valid,
// it forgets the refusal instead: the answer may predate a change, and what is remembered may
// lack the spending.
func (r *refusals) refresh(key string, e refusal, t ticket) {
	if r.shard(key).n.Load() == 0 {
		return
	}
	sh := r.shard(key)
	sh.mu.Lock()
	old, ok := sh.m[key]
	if ok {
		if e.plans == old.plans && r.valid(t) {
			e.dec.Policy = old.dec.Policy
			sh.m[key] = e
			sh.bytes += e.size(key) - old.size(key)
		} else {
			sh.remove(key, old)
		}
	}
	sh.mu.Unlock()
}

// forget drops key's refusal.
func (r *refusals) forget(key string) {
	sh := r.shard(key)
	if sh.n.Load() == 0 {
		return
	}
	sh.mu.Lock()
	if e, ok := sh.m[key]; ok {
		sh.remove(key, e)
	}
	sh.mu.Unlock()
}

// makeRoom removes refusals from sh, locked, until it holds at most to bytes: first those over
// at the instant at, then others at random, as Go's maps range. Each call walks the whole shard,
// so it makes room for an eighth of the budget at once (see remember): a walk every eighth of a
// shard's refusals, about the same cost per refusal whatever the budget.
func (sh *refusalShard) makeRoom(to int, at int64) {
	for k, old := range sh.m {
		if old.expires() <= at {
			sh.remove(k, old)
		}
	}
	for k, old := range sh.m {
		if sh.bytes <= to {
			break
		}
		sh.remove(k, old)
	}
}

// remove deletes key, whose entry is e, with sh locked.
func (sh *refusalShard) remove(key string, e refusal) {
	delete(sh.m, key)
	sh.bytes -= e.size(key)
	sh.n.Store(int32(len(sh.m)))
}

// decisionBytes is what one Decision of a group's layers takes, besides its policy's name.
const decisionBytes = int(unsafe.Sizeof(retryafter.Decision{}))

// sliceBytes is what a slice header takes: three words, 24 bytes on 64-bit platforms and 12 on
// 32-bit ones.
const sliceBytes = int(unsafe.Sizeof([]retryafter.Decision(nil)))

// heapBytes returns at least what an allocation of n bytes takes of the heap. Go rounds it up to
// its size class, which wastes at most an eighth of the class, so the class is at most 8/7 of n:
// an eighth of n is short where n lies just above a class (897 bytes take 1024).
func heapBytes(n int) int { return n + (n+6)/7 }

// size returns the bytes that e, remembered for key, holds: its key, its entry and share of the
// map, and what its Decision points to, the names of its policies and its layers.
func (e *refusal) size(key string) int {
	n := len(key) + refusalBytes + len(e.dec.Policy.Name)
	if ls := e.dec.Layers(); ls != nil {
		// The list is one allocation with room for two Decisions, the usual All; more take an
		// array of their own (see edge.Binding).
		n += heapBytes(sliceBytes + 2*decisionBytes)
		if cap(ls) > 2 {
			n += heapBytes(cap(ls) * decisionBytes)
		}
		for _, l := range ls {
			n += len(l.Policy.Name)
		}
	}
	return n
}

// LocalAnswers returns how many requests the store has answered from a refusal it remembered,
// without asking Redis (see [WithRefusalMemory]), its combined decisions (as the first layer)
// included: a counter, for metrics.
func (s *Store) LocalAnswers() uint64 {
	if s.refusals == nil {
		return 0
	}
	return s.refusals.answered.Load()
}

// charged records that key was charged, or given quota back, so that its remembered refusal,
// those of the groups of the Store, and the answers in flight meanwhile would tell a wrong wait.
func (s *Store) charged(key string) {
	s.changes.Add(1)
	if s.refusals != nil {
		s.refusals.changed(key)
		s.refusals.forget(key)
	}
}

// recall answers a from the memory of refusals (done), or leaves it to Redis: as the lead of the
// key's flight (a.lead), or after waiting for another's flight that did not answer it, with
// what is left of the wait's budget (a.timeout).
func (s *Store) recall(ctx context.Context, a *ask) (_ retryafter.Decision, done bool, _ error) {
	a.sig = a.plan.mix(0)
	if d, ok := s.refusals.answer(a.key, a.cost, a.at, 0, a.sig); ok {
		s.refusals.answered.Add(1)
		return d, true, nil
	}
	f, lead := s.refusals.board(a.key, a.cost, a.at, a.sig)
	if lead {
		a.lead = f
	}
	if lead || f == nil {
		return retryafter.Decision{}, false, nil
	}
	b := s.budget(ctx)
	if d, ok, err := s.ride(ctx, b, f, a); ok {
		return d, true, err
	}
	if !b.own { // then ctx's deadline is the sooner, which newRoundTrip reads
		if a.timeout = time.Until(b.deadline); a.timeout <= 0 {
			d, err := b.outOfTime(ctx, &s.local, &a.request)
			return d, true, err
		}
	}
	return retryafter.Decision{}, false, nil
}

// learn takes into the memory of refusals what Redis answered to a, res and its Decision d: an
// admission that spent the key refreshes what is remembered, a refusal whose wait is known is
// remembered (see WithRefusalMemory), if a's ticket is still valid.
func (s *Store) learn(a *ask, res []int64, d retryafter.Decision) {
	// Timed from the answer's arrival, which is after Redis's reading: so a remembered wait is
	// never shorter than Redis's (see WithRefusalMemory).
	pl := &a.plan
	e := refusal{cost: a.cost, learned: s.instant(a.now), d: res[3], interval: pl.interval, horizon: pl.horizon(), burst: pl.policy.Burst, plans: a.sig, dec: d}
	switch {
	case d.Allowed && a.cost > 0:
		s.changes.Add(1)
		s.refusals.refresh(a.key, e, a.ticket) // the request spent what the refusal remembered did not
		s.refusals.changed(a.key)              // for the answers in flight meanwhile, which lack it
	case !d.Allowed && d.RetryAfter < rate.InfDuration:
		s.refusals.remember(a.key, e, a.ticket)
	}
}

// ride waits, within the budget b, for f, the round trip in the air of another request of a's
// key (see refusals.board), and answers a as what that round trip taught the memory of
// refusals says (ok); if the memory does not cover it, not (!ok), and the request then asks
// Redis itself, within what is left of b. A round trip that met a failure of Redis fails the
// requests waiting on it with its error (or has them decided locally, as it was), rather than
// send them into the same failure.
func (s *Store) ride(ctx context.Context, b budget, f *flight, a *ask) (_ retryafter.Decision, ok bool, _ error) {
	if testHookBoarded != nil {
		testHookBoarded(ctx)
	}
	if !b.wait(f) {
		d, err := b.outOfTime(ctx, &s.local, &a.request)
		return d, true, err
	}
	if f.err != nil && f.down {
		d, err := s.local.decide(ctx, &a.request, f.err)
		return d, true, err
	}
	if d, ok := s.refusals.answer(a.key, a.cost, s.instant(a.now), 0, a.sig); ok {
		s.refusals.answered.Add(1)
		return d, true, nil
	}
	return retryafter.Decision{}, false, nil
}
