// Package redisstore is a [retryafter.Limiter] kept in Redis, so that several replicas of a
// service behind a load balancer enforce one limit per client between them.
//
//	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
//	r.Use(retryafter.LimitWith(redisstore.New(rdb, rate.Every(200*time.Millisecond), 10)))
//
// Each decision is one round trip: a Lua script that reads Redis's own clock (TIME), decides,
// and computes the exact wait inside Redis, so replicas whose clocks disagree still agree on
// every answer. The bucket is the one of golang.org/x/time/rate, kept in integer nanoseconds:
// the same rate and burst, a refused request costs nothing, and a client that waits the
// Retry-After it was given is admitted whichever replica it reaches.
package redisstore

import (
	"context"
	_ "embed"
	"fmt"
	"math"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/time/rate"

	"github.com/retryafter/retryafter"
)

// script is the Lua source of the decision; its header comment explains the arithmetic.
//
//go:embed script.lua
var script string

// decideScript runs script by EVALSHA, falling back to EVAL when the server does not have it
// cached (the first call, or after a restart).
var decideScript = redis.NewScript(script)

// maxHorizon bounds burst × the emission interval, in nanoseconds, so that every integer the
// script computes (at most twice that) is exact in a Lua number, a double.
const maxHorizon = 1 << 52

// DefaultPrefix is the key prefix a [Store] uses when no [WithPrefix] is given.
const DefaultPrefix = "retryafter:"

// DefaultTimeout is how long a [Store] waits for Redis when no [WithTimeout] is given.
const DefaultTimeout = 100 * time.Millisecond

// A Store is a [retryafter.Limiter] that gives every key a token bucket of the same rate and
// burst, kept in Redis under the key's name with a prefix. Its decisions use Redis's clock
// (TIME), not the now passed to Decide, which the middleware uses only for the Date header.
//
// A key's state is one Redis string that expires as soon as it is equivalent to a key never
// seen (its bucket is full), so an idle client costs Redis nothing; the script touches only
// that one key, so a Store works on Redis Cluster too.
//
// A Store is safe for concurrent use, holds no goroutine, and needs no closing; the client it
// was given stays the caller's.
type Store struct {
	client   redis.Scripter
	interval int64  // nanoseconds per token
	args     [2]any // interval and burst, boxed once rather than on every call
	burst    int
	inf      bool // rate.Inf: admit everything without asking Redis
	prefix   string
	timeout  time.Duration
	caller   bool // decide at the now passed to Decide instead of Redis's TIME (tests)
}

// An Option configures [New].
type Option func(*Store)

// WithPrefix sets the string put before every key in Redis, so that several limits (or several
// services) can share one Redis without counting against each other. The default is
// [DefaultPrefix], "retryafter:".
func WithPrefix(prefix string) Option {
	return func(s *Store) { s.prefix = prefix }
}

// WithTimeout bounds how long one decision waits for Redis, the connection included; past it
// Decide returns an error, which the middleware answers as [retryafter.WithFailOpen] says. The
// default is [DefaultTimeout], 100 ms. The bound holds only if the client honours context
// deadlines, which go-redis clients do when built with ContextTimeoutEnabled: true; otherwise
// the client's own ReadTimeout and WriteTimeout (3 s by default) bound the call instead.
// It panics if d is not positive.
func WithTimeout(d time.Duration) Option {
	if d <= 0 {
		panic("redisstore: WithTimeout not positive")
	}
	return func(s *Store) { s.timeout = d }
}

// withCallerClock makes the Store decide at the now given to Decide, to the microsecond,
// instead of Redis's TIME: for tests, which need an injected clock. Replicas using it agree
// only if their clocks do.
func withCallerClock() Option {
	return func(s *Store) { s.caller = true }
}

// New returns a [Store] that lets each key make requests at limit per second with bursts of up
// to burst, kept in Redis through client (a *redis.Client, *redis.ClusterClient, *redis.Ring
// or any [redis.UniversalClient]). A limit of [rate.Inf] admits every cost of 0 or more
// without asking Redis, with Remaining always the burst.
//
// The store counts in whole nanoseconds per token: the rate it enforces is 1e9 / limit
// nanoseconds per token, rounded to the nearest nanosecond (exact for any rate.Every(d)).
//
// New panics if client is nil, if limit is not positive (a key that never refills would never
// expire from Redis), if limit is above 1e9 per second other than rate.Inf, if burst is below
// 1, or if refilling a whole burst would take more than 2^52 ns (about 52 days).
func New(client redis.Scripter, limit rate.Limit, burst int, opts ...Option) *Store {
	if client == nil {
		panic("redisstore: New with a nil client")
	}
	if burst < 1 {
		panic("redisstore: burst below 1")
	}
	if !(limit > 0) {
		panic("redisstore: rate limit not positive")
	}
	s := &Store{client: client, burst: burst, prefix: DefaultPrefix, timeout: DefaultTimeout}
	if limit == rate.Inf {
		s.inf = true
	} else {
		// Checked on the rate, not the interval: up to 2e9 per second the interval would
		// round to 1 ns and silently enforce 1e9.
		if limit > 1e9 {
			panic("redisstore: rate limit above 1e9 per second")
		}
		interval := math.Round(float64(time.Second) / float64(limit))
		if interval*float64(burst) > maxHorizon {
			panic("redisstore: refilling the burst takes longer than 2^52 ns")
		}
		s.interval = int64(interval)
		s.args = [2]any{s.interval, burst}
	}
	for _, o := range opts {
		if o == nil {
			panic("redisstore: nil Option")
		}
		o(s)
	}
	return s
}

// Decide implements [retryafter.Limiter] in one round trip to Redis (two the first time a
// server sees the script, which it then caches): at Redis's clock it takes
// cost tokens from key's bucket if it holds them, and otherwise leaves the bucket as it was and
// reports how long until it will. RetryAfter is exact to the microsecond, Redis's resolution: a
// request of the same cost that reaches Redis that much later is admitted, unless other
// requests spent the key's tokens meanwhile, and one a microsecond earlier would not be. It is
// rate.InfDuration for a cost above the burst. Limit, Remaining and Reset are always filled.
//
// A cost of 0 spends nothing and writes nothing to Redis: it reports the key's quota, and is
// admitted unless the key owes more than its bucket holds. A negative cost is an error wrapping
// [retryafter.ErrNegativeCost], decided without asking Redis.
//
// now is not used for the decision (see [Store]). Decide returns an error, never a partial
// Decision, when Redis does not answer within the timeout (see [WithTimeout]), answers with an
// error, or cost is negative. A request whose answer was lost to the timeout may still have been
// counted, as with any store reached over a network.
func (s *Store) Decide(ctx context.Context, key string, cost int, now time.Time) (retryafter.Decision, error) {
	if cost < 0 {
		return retryafter.Decision{}, fmt.Errorf("redisstore: %w: %d", retryafter.ErrNegativeCost, cost)
	}
	if s.inf {
		return retryafter.Decision{Allowed: true, Limit: s.burst, Remaining: s.burst}, nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	var res []int64
	var err error
	if s.caller {
		res, err = decideScript.Run(ctx, s.client, []string{s.prefix + key}, s.args[0], s.args[1], cost, now.UnixMicro()).Int64Slice()
	} else {
		res, err = decideScript.Run(ctx, s.client, []string{s.prefix + key}, s.args[0], s.args[1], cost).Int64Slice()
	}
	if err != nil {
		return retryafter.Decision{}, fmt.Errorf("redisstore: %w", err)
	}
	if len(res) != 4 {
		return retryafter.Decision{}, fmt.Errorf("redisstore: script answered %d values, want 4", len(res))
	}
	d := retryafter.Decision{
		Allowed:   res[0] == 1,
		Limit:     s.burst,
		Remaining: int(res[2]),
		Reset:     time.Duration(res[3]) * time.Microsecond,
	}
	if !d.Allowed {
		if res[1] < 0 {
			d.RetryAfter = rate.InfDuration
		} else {
			d.RetryAfter = time.Duration(res[1]) * time.Microsecond
		}
	}
	return d, nil
}
