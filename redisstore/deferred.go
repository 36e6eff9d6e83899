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
// not two), or, if the key has none by then, on its own, one round trip for all the charges the
// key got meanwhile. A charge is made in Redis as of the instant of the key's last charge, by
// the local clock: the debt the next decision sees is the one it would see had each charge been
// sent at once, but that a charge made before a refill of the whole burst is counted from the
// last charge's instant, no later than delay after it. Refunds (a negative cost) are sent at once.
//
// What a charge held back can lose: a crash of the process loses the charges of at most the last
// delay (call [Store.Flush] on a graceful shutdown, which loses none); a round trip that times out
// loses the charges it carried, as a Charge whose answer is lost may or may not have been made,
// while one that fails otherwise (Redis refused the connection, or is known to be down) keeps
// them for the next; a flush whose key's Store has a local fallback ([WithLocalFallback])
// charges the local bucket when Redis is down. Other replicas do not see a charge until it is sent. At
// most 65,536 keys' charges are held back at once; a charge of another key then is sent at once.
// It panics if delay is not positive.
func WithDeferredCharges(delay time.Duration) Option {
	if delay <= 0 {
		panic("redisstore: WithDeferredCharges not positive")
	}
	return func(s *Store) { s.deferred = &deferred{delay: delay, m: map[string]owed{}} }
}

// deferred holds the charges a Store has not yet sent, by key.
type deferred struct {
	delay time.Duration
	mu    sync.Mutex
	m     map[string]owed
	armed bool // a flush is due
}

// owed is what a key was charged and not yet sent: tokens, the last at the instant at.
type owed struct {
	tokens int64
	at     int64 // Store.instant
}

// hold adds a charge of tokens on key at the instant at, and reports whether it did: not past
// the bound of keys. It arms the flush when it is the first charge held.
func (s *Store) hold(key string, tokens int64, at int64) bool {
	q := s.deferred
	q.mu.Lock()
	defer q.mu.Unlock()
	o, ok := q.m[key]
	if !ok && len(q.m) >= maxDeferredKeys {
		return false
	}
	q.m[key] = owed{tokens: min(o.tokens+tokens, math.MaxInt), at: max(o.at, at)} // an int, for charge
	if !q.armed {
		q.armed = true
		time.AfterFunc(q.delay, s.flushDue)
	}
	return true
}

// take removes and returns what key owes, if anything.
func (q *deferred) take(key string) (owed, bool) {
	if q == nil {
		return owed{}, false
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	o, ok := q.m[key]
	if ok {
		delete(q.m, key)
	}
	return o, ok
}

// takeCharges removes and returns what key owes, for a round trip to carry: a change in flight
// of key's bucket for the memory of refusals (see ticket), until landed.
func (s *Store) takeCharges(key string) (owed, bool) {
	o, ok := s.deferred.take(key)
	if ok && s.refusals != nil {
		s.refusals.begin(key)
	}
	return o, ok
}

// landed records that the round trip that carried what key owed (see takeCharges) has landed,
// its answer remembered if it was to be, or was never sent.
func (s *Store) landed(key string) {
	if s.refusals != nil {
		s.refusals.end(key)
	}
}

// giveBack holds again what a round trip that was never sent was to carry for key.
func (s *Store) giveBack(key string, o owed) {
	if o.tokens > 0 {
		s.hold(key, o.tokens, o.at)
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

// Flush sends every charge the Store holds back ([WithDeferredCharges]) now, one round trip per
// key, each within the store's timeout, and returns the errors of those that failed (whose
// charges went to the local fallback, if any, or were lost). Call it on a graceful shutdown,
// once the server has stopped taking requests (after http.Server.Shutdown returns), so that no
// charge is lost. It does nothing without WithDeferredCharges.
func (s *Store) Flush(ctx context.Context) error {
	q := s.deferred
	if q == nil {
		return nil
	}
	q.mu.Lock()
	m := q.m
	q.m = make(map[string]owed, len(m))
	q.mu.Unlock()
	if s.refusals != nil {
		for key := range m {
			s.refusals.begin(key) // until its charge is sent (see takeCharges)
		}
	}
	var errs []error
	for key, o := range m {
		now := time.Now()
		if s.caller {
			now = time.UnixMicro(o.at / 1000) // the tests' clock: as of the last charge
		}
		if err := s.charge(ctx, key, int(o.tokens), now, max(s.instant(now)-o.at, 0)); err != nil {
			errs = append(errs, err)
			if resend(err) {
				s.giveBack(key, o) // for the next decision, or the next flush
			}
		}
		s.landed(key)
	}
	return errors.Join(errs...)
}
