package redisstore

import (
	"context"
	"time"

	"golang.org/x/time/rate"

	"github.com/retryafter/retryafter"
)

// WithLocalFallback makes a Store that cannot reach Redis decide in memory instead of
// returning an error: a third answer to an outage, between the middleware's failing closed
// (every request refused with 503) and failing open (no limit at all). replicas is the number
// of replicas of the service that share the limit; while Redis is down, each of them limits
// every key at its share, limit / replicas with bursts of burst / replicas (at least 1), in a
// [retryafter.TokenBucket] of its own, whose Retry-After is exact for what it decides. Once Redis
// answers again (see [WithProbeInterval]), Redis decides again, from the state it kept.
//
// So while Redis is down the fleet admits, per key, at most max(burst, replicas) + limit × the
// outage's length, however the load balancer spreads the requests: a fresh burst beside what one
// Redis would have admitted, since the local buckets do not know what the key spent in Redis
// before the outage. A key whose requests reach fewer replicas gets less. Without the
// option, Decide returns the error and the middleware fails as [retryafter.WithFailOpen] says.
// Decisions made locally report the local bucket's Limit, Remaining, Reset and Policy (the
// share's rate and burst); they are no
// error, so the middleware's error hook does not see the outage: [Store.Down] does.
//
// It panics if replicas is below 1.
func WithLocalFallback(replicas int) Option {
	if replicas < 1 {
		panic("redisstore: WithLocalFallback with fewer than 1 replica")
	}
	return func(s *Store) { s.replicas = replicas }
}

// newLocal returns the in-memory limiter of [WithLocalFallback], at the replica's share of the
// store's policy, or of each key's (see [WithPolicyFunc]), and its own policy.
func (s *Store) newLocal() (*retryafter.TokenBucket, retryafter.Policy) {
	p := share(s.own.policy, s.replicas)
	var opts []retryafter.TokenBucketOption
	if s.policyOf != nil {
		opts = append(opts, retryafter.WithPolicyFunc(func(key string) retryafter.Policy {
			return share(s.policy(key), s.replicas)
		}))
	}
	return retryafter.NewTokenBucket(p.Limit, p.Burst, opts...), p
}

// share returns a replica's share of p among replicas: its rate divided by them, and its burst
// (at least 1).
func share(p retryafter.Policy, replicas int) retryafter.Policy {
	return retryafter.Policy{Name: p.Name, Limit: p.Limit / rate.Limit(replicas), Burst: max(1, p.Burst/replicas)}
}

// orLocal returns err, or the local decision when the store has a local fallback.
func (s *Store) orLocal(ctx context.Context, key string, cost int, now time.Time, err error) (retryafter.Decision, error) {
	if s.local == nil {
		return retryafter.Decision{}, err
	}
	d, err := s.local.Decide(ctx, key, cost, now)
	if err == nil && d.Policy == (retryafter.Policy{}) {
		d.Policy = s.localPol
	}
	return d, err
}

// Down returns, while the store knows Redis to be down, the error that showed it (wrapping
// [ErrUnavailable]), and nil while Redis answers: for health checks and metrics, since with
// [WithLocalFallback] an outage reaches no error hook.
// On a cluster, it reports the first master found down.
func (s *Store) Down() error {
	if e := s.health.down.Load(); e != nil {
		return e
	}
	var err error
	s.nodes.Range(func(_, h any) bool {
		if e := h.(*health).down.Load(); e != nil {
			err = e
		}
		return err == nil
	})
	return err
}

// FallingBack reports whether the store decides in memory because Redis is down: with
// [WithLocalFallback], while [Store.Down] reports an error. For metrics and health checks.
func (s *Store) FallingBack() bool { return s.local != nil && s.Down() != nil }
