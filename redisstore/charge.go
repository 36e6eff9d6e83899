package redisstore

import (
	"context"
	_ "embed"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/retryafter/retryafter"
)

//go:embed charge.lua
var chargeLua string

// chargeScript charges one key after the fact.
var chargeScript = newScript(assemble(chargeLua))

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
	if tr, err := s.run(ctx, rt, c.of(chargeScript, 0)); err != nil {
		if !tr.down {
			return err
		}
		return s.local.charge(ctx, key, cost, now, err)
	}
	return nil
}

// maxBatch is the most held charges one round trip of a flush sends, pipelined.
const maxBatch = 1000

// A pipeliner is a client that sends several commands in one round trip, as go-redis's do.
type pipeliner interface{ Pipeline() redis.Pipeliner }

// A pipedCharge is one held charge in a pipelined round trip.
type pipedCharge struct {
	cmd    *redis.Cmd // nil when not sent
	call   *call
	health *health
	sent   int64 // from health.admit
	now    time.Time
}

// A chargeBatch is the held charges that one round trip of a flush sends, and for each whether
// it is to be held again: again[i] is set to the charge of held[i] when it is (see resend).
type chargeBatch struct {
	held  []heldCharge
	again []owed
	rt    roundTrip       // the pipelined round trip's
	pipe  redis.Pipeliner // that round trip's pipeline
	sends []pipedCharge   // each charge as the pipeline carries it
}

// sendCharges sends the charges of b (at most maxBatch) in one pipelined round trip, or one by
// one with a client that does not pipeline, and returns the errors of those that failed, each
// answered as [Store.Charge] answers it, setting b.again for those to be held again.
func (s *Store) sendCharges(ctx context.Context, b *chargeBatch) error {
	p, ok := s.client.(pipeliner)
	if !ok {
		var errs []error
		for i, h := range b.held {
			now, age := s.clock.heldAt(h.owed)
			errs = append(errs, b.failed(i, s.charge(ctx, h.key, int(h.tokens), now, age)))
		}
		return errors.Join(errs...)
	}
	var cancel context.CancelFunc
	b.rt, cancel = newRoundTrip(ctx, s.timeout)
	defer cancel()
	b.pipe = p.Pipeline()
	b.sends = make([]pipedCharge, len(b.held))
	var errs []error
	for i, h := range b.held {
		errs = append(errs, s.pipeCharge(ctx, b, i))
		if b.sends[i].call != nil {
			defer s.charged(h.key) // after, as charge
		}
	}
	b.exec(p)
	for i := range b.sends {
		if b.sends[i].cmd != nil {
			errs = append(errs, s.chargeAnswered(ctx, b, i))
		}
	}
	return errors.Join(errs...)
}

// failed returns err, the error of the charge of b.held[i], setting b.again[i] when the charge
// is to be held again (see resend).
func (b *chargeBatch) failed(i int, err error) error {
	if err != nil && resend(err) {
		b.again[i] = b.held[i].owed
	}
	return err
}

// pipeCharge puts the charge of b.held[i] into b's pipeline as b.sends[i], or returns why it is
// not sent: a policy it cannot keep (never to be made), or a node known to be down.
func (s *Store) pipeCharge(ctx context.Context, b *chargeBatch, i int) error {
	h, ps := b.held[i], &b.sends[i]
	var age int64
	ps.now, age = s.clock.heldAt(h.owed)
	pl, err := s.planOf(h.key)
	if err != nil || pl.unlimited() {
		return err // a policy it cannot keep: never to be made
	}
	s.charged(h.key) // before, as charge
	ps.call = s.newCall(h.key, int(h.tokens), ps.now, &pl)
	if age > 0 {
		ps.call.extend(age)
	}
	ps.health = s.health.of(b.rt.ctx, ps.call.keys[0])
	if ps.sent, err = ps.health.admit(); err != nil {
		return b.failed(i, s.local.charge(ctx, h.key, int(h.tokens), ps.now, err))
	}
	ps.cmd = chargeScript.queue(b.rt.ctx, b.pipe, false, ps.call.keys[:], ps.call.args[:ps.call.nargs])
	return nil
}

// chargeAnswered takes the answer of b.sends[i], the piped charge of b.held[i], as run takes a
// script's.
func (s *Store) chargeAnswered(ctx context.Context, b *chargeBatch, i int) error {
	ps := &b.sends[i]
	err := ps.cmd.Err()
	if err == nil {
		ps.health.ok()
		return nil
	}
	err, down := s.failed(ctx, b.rt, ps.health, ps.sent, err)
	if down {
		err = s.local.charge(ctx, b.held[i].key, int(b.held[i].tokens), ps.now, err)
	}
	return b.failed(i, err)
}

// exec sends b's pipeline, and again by EVAL the charges that the server had not the script for
// (the first flush, or after a restart), which loads it; p is the client.
func (b *chargeBatch) exec(p pipeliner) {
	if b.pipe.Len() == 0 {
		return
	}
	b.pipe.Exec(b.rt.ctx) // each command has its own error
	redo := p.Pipeline()
	for i := range b.sends {
		if ps := &b.sends[i]; ps.cmd != nil && redis.HasErrorPrefix(ps.cmd.Err(), "NOSCRIPT") {
			ps.cmd = chargeScript.queue(b.rt.ctx, redo, true, ps.call.keys[:], ps.call.args[:ps.call.nargs])
		}
	}
	if redo.Len() > 0 {
		redo.Exec(b.rt.ctx)
	}
}
