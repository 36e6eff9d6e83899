package redisstore

import (
	"context"
	"errors"
	"math"
	"sync"
	"time"
)

// maxDeferredKeys bounds the keys whose charges a Store holds back at once (WithDeferredCharges):
// past it, a new key's charge is sent at once, as without the option.
const maxDeferredKeys = 1 << 16

// WithDeferredCharges makes [Store.Charge] of a cost above 0 return at once and send the charge
// later, within delay: with the key's next decision, which carries it in the same round trip
// ([retryafter.ChargedAfter] through the middleware then costs Redis one round trip a request,
// not two), or, if the key has none by then, when the delay of the oldest charge held is over,
// with every other charge held then, in one pipelined round trip per 1,000 keys. A charge is
// made in Redis as of the instant of the key's last charge, by the local clock: the debt the
// next decision sees is the one it would see had each charge been sent at once, but that a
// charge made before a refill of the whole burst is counted from the last charge's instant, no
// later than delay after it. Refunds (a negative cost) are sent at once. A decision of a key
// never misses a charge the Store holds for it: it carries the charge, or, while the charge is
// on its way to Redis (sent by a flush or carried by another decision), waits for its answer,
// within the decision's timeout.
//
// What a charge held back can lose: a crash of the process loses the charges of at most the last
// delay and one round trip (call [Store.Flush] on a graceful shutdown, which loses none); a round
// trip that times out loses the charges it carried, as a Charge whose answer is lost may or may
// not have been made, while one that fails otherwise (Redis refused the connection, or is known
// to be down) keeps them for the next; a flush whose key's Store has a local fallback
// ([WithLocalFallback]) charges the local bucket when Redis is down; the charges of a key that
// holds another program's value ([ErrKeyState]) are dropped. Other replicas do not see a charge
// until it is sent. At most 65,536 keys' charges are held back at once; a charge of another key
// then is sent at once. It panics if delay is not positive.
func WithDeferredCharges(delay time.Duration) Option {
	if delay <= 0 {
		panic("redisstore: WithDeferredCharges not positive")
	}
	return func(s *Store) {
		s.deferred = &deferred{delay: delay, m: map[string]owed{}, sending: map[string]sending{}}
	}
}

// deferred holds the charges a Store has not yet sent, by key, and knows those on their way.
type deferred struct {
	delay   time.Duration
	mu      sync.Mutex
	m       map[string]owed
	sending map[string]sending // the keys whose charges are in a round trip, until it lands
	armed   bool               // a flush is due
}

// sending is a key's charge in a round trip: its flight, and the instant of the charge.
type sending struct {
	f  *flight
	at int64
}

// owed is what a key was charged and not yet sent: tokens, the last at the instant at.
type owed struct {
	tokens int64
	at     int64 // Store.instant
}

// A heldCharge is what one key owes, taken to be sent.
type heldCharge struct {
	key string
	owed
}

// hold adds a charge of tokens on key at the instant at, and reports whether it did: not past
// the bound of keys. It arms the flush when it is the first charge held.
func (s *Store) hold(key string, tokens int64, at int64) bool {
	q := s.deferred
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.holdLocked(s, key, owed{tokens, at})
}

// holdLocked is hold, with q locked.
func (q *deferred) holdLocked(s *Store, key string, add owed) bool {
	o, ok := q.m[key]
	if !ok && len(q.m) >= maxDeferredKeys {
		return false
	}
	// An int, for charge, saturating: charges are above 0, and a sum that wrapped would give back.
	q.m[key] = owed{tokens: o.tokens + min(add.tokens, math.MaxInt-o.tokens), at: max(o.at, add.at)}
	if !q.armed {
		q.armed = true
		time.AfterFunc(q.delay, s.flushDue)
	}
	return true
}

// take removes and returns what key owes, if anything, as a round trip's to carry, with the
// flight it is in until land; or, while a charge of key is in flight, that flight to wait for.
func (q *deferred) take(key string) (o owed, f *flight, wait *flight) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if wait = q.sending[key].f; wait != nil {
		return owed{}, nil, wait
	}
	o, ok := q.m[key]
	if ok {
		delete(q.m, key)
		f = &flight{done: make(chan struct{})}
		q.sending[key] = sending{f, o.at}
	}
	return o, f, nil
}

// takeAll removes and returns every charge held but those of keys in flight, which stay for the
// next flush, and the flight they are in together until land.
func (q *deferred) takeAll(s *Store) ([]heldCharge, *flight) {
	q.mu.Lock()
	defer q.mu.Unlock()
	f := &flight{done: make(chan struct{})}
	held := make([]heldCharge, 0, len(q.m))
	for key, o := range q.m {
		if q.sending[key].f == nil {
			held = append(held, heldCharge{key, o})
			q.sending[key] = sending{f, o.at}
			delete(q.m, key)
		}
	}
	if len(q.m) > 0 && !q.armed {
		q.armed = true
		time.AfterFunc(q.delay, s.flushDue)
	}
	return held, f
}

// land ends f, the flight of the charges of held, holding again those of again (keyed alike,
// a zero owed for none; nil for none at all) first, so that a decision that waited for the
// flight finds them.
func (q *deferred) land(s *Store, held []heldCharge, again []owed, f *flight) {
	q.mu.Lock()
	for i, h := range held {
		if again != nil && again[i].tokens > 0 {
			q.holdLocked(s, h.key, again[i])
		}
		if q.sending[h.key].f == f {
			delete(q.sending, h.key)
		}
	}
	q.mu.Unlock()
	close(f.done)
}

// A carry is what a round trip carries of what one key owed, and the flight it is in.
type carry struct {
	owed
	f     *flight // nil for nothing carried
	again bool    // the round trip failed so that it is to be held again (see trip.again)
}

// takeCharges removes and returns what key owes, for a round trip to carry: a change in flight
// of key's bucket for the memory of refusals (see ticket), until landed. While a charge of key is
// on its way to Redis, it waits for its answer first, within the budget of a request of ctx, and
// returns that budget's error if it runs out.
func (s *Store) takeCharges(ctx context.Context, key string) (carry, error) {
	var b *budget
	for {
		o, f, wait := s.deferred.take(key)
		if wait == nil {
			if f != nil && s.refusals != nil {
				s.refusals.begin(key)
			}
			return carry{owed: o, f: f}, nil
		}
		if b == nil {
			nb := s.budget(ctx)
			b = &nb
		}
		if !b.wait(wait) {
			return carry{}, b.expired()
		}
	}
}

// landed records that the round trip that carried c, what key owed (see takeCharges), has
// landed, its answer remembered if it was to be, or was never sent, holding it again if c says
// so. It does nothing for a round trip that carried nothing.
func (s *Store) landed(key string, c *carry) {
	if c.f == nil {
		return
	}
	var back []owed
	if c.again {
		back = []owed{c.owed}
	}
	s.deferred.land(s, []heldCharge{{key, c.owed}}, back, c.f)
	if s.refusals != nil {
		s.refusals.end(key)
	}
}

// flushDue sends the charges held when their delay is over, and arms the next flush if charges
// were held meanwhile.
func (s *Store) flushDue() {
	q := s.deferred
	q.mu.Lock()
	q.armed = false
	q.mu.Unlock()
	s.Flush(context.Background())
}

// Flush sends every charge the Store holds back ([WithDeferredCharges]) now, in one pipelined
// round trip per 1,000 keys (one per key with a client that does not pipeline), each within the
// store's timeout, and returns the errors of those that failed (whose charges went to the local
// fallback, if any, or were lost). Call it on a graceful shutdown, once the server has stopped
// taking requests (after http.Server.Shutdown returns), so that no charge is lost. It does
// nothing without WithDeferredCharges.
func (s *Store) Flush(ctx context.Context) error {
	q := s.deferred
	if q == nil {
		return nil
	}
	held, f := q.takeAll(s)
	if len(held) == 0 {
		return nil
	}
	if s.refusals != nil {
		for _, h := range held {
			s.refusals.begin(h.key) // until its charge is sent (see takeCharges)
		}
	}
	again := make([]owed, len(held))
	var errs []error
	for i := 0; i < len(held); i += maxBatch {
		part := held[i:min(i+maxBatch, len(held))]
		errs = append(errs, s.sendCharges(ctx, &chargeBatch{held: part, again: again[i : i+len(part)]}))
	}
	q.land(s, held, again, f)
	if s.refusals != nil {
		for _, h := range held {
			s.refusals.end(h.key)
		}
	}
	return errors.Join(errs...)
}
