package redisstore

import (
	"context"
	_ "embed"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/retryafter/retryafter"
)

//go:embed charge.lua
var chargeLua string

// chargeScript charges one key after the fact.
var chargeScript = redis.NewScript(assemble(chargeLua))

var _ retryafter.Charger = (*Store)(nil)

// Charge implements [retryafter.Charger] in one round trip to Redis: at Redis's clock, as
// Decide, it spends cost tokens from key's bucket whether or not it holds them, so that the key
// may go into debt, or with a negative cost gives tokens back, never beyond a full bucket (as
// if a request admitted then had not been made). A key in debt is refused every request, even
// of cost 0, until the debt is repaid, with the exact wait; it expires from Redis once the debt
// is repaid and the burst refilled. A debt is capped so that the bucket is full again at most
// about 104 days (9e15 ns) later; a larger one is forgiven down to that.
//
// A clock that steps back neither forgives a debt nor adds the step to it: the key owes, from
// the step, what it owed when it was last charged (see [Store.Decide] for keys not in debt).
//
// [retryafter.ChargedAfter] charges through it, and [retryafter.All] gives back through it what
// a layer spent on a request that a layer of another store then refused. A cost of 0 does
// nothing, as does any cost at rate.Inf. Charge returns what Decide would about Redis: an error
// wrapping [ErrUnavailable] when Redis does not answer within the timeout, and at once while the
// store knows Redis to be down (and one wrapping [ErrPolicy] for a policy it cannot keep),
// unless the store has a local fallback ([WithLocalFallback]), whose bucket is then charged
// instead. A charge whose answer was lost to the timeout may still
// have been made. A charge that gives quota back makes the Store forget the refusal of key it
// remembers (see [WithRefusalMemory]). With [WithDeferredCharges], a cost above 0 is held back
// and sent later, and Charge returns nil at once.
func (s *Store) Charge(ctx context.Context, key string, cost int, now time.Time) error {
	if cost > 0 && s.deferred != nil && s.hold(key, int64(cost), s.instant(now)) {
		s.charged(key)
		return nil
	}
	return s.charge(ctx, key, cost, now, 0)
}

// charge is Charge, sent now, of a charge made age nanoseconds ago (see carry in state.lua).
func (s *Store) charge(ctx context.Context, key string, cost int, now time.Time, age int64) error {
	if cost == 0 {
		return nil
	}
	pl, err := s.planOf(key)
	if err != nil || pl.unlimited() {
		return err
	}
	// The memory of refusals forgets key before, so that no refusal it remembers outlives the
	// charge, and after, for one remembered while the charge was in flight, which its ticket
	// keeps from being taken too (see ticket).
	s.charged(key)
	if s.refusals != nil {
		s.refusals.begin(key)
		defer s.refusals.end(key)
	}
	defer s.charged(key)
	c := s.newCall(key, cost, now, &pl)
	if age > 0 {
		c.extend(age)
	}
	rt, cancel := newRoundTrip(ctx, s.timeout)
	defer cancel()
	health := s.healthOf(rt.ctx, c.keys[0])
	sent, err := health.admit()
	if err != nil {
		return s.chargeLocal(ctx, key, cost, now, err)
	}
	if err := chargeScript.Run(rt.ctx, s.client, c.keys[:], c.args[:c.nargs]...).Err(); err != nil {
		err, down := s.failed(ctx, rt, health, sent, err)
		if !down {
			return err
		}
		return s.chargeLocal(ctx, key, cost, now, err)
	}
	health.ok()
	return nil
}

// chargeLocal returns err, or charges the local bucket when the store has a local fallback.
func (s *Store) chargeLocal(ctx context.Context, key string, cost int, now time.Time, err error) error {
	if s.local == nil {
		return err
	}
	return s.local.Charge(ctx, key, cost, now)
}
