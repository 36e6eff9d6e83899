package redisstore

import (
	"errors"
	"fmt"
	"math"
	"time"

	"golang.org/x/time/rate"

	"github.com/retryafter/retryafter"
)

// ErrPolicy is wrapped by the error of a decision whose key's policy (see [WithPolicyFunc]) the
// store cannot keep: a rate above 1e9 per second, or a burst that takes more than 2^52 ns
// (about 52 days) to refill.
var ErrPolicy = errors.New("redisstore: a policy the store cannot keep")

// WithPolicyFunc makes a Store ask fn for the policy of each key, at each decision and charge, so
// that a key's plan (free, pro, a customer's contract) holds across every replica of a fleet and
// can change while it runs, as [retryafter.WithPolicyFunc] does for a TokenBucket: a key's new
// policy applies from the decision that finds it on, at its rate, keeping the tokens the key
// holds (a debt included), capped at the new burst. A zero Policy (or a Limit or Burst of 0)
// means the Store's own limit or burst, and so does a limit that is negative or not a number, or
// a negative burst; a limit of rate.Inf admits every request of the key without asking Redis.
// The Decision's Policy is the key's, with its name. A policy the store cannot keep fails the
// decision with an error wrapping [ErrPolicy], which the middleware answers as
// [retryafter.WithFailOpen] says.
//
// fn gets the key without the Store's prefix ([retryafter.Shared]'s key for a shared layer). It
// runs on the request's goroutine, under no lock, before the round trip, and must be safe for
// concurrent use and cheap (a map lookup); a panic in it reaches the caller of Decide as any
// panic of a handler would.
//
// The policy of a key's state is kept with it in Redis, so that each replica reads a key at the
// policy it was written at, whatever it was told since; a key written before policies were on is
// read at the Store's own. A Store of a version without this option cannot read such a state:
// turn policies on once every replica runs a version that has them. A refusal the Store
// remembers ([WithRefusalMemory]) holds only for the policy it was given at: a key whose policy
// changes is asked of Redis again. While Redis is down, a local fallback ([WithLocalFallback])
// limits each key at the replica's share of its own policy.
func WithPolicyFunc(fn func(key string) retryafter.Policy) Option {
	if fn == nil {
		panic("redisstore: WithPolicyFunc(nil)")
	}
	return func(s *Store) { s.policyOf = fn }
}

// A plan is a policy as the scripts take it: its emission interval, and the script's arguments
// boxed once.
type plan struct {
	policy   retryafter.Policy
	interval int64  // nanoseconds per token; 0 at rate.Inf
	args     [2]any // interval and burst
}

// newPlan returns the plan of p, whose limit is positive and burst at least 1, or an error
// wrapping ErrPolicy if the store cannot keep it.
func newPlan(p retryafter.Policy) (plan, error) {
	if why := unkept(p); why != "" {
		return plan{}, fmt.Errorf("%w: %q: %s", ErrPolicy, p.Name, why)
	}
	pl := plan{policy: p, args: [2]any{0, p.Burst}}
	if p.Limit != rate.Inf {
		pl.interval = int64(math.Round(float64(time.Second) / float64(p.Limit)))
		pl.args[0] = pl.interval
	}
	return pl, nil
}

// unkept returns why the store cannot keep p, whose limit is positive and burst at least 1, or
// "" if it can.
func unkept(p retryafter.Policy) string {
	switch {
	case p.Limit == rate.Inf:
		return ""
	case p.Limit > 1e9:
		// Checked on the rate, not the interval: up to 2e9 per second the interval would
		// round to 1 ns and silently enforce 1e9.
		return "rate limit above 1e9 per second"
	case math.Round(float64(time.Second)/float64(p.Limit))*float64(p.Burst) > maxHorizon:
		return "refilling the burst takes longer than 2^52 ns"
	}
	return ""
}

// unlimited reports whether the plan admits everything (rate.Inf).
func (pl *plan) unlimited() bool { return pl.interval == 0 }

// horizon returns the nanoseconds a refill of the plan's burst takes.
func (pl *plan) horizon() int64 { return pl.interval * int64(pl.policy.Burst) }

// unlimitedDecision returns the Decision of a request under a plan at rate.Inf.
func (pl *plan) unlimitedDecision() retryafter.Decision {
	return retryafter.Decision{Allowed: true, Limit: pl.policy.Burst, Remaining: pl.policy.Burst, Policy: pl.policy}
}

// mix returns sig with the plan's rate and burst mixed in: the fingerprint of the plans a
// remembered refusal was given at, which a request must match for it to answer.
func (pl *plan) mix(sig uint64) uint64 {
	const prime = 0x100000001b3
	return ((sig^uint64(pl.interval))*prime ^ uint64(pl.policy.Burst)) * prime
}

// policy returns the policy fn gives key, with the Store's own for what it leaves out.
func (s *Store) policy(key string) retryafter.Policy {
	p := s.policyOf(key)
	if !(p.Limit > 0) {
		p.Limit = s.own.policy.Limit
	}
	if p.Burst <= 0 {
		p.Burst = s.own.policy.Burst
	}
	return p
}

// planOf returns the plan of key's decisions: the Store's own, or the key's policy's.
func (s *Store) planOf(key string) (plan, error) {
	if s.policyOf == nil {
		return s.own, nil
	}
	p := s.policy(key)
	if p == s.own.policy {
		return s.own, nil
	}
	return newPlan(p)
}
