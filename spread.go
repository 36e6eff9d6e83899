package retryafter

import (
	"context"
	"time"

	"golang.org/x/time/rate"

	"github.com/retryafter/retryafter/edge"
	"github.com/retryafter/retryafter/internal/clock"
)

// Spread returns a Limiter that decides as l does and spreads the waits of the requests it
// refuses, so that clients refused at the same time come back at the rate l admits them rather
// than all in the second its quota next allows. Use it around a limit that many clients share
// ([Shared]); around a per-client limit it would make clients wait for each other.
//
//	retryafter.All(perClient, retryafter.Spread(retryafter.Shared(service, "all"), 100, 100))
//
// limit and burst are the capacity returns are spread at (a token bucket's own limit and
// burst); if limit is 0, the refusing Decision's Policy gives them, and a refusal whose Policy
// has no rate keeps its own wait. A refused request is told a whole number of seconds, never less
// than l's own wait, and the requests Spread refuses are told to come back, in each second of the
// server's clock up to an hour ahead, with a cost of at most limit and burst: the schedule books
// cost, and a request whose cost is more than a second holds takes the seconds before the one it
// is told. A client comes back at the fraction of a second it was refused at, so a bucket whose
// burst holds less than two seconds of its limit may refuse a few again, with a new wait.
//
// The waits are longer than l's, so the Decisions are not tight as [Limiter] asks; the refusing
// layer's wait and Reset are lengthened with them, so that the RateLimit fields' t equals the
// Retry-After. A request l refuses forever is passed through. Inside [All], a Spread layer is
// decided apart from the TokenBuckets beside it, as in a mix of stores. Spread keeps what l
// charges: around [Shared] or [ChargedAfter] it spreads the Limiter they wrap, so that
// Spread(ChargedAfter(l)) is ChargedAfter(Spread(l)).
//
// Spread panics if l is nil, limit is negative or not a number, or burst is negative.
func Spread(l Limiter, limit rate.Limit, burst int) Limiter {
	if l == nil {
		panic("retryafter: Spread(nil)")
	}
	if !(limit >= 0) {
		panic("retryafter: Spread with a negative limit")
	}
	if burst < 0 {
		panic("retryafter: Spread with a negative burst")
	}
	if lay, ok := l.(*layered); ok {
		// Spread the Limiter of a Shared or ChargedAfter layer, so that the layer keeps its
		// key and its charges, and stays a layer for All.
		lay := lay.layer
		lay.Limiter = Spread(lay.Limiter, limit, burst)
		return &layered{lay}
	}
	s := &spread{l: l, limit: limit, burst: burst}
	if c, ok := l.(Charger); ok {
		return &spreadCharger{spread: s, c: c}
	}
	return s
}

// deferred implements afterCharger: l's layers charged afterwards are charged through s.
func (s *spread) deferred() bool { return hasDeferred(s.l) }

func (s *spread) chargeAfter(ctx context.Context, key string, cost int, now time.Time) error {
	return chargeDeferred(s.l, ctx, key, cost, now)
}

// spread is the Limiter of [Spread].
type spread struct {
	l     Limiter
	limit rate.Limit
	burst int
	ret   clock.Returns
}

// Decide implements [Limiter]: l's Decision, with the wait of a refusal spread.
func (s *spread) Decide(ctx context.Context, key string, cost int, now time.Time) (Decision, error) {
	d, err := s.l.Decide(ctx, key, cost, now)
	if err != nil || d.Allowed || d.RetryAfter <= 0 {
		return d, err
	}
	limit, burst := s.limit, s.burst
	if limit == 0 {
		limit, burst = d.Policy.Limit, d.Policy.Burst
	}
	if !(limit > 0) || limit == rate.Inf {
		return d, nil
	}
	// A wait beyond the schedule's hour, rate.InfDuration (never) included, stays as it is.
	return spreadTo(d, s.ret.SpreadWait(now, d.RetryAfter, float64(limit), burst, max(cost, 1))), nil
}

// spreadTo returns d, a refusal, with its wait lengthened to wait, and that of the layers that
// bound it, in a list of its own, so that the RateLimit fields' t of the refusing layer is the
// Retry-After.
func spreadTo(d Decision, wait time.Duration) Decision {
	if wait == d.RetryAfter {
		return d
	}
	if layers := d.Layers(); layers != nil {
		ds := make([]Decision, len(layers))
		for i, e := range layers {
			if !e.Allowed && e.RetryAfter == d.RetryAfter {
				e.RetryAfter, e.Reset = wait, max(e.Reset, wait)
			}
			ds[i] = e
		}
		d = edge.Binding(ds...)
	}
	d.RetryAfter, d.Reset = wait, max(d.Reset, wait)
	return d
}

// spreadCharger is a spread around a Charger, which it charges as it is asked.
type spreadCharger struct {
	*spread
	c Charger
}

// Charge implements [Charger] by charging l.
func (s *spreadCharger) Charge(ctx context.Context, key string, cost int, now time.Time) error {
	return s.c.Charge(ctx, key, cost, now)
}
