package redisstore

import (
	"context"
	_ "embed"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/retryafter/retryafter"
)

//go:embed lease.lua
var leaseLua string

// leaseScript gives back a replica's lease of a key, decides a request and takes a new lease,
// or charges, in one call (see lease.lua).
var leaseScript = newScript(assemble(leaseLua))

// maxLeaseKeys is the most keys a [Leased] holds a lease of, or knows the state of, at once;
// the requests of other keys are decided by its Store.
const maxLeaseKeys = 4096

// evictEvery is how many requests of keys beyond maxLeaseKeys pass between two searches for
// keys that a Leased may forget.
const evictEvery = 64

// A Leased is a [retryafter.Limiter] on a [Store]'s buckets in Redis, for a key so hot that one
// script call per request is what limits it (a [retryafter.Shared] layer of a whole fleet): each
// replica takes the key's tokens from Redis in lots, and admits the requests they cover itself,
// without a round trip. Tokens are spent in Redis when they are leased, so a fleet of Leased
// limiters never admits more than Redis's bucket gives out; [Store.Leased] says what it promises.
//
// A Leased is safe for concurrent use, holds no goroutine and needs no closing; [Leased.Release]
// gives its leases back, for a graceful shutdown.
type Leased struct {
	s       *Store
	lot     int
	maxKeys int          // maxLeaseKeys, but in tests
	leases  sync.Map     // key → *lease
	n       atomic.Int64 // entries in leases
	misses  atomic.Int64 // requests of keys beyond maxLeaseKeys
	trips   atomic.Uint64
}

// A lease is what a replica holds and knows of one key.
type lease struct {
	mu sync.Mutex
	// known says whether a round trip has told the key's state; learned is the instant it was
	// sent at (Store.instant), and full the instant from which the key's bucket in Redis is full
	// at the earliest: the requests of other replicas can only put it off (a give-back aside).
	// late is that instant timed from the answer's arrival instead, after Redis read its clock:
	// no earlier than the bucket's true one, for the waits the replica tells itself.
	known   bool
	learned int64
	full    int64
	late    int64
	// held is the lease: nanoseconds of the bucket's time that the replica took from Redis and
	// has not spent, held / interval tokens. It is never more than the time until full, so that
	// the bucket and the lease together never hold more than the burst.
	held   int64
	flight *flight // the round trip in flight on the key, if any
	gone   bool    // removed from leases: look the key up again
}

// A leaseOp is what one round trip asks of lease.lua.
type leaseOp struct {
	cost   int   // n
	lot    int   // the most tokens to take, n included
	back   int64 // nanoseconds given back first
	leased bool  // back is the lease's, to be held again if the call is never sent
	charge bool
}

// Leased returns a [Leased] limiter on s's buckets: its client, prefix, rate, burst, timeout,
// health and local fallback. Each key's bucket stays in Redis, where s and the Leased limiters of
// every replica spend it alike; lot is how many tokens a replica takes at once. The replicas'
// leases come out of one burst: keep lot × replicas below it, so that the others still find
// tokens when one takes its lot.
//
// A request that the replica's lease of its key covers is admitted at once, without asking Redis,
// and spends the lease. One that it does not cover goes to Redis in one script call, which gives
// back what is left of the lease, decides the request at Redis's clock as [Store.Decide] does,
// and, if it is admitted, takes for the replica as many of the bucket's tokens as it holds, up to
// max(lot, cost), the request's own included: all or nothing for the cost. The calls on one key
// are one at a time on each replica: the key's other requests wait for the call in flight and are
// answered from what it brought (the lease, or the refusal), or wait their turn to ask again;
// every request waits at most the store's timeout in all, and one that gets no answer in time
// fails as [Store.Decide] does. The requests waiting for a call that Redis fails (an error, or no
// answer within the timeout) fail with it, with its error: one piece of evidence, as the round
// trips in flight together are for the Store.
//
// Over-admission: every leased token was spent in Redis when it was leased, so over a run from a
// bucket without leases the fleet admits no more than a single Store would have (burst + rate ×
// the run's length); over any stretch of time, at most lot tokens more per replica, those of
// the leases held at its start, which Redis had counted before.
//
// Unused tokens: a lease never outlives the bucket it came from: it shrinks as the bucket, as the
// replica last saw it, refills, so that the bucket and the lease together never hold more than
// the burst, and it is gone by the time the bucket would be full. A replica that gets no more
// requests of the key holds at most lot tokens idle meanwhile; the next call it makes on the
// key gives back what is left, as does [Leased.Release]. A crash loses them: the bucket is then
// short of at most lot tokens per replica until it refills them at the key's rate. A round
// trip whose answer is lost (a timeout) may have given the lease back and taken a new one, so it
// can lose up to a lot the same way.
//
// Refusals and Retry-After: a refusal is Redis's, exact for its bucket once the replica's own
// lease is given back, or, without a round trip, the replica's own, when it holds nothing and the
// bucket as Redis last told it cannot hold the cost yet, with the exact rest of that wait. So
// Retry-After is longer than the wait of a single Store holding all the fleet's tokens by at most
// the tokens the other replicas hold in their leases (lot each, times the emission interval),
// which could admit the request sooner, and what they gave back since this replica last asked
// Redis. A request of the same cost sent to any replica once the Retry-After of Redis's refusal
// has passed is admitted unless requests spent the key's tokens meanwhile; after a refusal of the
// replica's own, unless they spent them since it last asked Redis (the request is then refused
// again, with the rest of the wait). A key lost in Redis meanwhile (see "What Redis must keep" in
// the package doc) is refused by the replica's own refusals until that wait is over, although
// Redis would admit it. A single replica decides every request, charge and refund
// exactly as its Store would (to the nanosecond, with the caller's clock of the tests).
//
// Remaining and Reset are those of the bucket that Redis and the replica's lease make together,
// as Redis last told it (refilled since, spent by this replica): Remaining may count tokens that
// other replicas have spent meanwhile. Limit is the burst and Policy the store's rate and burst.
//
// A cost of 0 (a peek) asks Redis, or the answer of the call in flight, since a lease cannot tell
// whether other replicas put the key into debt; it is refused without a round trip only when the
// replica knows the key to be in debt. A cost above the burst is refused with
// rate.InfDuration, without a round trip once the replica has learnt the key's state. A negative
// cost is an error wrapping [retryafter.ErrNegativeCost], decided without asking Redis. A cost
// above lot is taken whole, and leaves no lease.
//
// While Redis is down, the tokens a replica holds are still spent (they were counted in Redis),
// its refusals still answered; a request they do not cover fails as [Store.Decide] fails (an
// error wrapping [ErrUnavailable], at once while the store knows Redis to be down), or is decided
// by the store's local fallback ([WithLocalFallback]).
//
// A Leased holds a lease of, or knowledge about, at most 4,096 keys: it is for a few hot keys
// (a Shared layer), and the requests of further keys are decided by the Store itself, one round
// trip each, until keys whose leases have ended are forgotten. A Leased does not combine with
// Stores into one script ([Store.Combine] takes only Stores): in a [retryafter.All] it is decided
// on its own, before or after the Stores' round trip; it is a [retryafter.Charger], so All gives
// back through it (into the lease, without a round trip) what it spent on a request that another
// layer refused. All decides every layer of a request that one refuses, to tell the longest wait,
// so a request that the Leased refuses still costs the Stores' layers their round trip, and one
// more to give back what they spent (BENCHMARKS.md has the figures). The Store's own memory of refusals ([WithRefusalMemory]) does not see what a
// Leased gives back, as it does not see another replica's. At rate.Inf it admits every cost of 0
// or more, as s does.
//
// Leased panics if lot is below 1, or if s has a policy per key ([WithPolicyFunc]): a lease is
// of the Store's one rate and burst. A lot above the burst takes at most the burst.
func (s *Store) Leased(lot int) *Leased {
	if lot < 1 {
		panic("redisstore: Leased with a lot below 1")
	}
	if s.policyOf != nil {
		panic("redisstore: Leased of a Store with a policy per key")
	}
	return &Leased{s: s, lot: lot, maxKeys: maxLeaseKeys}
}

var (
	_ retryafter.Limiter = (*Leased)(nil)
	_ retryafter.Charger = (*Leased)(nil)
)

// RoundTrips returns how many script calls the Leased has made: a counter, for metrics.
func (l *Leased) RoundTrips() uint64 { return l.trips.Load() }

// Decide implements [retryafter.Limiter] as [Store.Leased] describes. now is used as
// [Store.Decide] uses it: with Redis's clock deciding, only for the instant the request is timed
// from on the local monotonic clock (which the lease and the remembered state of the key are
// reckoned on). ctx's values reach the client, and its deadline bounds the wait if it is sooner
// than the store's timeout; its cancellation does not.
func (l *Leased) Decide(ctx context.Context, key string, cost int, now time.Time) (retryafter.Decision, error) {
	s := l.s
	if cost < 0 {
		return retryafter.Decision{}, fmt.Errorf("redisstore: %w: %d", retryafter.ErrNegativeCost, cost)
	}
	if s.own.unlimited() {
		return retryafter.Decision{Allowed: true, Limit: s.own.policy.Burst, Remaining: s.own.policy.Burst, Policy: s.own.policy}, nil
	}
	r := leaseAsk{request: request{key, cost, now}, at: s.instant(now), b: s.budget(ctx)}
	for {
		e := l.entry(key, r.at)
		if e == nil {
			return s.Decide(ctx, key, cost, now)
		}
		e.mu.Lock()
		if e.gone {
			e.mu.Unlock()
			continue
		}
		if d, ok := l.answer(e, &r); ok {
			e.mu.Unlock()
			return d, nil
		}
		if f := e.flight; f != nil {
			e.mu.Unlock()
			if testHookBoarded != nil {
				testHookBoarded(ctx)
			}
			if !r.b.wait(f) {
				return r.b.outOfTime(ctx, &s.local, &r.request)
			}
			if f.err != nil && f.down {
				return s.local.decide(ctx, &r.request, f.err)
			}
			r.fresh = f.err == nil
			continue
		}
		return l.ask(ctx, e, &r)
	}
}

// A leaseAsk is one request of [Leased.Decide].
type leaseAsk struct {
	request
	at    int64 // now's instant (see Store.instant)
	b     budget
	fresh bool // a call that began after this request arrived answered the key
}

// answer answers r from what the replica holds and knows of its key, e, locked, if it can.
func (l *Leased) answer(e *lease, r *leaseAsk) (retryafter.Decision, bool) {
	own := &l.s.own
	need := int64(r.cost) * own.interval // read only for a cost within the burst: no overflow
	horizon := own.interval * int64(own.policy.Burst)
	t := max(r.at, e.learned) // the request is decided no earlier than what is known of the key
	left := e.settle(t)
	dp := left - e.held // the bucket and the lease together: d as a single Store would see it
	// A cost above the burst is never admitted: refused once the key is known, else by Redis.
	if r.cost > own.policy.Burst {
		return l.decision(false, dp, t-r.at, rate.InfDuration), e.known
	}
	switch {
	case r.cost > 0 && need <= e.held && dp-horizon+need <= 0: // not when in debt
		e.held -= need
		return l.decision(true, dp+need, t-r.at, 0), true
	case e.known && e.held == 0 && dp-horizon+need > 0:
		// Refused even if every token the replica last saw were still there, for as long as
		// the bucket timed from the answer's arrival says: never shorter than Redis's wait.
		late := max(e.late-t, 0)
		return l.decision(false, late, t-r.at, ceilMicro(late-horizon+need)), true
	case r.cost == 0 && r.fresh && e.known && (dp <= horizon || e.held == 0):
		// The answer of a call sent since the request arrived: as fresh as its own.
		wait := ceilMicro(max(dp-horizon, 0))
		return l.decision(wait == 0, dp, t-r.at, wait), true
	}
	return retryafter.Decision{}, false
}

// ask decides r in one round trip, which gives back e's lease (e locked, and unlocked on return)
// and takes a new one if the request is admitted.
func (l *Leased) ask(ctx context.Context, e *lease, r *leaseAsk) (retryafter.Decision, error) {
	s := l.s
	op := leaseOp{cost: r.cost}
	if r.cost <= s.own.policy.Burst {
		// The lease goes back with the request, which is then decided on the bucket a single
		// Store would hold; a peek takes nothing.
		op.back, op.leased = e.held, true
		e.held = 0
		if r.cost > 0 {
			op.lot = max(l.lot, r.cost)
		}
	}
	res, down, err := l.lead(ctx, e, r, op)
	if err != nil {
		e.mu.Unlock()
		return s.fail(ctx, &r.request, down, err)
	}
	allowed := res[0] == 1
	if allowed && r.cost > 0 {
		e.held += (res[1] - int64(r.cost)) * s.own.interval
	}
	wait := time.Duration(0)
	switch {
	case allowed:
	case res[2] < 0:
		wait = rate.InfDuration
	default:
		wait = time.Duration(res[2]) * time.Microsecond
	}
	d := l.decision(allowed, max(res[3]-e.held, 0), 0, wait)
	e.mu.Unlock()
	return d, nil
}

// Charge implements [retryafter.Charger] as [Store.Charge] does, on the bucket that Redis and the
// replica's lease of key make together: a cost the lease covers is spent from it, and a negative
// cost is given back into it (never beyond a full bucket, nor beyond lot tokens), without a round
// trip; otherwise one round trip gives back the lease and charges the bucket in Redis, into debt
// if need be, or gives back there what the lease cannot take. It fails as [Store.Charge] does. A
// charge whose answer was lost to the timeout may still have been made, and the lease given back.
func (l *Leased) Charge(ctx context.Context, key string, cost int, now time.Time) error {
	s := l.s
	if cost == 0 || s.own.unlimited() {
		return nil
	}
	r := leaseAsk{request: request{key, cost, now}, at: s.instant(now), b: s.budget(ctx)}
	for {
		e := l.entry(key, r.at)
		if e == nil {
			return s.Charge(ctx, key, cost, now)
		}
		e.mu.Lock()
		if e.gone {
			e.mu.Unlock()
			continue
		}
		if l.chargeLease(e, cost, r.at) {
			e.mu.Unlock()
			return nil
		}
		if f := e.flight; f != nil {
			e.mu.Unlock()
			if !r.b.wait(f) {
				return r.b.expired()
			}
			if f.err != nil && f.down {
				return s.local.charge(ctx, key, cost, now, f.err)
			}
			continue
		}
		return l.chargeRedis(ctx, e, &r)
	}
}

// chargeLease charges cost to e's lease, locked, at the instant at, and reports whether it could:
// a cost the lease covers, or a refund that fits in it, neither of which exceeds the burst.
func (l *Leased) chargeLease(e *lease, cost int, at int64) bool {
	if burst := l.s.own.policy.Burst; cost > burst || cost < -burst {
		return false // and cost times the interval might not fit an int64
	}
	amount := int64(cost) * l.s.own.interval // negative for a refund
	left := e.settle(max(at, e.learned))
	switch {
	case cost > 0 && amount <= e.held:
		e.held -= amount
		return true
	case cost < 0 && e.known && min(e.held-amount, left) <= int64(l.lot)*l.s.own.interval:
		e.held = min(e.held-amount, left) // the rest would overfill the bucket
		return true
	}
	return false
}

// refund returns the nanoseconds of a bucket of interval that a cost below 0 gives back, the
// largest int64 when they do not fit in one (more than any debt: the bucket is full).
func refund(cost int, interval int64) int64 {
	switch {
	case interval == 0: // rate.Inf: a bucket always full
		return 0
	case int64(cost) < -(math.MaxInt64 / interval):
		return math.MaxInt64
	}
	return -int64(cost) * interval
}

// chargeRedis charges r's cost to its key's bucket in Redis in one round trip, which gives back
// e's lease (e locked, and unlocked on return).
func (l *Leased) chargeRedis(ctx context.Context, e *lease, r *leaseAsk) error {
	op := leaseOp{cost: max(r.cost, 0), charge: true}
	if r.cost > 0 {
		op.back, op.leased = e.held, true
		e.held = 0
	} else {
		op.back = refund(r.cost, l.s.own.interval)
	}
	_, down, err := l.lead(ctx, e, r, op)
	e.mu.Unlock()
	if err != nil && down {
		return l.s.local.charge(ctx, r.key, r.cost, r.now, err)
	}
	return err
}

// Release gives back to Redis every token the Leased holds, one round trip per key that it holds
// a lease of, so that the other replicas may spend them: for a graceful shutdown, once the
// replica takes no more requests. The Leased stays usable, and takes new leases as it needs them.
// It returns the first error of a round trip (the tokens of that key may then be lost, as in a
// crash); ctx bounds it as it bounds Decide.
func (l *Leased) Release(ctx context.Context) error {
	var first error
	l.leases.Range(func(k, v any) bool {
		key, e := k.(string), v.(*lease)
		now := time.Now()
		b := l.s.budget(ctx)
		e.mu.Lock()
		for e.flight != nil {
			f := e.flight
			e.mu.Unlock()
			if !b.wait(f) {
				if first == nil {
					first = b.expired()
				}
				return true
			}
			e.mu.Lock()
		}
		if e.gone || e.held == 0 {
			e.mu.Unlock()
			return true
		}
		op := leaseOp{back: e.held, leased: true, charge: true}
		e.held = 0
		// A give-back needs no instant of the caller's: it is timed as the lease was, but a
		// lease taken at the caller's instants (tests) is given back at the last of them.
		r := leaseAsk{request: request{key: key, now: now}, at: l.s.instant(now), b: b}
		if l.s.clock.caller {
			r.at = e.learned
			r.now = time.UnixMicro(e.learned / 1000)
		}
		_, _, err := l.lead(ctx, e, &r, op)
		e.mu.Unlock()
		if err != nil && first == nil {
			first = err
		}
		return true
	})
	return first
}

// settle shrinks the lease to what the bucket, as last known, can still hold at t, and returns
// how long until that bucket is full from t, with e locked.
func (e *lease) settle(t int64) int64 {
	left := max(e.full-t, 0)
	e.held = min(e.held, left)
	return left
}

// lead makes the round trip op on r's key for e, locked, as its flight: it unlocks e while the
// call is in flight and locks it again before it returns. On success, e knows the key's state as
// of r.at;
// on failure, what was given back is the lease's again if the call was never sent, and is taken
// as given back otherwise. down says whether the error is a failure of Redis.
func (l *Leased) lead(ctx context.Context, e *lease, r *leaseAsk, op leaseOp) (res [4]int64, down bool, err error) {
	f := &flight{done: make(chan struct{})}
	e.flight = f
	e.mu.Unlock()
	res, down, sent, err := l.call(ctx, r, op)
	e.mu.Lock()
	e.flight = nil
	switch {
	case err == nil:
		e.known, e.learned, e.full = true, r.at, r.at+res[3]
		e.late = l.s.instant(r.now) + res[3]
	case !sent:
		if op.leased {
			e.held += op.back // nothing was given back
		}
	default:
		e.full -= op.back // the bucket may hold what was given back: know less
		e.late -= op.back
	}
	f.err, f.down = err, down
	close(f.done)
	return res, down, err
}

// call sends op on r's key to Redis within r's budget, and returns the script's answer, or an
// error, whether it is a failure of Redis (see Store.failed), and whether the call was sent, so
// far as it may have been made (see trip.again).
func (l *Leased) call(ctx context.Context, r *leaseAsk, op leaseOp) (res [4]int64, down, sent bool, err error) {
	s, b := l.s, r.b
	timeout := time.Until(b.deadline)
	if timeout <= 0 {
		return res, !b.own, false, b.expired() // a failure of Redis unless the deadline is the caller's
	}
	if b.own {
		timeout = s.timeout // ctx's deadline, which newRoundTrip reads, is the sooner
	}
	rt, cancel := newRoundTrip(ctx, timeout)
	defer cancel()
	rt.short = b.waited && !b.own
	tr, err := s.run(ctx, rt, l.leaseCall(r, op))
	if tr.sent {
		l.trips.Add(1)
	}
	if err != nil {
		return res, tr.down, !tr.again(), err // sent: it may have been made
	}
	copy(res[:], tr.res)
	return res, false, true, nil
}

// leaseCall returns the call of lease.lua for op on r's key: the one place that knows the
// store's script arguments.
func (l *Leased) leaseCall(r *leaseAsk, op leaseOp) scriptCall {
	s := l.s
	charge := "0"
	if op.charge {
		charge = "1"
	}
	args := []any{s.own.interval, s.own.policy.Burst, op.cost, op.lot, op.back, charge}
	if s.clock.caller {
		args = append(args, r.now.UnixMicro(), s.clock.tolerance)
	}
	return scriptCall{script: leaseScript, keys: []string{s.prefix + r.key}, args: args, want: 4}
}

// decision returns the Decision of a request on a key whose bucket, with the lease, is full dp
// nanoseconds after the instant it is decided at, shift after the request's own.
func (l *Leased) decision(allowed bool, dp, shift int64, wait time.Duration) retryafter.Decision {
	s := l.s
	horizon := s.own.interval * int64(s.own.policy.Burst)
	d := retryafter.Decision{Allowed: allowed, Limit: s.own.policy.Burst, Policy: s.own.policy, Reset: ceilMicro(dp) + time.Duration(shift)}
	if dp < horizon {
		d.Remaining = int((horizon - dp) / s.own.interval)
	}
	if !allowed {
		d.RetryAfter = wait
		if wait < rate.InfDuration {
			d.RetryAfter += time.Duration(shift)
		}
	}
	return d
}

// ceilMicro returns ns nanoseconds rounded up to a whole microsecond, Redis's resolution.
func ceilMicro(ns int64) time.Duration {
	return time.Duration((ns+999)/1000) * time.Microsecond
}

// entry returns key's lease, made if need be, or nil when the Leased holds as many keys as it
// may; at is the instant of the request, to tell which keys it may forget.
func (l *Leased) entry(key string, at int64) *lease {
	if v, ok := l.leases.Load(key); ok {
		return v.(*lease)
	}
	if l.n.Load() >= int64(l.maxKeys) {
		if l.misses.Add(1)%evictEvery != 1 {
			return nil
		}
		l.evict(at)
		if l.n.Load() >= int64(l.maxKeys) {
			return nil
		}
	}
	v, loaded := l.leases.LoadOrStore(key, &lease{})
	if !loaded {
		l.n.Add(1)
	}
	return v.(*lease)
}

// evict forgets the keys that the Leased holds nothing of and whose bucket, as last known, is
// full at the instant at: the same as keys never seen.
func (l *Leased) evict(at int64) {
	l.leases.Range(func(k, v any) bool {
		e := v.(*lease)
		e.mu.Lock()
		if e.flight == nil && !e.gone && e.settle(max(at, e.learned)) == 0 {
			e.gone = true
			l.leases.Delete(k)
			l.n.Add(-1)
		}
		e.mu.Unlock()
		return true
	})
}
