package redisstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/retryafter/retryafter"
	"github.com/retryafter/retryafter/edge"
)

var _ edge.Reserver = (*Store)(nil)

// Reserve implements [edge.Reserver] in the one round trip of [Store.Decide]: a request whose
// wait at Redis's clock is at most maxWait is admitted at its place, its cost spent now as of
// then, so that no request of any replica can take that place, and RetryAfter is the wait until
// it, in microseconds, rounded up; a longer wait is refused as Decide refuses it, spending
// nothing. It is sent under Decide's rules (never run twice). The memory of refusals
// ([WithRefusalMemory]) does not answer it, since a refusal it remembers may be a place within
// maxWait, but learns from it as from Decide: a place taken, a refusal; when Redis is down, the local fallback ([WithLocalFallback]) decides as Decide, and
// refuses rather than wait. A maxWait of 0 or less is Decide.
func (s *Store) Reserve(ctx context.Context, key string, cost int, now time.Time, maxWait time.Duration) (retryafter.Decision, error) {
	if maxWait <= 0 {
		return s.Decide(ctx, key, cost, now)
	}
	if cost < 0 {
		return retryafter.Decision{}, fmt.Errorf("redisstore: %w: %d", retryafter.ErrNegativeCost, cost)
	}
	pl, err := s.planOf(key)
	if err != nil {
		return retryafter.Decision{}, err
	}
	if pl.unlimited() {
		return pl.unlimitedDecision(), nil
	}
	a := ask{request: request{key, cost, now}, plan: pl, at: s.instant(now), timeout: s.timeout, maxWait: maxWait}
	if s.deferred != nil { // the charges held for key go with the call (deferred.go)
		if a.carried, err = s.takeCharges(ctx, key); err != nil {
			return s.fail(ctx, &a.request, errors.Is(err, ErrUnavailable), err)
		}
		defer s.landed(key, &a.carried)
	}
	res, err := s.call(ctx, &a)
	if err != nil {
		return s.fail(ctx, &a.request, a.failure != nil, err)
	}
	d := decision(res, pl.policy)
	if s.refusals != nil {
		// A place spent what a refusal remembered lacks; a refusal is Decide's to remember.
		a.sig = a.plan.mix(0)
		s.learn(&a, res, d)
	}
	return d, nil
}

// Release implements [edge.Reserver]: it gives cost back to key's bucket, as Charge of -cost
// does, for a request whose client left before its place.
func (s *Store) Release(ctx context.Context, key string, cost int, now time.Time) error {
	return s.Charge(ctx, key, -cost, now)
}
