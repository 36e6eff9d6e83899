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
// Retry-After it was given is admitted whichever replica it reaches. A Store remembers the
// refusals Redis gave it, for as long as they hold, and refuses the requests they cover itself,
// with the exact rest of the wait and no round trip ([WithRefusalMemory]), so that a flood of
// refused requests costs Redis little. A key may have a policy of its own (a plan: free, pro, a
// customer's contract), which every replica applies and which may change while they run
// ([WithPolicyFunc]).
//
// Each decision waits for Redis at most the store's timeout ([WithTimeout]), and one that gets
// no answer in time fails, on its own. Concurrent decisions share round trips while that leaves
// them time, and a script call is never sent twice (BENCHMARKS.md has what a lost reply or a
// stalled round trip costs). The store takes Redis for down only from evidence: three
// failures of Redis in a row (a key holding another program's value fails alone, with
// [ErrKeyState]), each of a round trip sent after the one before had failed (the round trips
// in flight together when one fails count once). From then on it fails every decision at once,
// asking Redis again once per probe interval ([WithProbeInterval]), so that an outage costs
// requests no waiting and the store decides again within an interval of Redis coming back.
// Failed decisions are answered as the middleware says: closed (503, Retry-After: 1) or open
// ([retryafter.WithFailOpen]), unless the store decides locally at each replica's share of the
// limit ([WithLocalFallback]).
//
// # What Redis must keep
//
// A Store, its memory of refusals and a [Leased] take what Redis told them of a key to hold
// until the instant it named: the requests of other replicas can only spend the key's quota,
// never give it back. A key that Redis loses gives it all back, and then a replica may refuse,
// until that instant at the latest, a request that Redis would admit: a remembered refusal
// ([WithRefusalMemory]), and a Leased's refusal of its own, whose wait is what Redis last said.
// Redis loses a key
//
//   - on a restart without persistence (no RDB or AOF, or the writes since the last save);
//   - in a failover to a replica that lacks the master's last writes;
//   - to eviction, under a maxmemory-policy of allkeys-lru, allkeys-lfu or allkeys-random, which
//     drop a key in debt as readily as one nearly full;
//   - deleted by hand; and, to the same effect, when its clock steps forward.
//
// The same losses let the key's clients spend its burst again. Give the store's Redis
// maxmemory-policy noeviction, so that a full Redis fails writes (an OOM error, which the store
// answers as Redis unavailable) rather than forget limits in silence; or, on a Redis shared with
// a cache whose keys expire, volatile-ttl, which evicts first the keys nearest their expiry: for
// the store, the buckets nearest full, whose loss forgives least. Every key of the store
// expires (see [Store]), so volatile-* policies may evict them too.
//
// # CPU starvation
//
// A replica whose process gets too little CPU (a busy host, a CPU quota, GOMAXPROCS=1 beside a
// busy goroutine) reads Redis's replies late. A request whose own round trip, so counted, ran
// past the timeout fails as above; the requests around it are decided as usual. One stall fails
// only the round trips in flight during it, and they count as one failure; a timeout that the
// process sees more than a tenth of the timeout after its deadline (it did not run in time to
// read the answer) counts for nothing. So a starved replica takes Redis for down only when three
// round trips in a row time out on time, one after the other, and then answers its requests as
// in an outage until a probe succeeds, one probe interval later at most. Redis and the other
// replicas are not affected: a starved replica refuses no request that Redis would admit; it
// fails some (BENCHMARKS.md has the figures). A timeout well above the replica's worst stall
// keeps that at none.
//
// Several limits in one decision ([retryafter.All]: a limit per client and one for the whole
// service, requests and tokens charged afterwards) are decided in one round trip, by one script
// over the keys of every layer, all or nothing, when their Stores share a client (see
// [Store.Combine]); [Store.Charge] charges a cost known only afterwards, into debt if need be,
// and with [WithDeferredCharges] the key's next decision carries the charge, so that a request
// of a layer charged afterwards costs Redis one round trip, not two.
//
// A decision touches one key, so on a Redis Cluster (a *redis.ClusterClient) one slot, and a
// Store works there unchanged, each master known up or down on its own. The decision of several
// layers touches a key per layer, and is one round trip there only when one hash tag in their
// prefixes puts them in one slot (see [Store.Combine]). Replication is
// asynchronous: a replica promoted when its master fails may lack the master's last writes, so a
// key of that master may get up to one more burst than its limit across the failover, and its
// requests fail until the replica serves them (BENCHMARKS.md has the figures).
package redisstore

import (
	_ "embed"
	"strings"
	"sync/atomic"
	"text/template"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/time/rate"

	"github.com/retryafter/retryafter"
)

// stateLua holds the Lua code that reads and writes a key's state, as blocks that each script
// places; its header comment explains the state and the arithmetic.
//
//go:embed state.lua
var stateLua string

// assemble returns the script src with state.lua's blocks in place ({{template "read"}}...):
// Go's text/template, so that the state's code is written once and each script runs it without
// a Lua function, which Redis would make anew on every call (see state.lua).
func assemble(src string) string {
	t := template.Must(template.New("state.lua").Parse(stateLua))
	template.Must(t.New("script").Parse(src))
	var b strings.Builder
	if err := t.ExecuteTemplate(&b, "script", nil); err != nil {
		panic(err)
	}
	return b.String()
}

// maxHorizon bounds burst × the emission interval, in nanoseconds, so that every integer the
// scripts compute is exact in a Lua number, a double: a refill of the burst, a request's cost and
// a debt together stay below 2^53 (see state.lua).
const maxHorizon = 1 << 52

// DefaultPrefix is the key prefix a [Store] uses when no [WithPrefix] is given.
const DefaultPrefix = "retryafter:"

// DefaultTimeout is how long a [Store] waits for Redis when no [WithTimeout] is given.
const DefaultTimeout = 100 * time.Millisecond

// DefaultProbeInterval is how often a [Store] that knows Redis to be down asks it again when no
// [WithProbeInterval] is given.
const DefaultProbeInterval = 500 * time.Millisecond

// A Store is a [retryafter.Limiter] that gives every key a token bucket of the same rate and
// burst, or of the key's own policy ([WithPolicyFunc]), kept in Redis under the key's name with
// a prefix. Its decisions use Redis's clock
// (TIME), not the now passed to Decide, which the middleware uses only for the Date header.
//
// A key's state is one Redis string that expires as soon as it is equivalent to a key never
// seen (its bucket is full), so an idle client costs Redis nothing; a decision touches only
// that one key, so a Store works on Redis Cluster too.
//
// A Store is safe for concurrent use and needs no closing: it holds no goroutine while idle; the
// client it was given stays the caller's.
type Store struct {
	client    redis.Scripter
	own       plan                           // the rate and burst of New
	policyOf  func(string) retryafter.Policy // WithPolicyFunc's, or nil: every key has own
	prefix    string
	timeout   time.Duration
	oneServer bool     // client runs every script on one server, whatever its keys (see Combine)
	clock     clock    // the instants of decisions and of the memory of refusals
	batch     *batcher // shares round trips between concurrent calls (pipeline.go); nil: none
	dials     *dials   // the client's failed dials, for the errors they cause (dial.go); nil: none

	health   nodes         // what the store knows of each node (health.go)
	local    fallback      // decides while Redis is down, with WithLocalFallback (fallback.go)
	deferred *deferred     // the charges held back, with WithDeferredCharges; nil without (deferred.go)
	refusals *refusals     // the refusals remembered; nil without (refusals.go)
	changes  atomic.Uint64 // refunds, charges and admissions outside groups (see group)
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
// Decide returns an error wrapping [ErrUnavailable], which the middleware answers as
// [retryafter.WithFailOpen] says. The default is [DefaultTimeout], 100 ms. It panics if d is not
// positive.
func WithTimeout(d time.Duration) Option {
	if d <= 0 {
		panic("redisstore: WithTimeout not positive")
	}
	return func(s *Store) { s.timeout = d }
}

// WithProbeInterval sets how often a Store that knows Redis to be down asks it again. A Store
// knows Redis is down after three round trips in a row fail (see [ErrUnavailable]), each sent
// after the one before had failed, so that a late reply, or a stall of the client's own process
// that makes every reply in flight late, is no outage. From then on every decision fails at
// once, without waiting for Redis, except one per interval, which asks Redis and, if it answers,
// brings the Store back. So while Redis is down a request costs no wait but that of the one
// probe per interval, and once Redis is back (and the client can reach it again) the Store
// decides again within one interval of traffic. The default is [DefaultProbeInterval], 500 ms.
// On a Redis Cluster (a *redis.ClusterClient), each master is known to be up or down on its
// own: one that is down fails fast only the keys it holds. It panics if d is not positive.
func WithProbeInterval(d time.Duration) Option {
	if d <= 0 {
		panic("redisstore: WithProbeInterval not positive")
	}
	return func(s *Store) { s.health.probe = d }
}

// New returns a [Store] that lets each key make requests at limit per second with bursts of up
// to burst, kept in Redis through client (a *redis.Client, *redis.ClusterClient, *redis.Ring
// or any [redis.UniversalClient]). A limit of [rate.Inf] admits every cost of 0 or more
// without asking Redis, with Remaining always the burst.
//
// The store counts in whole nanoseconds per token: the rate it enforces is 1e9 / limit
// nanoseconds per token, rounded to the nearest nanosecond (exact for any rate.Every(d)).
//
// The store's timeout (see [WithTimeout]) reaches the network only through a client that
// honours context deadlines: go-redis clients do when built with ContextTimeoutEnabled: true,
// and otherwise wait their own ReadTimeout (3 s by default) whatever the context says. New
// panics if client is a *redis.Client, *redis.ClusterClient or *redis.Ring built without it, or
// a *redis.AutoPipeliner, which waits out its batches whatever the context; a client of another
// kind must honour deadlines itself.
//
// Each of the store's script calls runs at most once: go-redis's clients send it no second time
// after it may have reached Redis (their retries, MaxRetries, serve their other commands), since
// a script sent again after a reset lost its reply would spend twice. A client of another kind
// must not send a write again itself (rueidis does not).
//
// New adds to a go-redis client a hook that only watches its dials, so that a decision that
// timed out while the client dialled in the background says why the dial failed (connection
// refused, a dial timeout), wrapped, rather than only that its deadline passed.
//
// New panics if client is nil or ignores deadlines (see above), if limit is not positive (a key
// that never refills would never expire from Redis), if limit is above 1e9 per second other than
// rate.Inf, if burst is below 1, or if refilling a whole burst would take more than 2^52 ns
// (about 52 days).
func New(client redis.Scripter, limit rate.Limit, burst int, opts ...Option) *Store {
	if client == nil {
		panic("redisstore: New with a nil client")
	}
	if !honoursDeadlines(client) {
		panic("redisstore: the client ignores context deadlines, and so the store's timeout: build it with ContextTimeoutEnabled: true")
	}
	if burst < 1 {
		panic("redisstore: burst below 1")
	}
	if !(limit > 0) {
		panic("redisstore: rate limit not positive")
	}
	p := retryafter.Policy{Limit: limit, Burst: burst}
	if why := unkept(p); why != "" {
		panic("redisstore: " + why)
	}
	own, _ := newPlan(p)
	s := &Store{client: client, own: own, prefix: DefaultPrefix, timeout: DefaultTimeout, clock: clock{epoch: time.Now()},
		refusals: newRefusals(DefaultRefusalMemory)}
	s.health.probe = DefaultProbeInterval
	_, s.oneServer = client.(*redis.Client)
	for _, o := range opts {
		if o == nil {
			panic("redisstore: nil Option")
		}
		o(s)
	}
	s.health.health = newHealth(s.health.probe)
	s.health.cluster, _ = client.(*redis.ClusterClient)
	s.batch = newBatcher(s.oneServer, s.health.cluster)
	s.dials = watchDials(client)
	if s.own.unlimited() && s.policyOf == nil {
		s.refusals = nil // every key is unlimited: nothing to remember, nor to decide locally
	} else if s.local.replicas > 0 {
		s.local.start(s.own.policy, s.policyOf != nil, s.policy)
	}
	return s
}

// honoursDeadlines reports whether client lets a context's deadline bound its round trips, as
// far as New can tell: go-redis's own clients say so in their options.
func honoursDeadlines(client redis.Scripter) bool {
	switch c := client.(type) {
	case *redis.Client:
		return c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return c.Options().ContextTimeoutEnabled
	case *redis.Ring:
		return c.Options().ContextTimeoutEnabled
	case *redis.AutoPipeliner:
		// It waits out a batch whatever the context, against a frozen server too, even
		// when built with ContextTimeoutEnabled.
		return false
	}
	return true
}
