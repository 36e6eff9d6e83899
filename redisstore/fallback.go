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
	return func(s *Store) { s.local.replicas = replicas }
}

// A fallback is the local fallback of [WithLocalFallback]: an in-memory bucket per key at the
// replica's share of the limit, which decides while Redis is down.
type fallback struct {
	replicas                int // WithLocalFallback's, 0 without it
	*retryafter.TokenBucket     // nil without
}

// start makes f's buckets, at the replica's share of own, or of each key's policy when perKey
// (see [WithPolicyFunc]) as policy tells it.
func (f *fallback) start(own retryafter.Policy, perKey bool, policy func(string) retryafter.Policy) {
	p := share(own, f.replicas)
	var opts []retryafter.TokenBucketOption
	if perKey {
		opts = append(opts, retryafter.WithPolicyFunc(func(key string) retryafter.Policy {
			return share(policy(key), f.replicas)
		}))
	}
	f.TokenBucket = retryafter.NewTokenBucket(p.Limit, p.Burst, opts...)
}

// on reports whether there is a fallback.
func (f *fallback) on() bool { return f.TokenBucket != nil }

// share returns a replica's share of p among replicas: its rate divided by them, and its burst
// (at least 1).
func share(p retryafter.Policy, replicas int) retryafter.Policy {
	return retryafter.Policy{Name: p.Name, Limit: p.Limit / rate.Limit(replicas), Burst: max(1, p.Burst/replicas)}
}

// decide returns the decision of a request r that met err, a failure of Redis: err without a
// fallback, the local decision with one.
func (f *fallback) decide(ctx context.Context, r *request, err error) (retryafter.Decision, error) {
	if !f.on() {
		return retryafter.Decision{}, err
	}
	return f.TokenBucket.Decide(ctx, r.key, r.cost, r.now) // its Decision tells the share's Policy
}

// charge returns err, a failure of Redis, or charges the local bucket when there is a fallback.
func (f *fallback) charge(ctx context.Context, key string, cost int, now time.Time, err error) error {
	if !f.on() {
		return err
	}
	return f.TokenBucket.Charge(ctx, key, cost, now)
}

// fail returns the decision of a request r whose round trip failed with err: err itself, unless
// it is a failure of Redis (down), which the local fallback then decides.
func (s *Store) fail(ctx context.Context, r *request, down bool, err error) (retryafter.Decision, error) {
	if !down {
		return retryafter.Decision{}, err
	}
	return s.local.decide(ctx, r, err)
}

// FallingBack reports whether the store decides in memory because Redis is down: with
// [WithLocalFallback], while [Store.Down] reports an error. For metrics and health checks.
func (s *Store) FallingBack() bool { return s.local.on() && s.Down() != nil }
