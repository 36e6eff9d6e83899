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
	"context"
	_ "embed"
	"errors"
	"fmt"
	"net"
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

//go:embed decide.lua
var decideLua string

// decideScript decides a request on one key. It and the other scripts run by EVALSHA, falling
// back to EVAL when the server does not have them cached (the first call, or after a restart).
var decideScript = newScript(assemble(decideLua))

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

// A clock tells the instants a Store decides at and its memory of refusals reckons with.
type clock struct {
	caller    bool      // decide at the now passed to Decide instead of Redis's TIME (tests)
	tolerance any       // with caller: how far back instants may arrive before a repair, ns (state.lua)
	epoch     time.Time // origin of the instants of refusals on the local clock
}

// instant is Store.instant.
func (c *clock) instant(now time.Time) int64 {
	if c.caller {
		return now.UnixMicro() * 1000
	}
	return int64(time.Since(c.epoch))
}

// heldAt returns the instant to send the held charge o at, and how long before it o's last
// charge was made: now, or with the caller's clock (tests) the instant of that last charge.
func (c *clock) heldAt(o owed) (time.Time, int64) {
	now := time.Now()
	if c.caller {
		now = time.UnixMicro(o.at / 1000)
	}
	return now, max(c.instant(now)-o.at, 0)
}

// withCallerClock makes the Store decide at the now given to Decide, to the microsecond,
// instead of Redis's TIME: for tests, which need an injected clock. Replicas using it agree
// only if their clocks do. Instants may arrive out of order by up to one refill of the burst
// before the script takes the clock to have stepped back (see state.lua).
func withCallerClock() Option {
	return func(s *Store) {
		s.clock.caller = true
		s.clock.tolerance = s.own.horizon()
	}
}

// withStepTolerance sets how far back the caller's instants may arrive before the script takes
// the clock to have stepped back, for the tests of that repair: 0 is what Redis's TIME gets.
func withStepTolerance(d time.Duration) Option {
	return func(s *Store) { s.clock.tolerance = int64(d) }
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
		// It waits out a batch whatever the context: 35 s against a frozen server, with a
		// client built with ContextTimeoutEnabled (BENCHMARKS.md).
		return false
	}
	return true
}

// Decide implements [retryafter.Limiter] in one round trip to Redis (two the first time a
// server sees the script, which it then caches): at Redis's clock it takes
// cost tokens from key's bucket if it holds them, and otherwise leaves the bucket as it was and
// reports how long until it will. RetryAfter is exact to the microsecond, Redis's resolution: a
// request of the same cost that reaches Redis that much later is admitted, unless other
// requests spent the key's tokens meanwhile, and one a microsecond earlier would not be. It is
// rate.InfDuration for a cost above the burst. Limit, Remaining and Reset are always filled, and
// Policy is the store's rate and burst, with no name, or the key's own ([WithPolicyFunc]).
//
// A cost of 0 spends nothing and writes nothing to Redis: it reports the key's quota, and is
// admitted unless the key owes more than its bucket holds. A negative cost is an error wrapping
// [retryafter.ErrNegativeCost], decided without asking Redis.
//
// A key that [Store.Charge] put into debt is refused every request, even of cost 0, until the
// debt is repaid, with the exact wait.
//
// When Redis's clock steps back (an NTP step, a failover to a host whose clock is behind), a key
// written before the step would owe the whole step; the first decision that finds it so repairs
// it to an empty bucket as of then, even a refused one or a peek. So a step back of any size
// admits nothing that an empty bucket would not, refuses no request for longer than a refill of
// its cost, and normal counting resumes within one refill of the burst. A key in debt keeps the
// debt it had when it was last charged instead (see Charge). A step forward credits each key at
// most the one burst that its bucket holds.
//
// now is not used for the decision (see [Store]). ctx's values reach the client, and its
// deadline bounds the round trip if it is sooner than the store's timeout; its cancellation does
// not: a request whose client hangs up is decided, and counted, like any other, within the
// timeout. Decide returns an error wrapping [ErrUnavailable], never a partial Decision, when
// Redis does not answer within the timeout (see [WithTimeout]) or answers with an error, and at
// once while the store knows Redis to be down (see [WithProbeInterval]), unless it decides
// locally then (see [WithLocalFallback]); one wrapping [ErrKeyState] when key holds another
// program's value in Redis; and one wrapping
// [retryafter.ErrNegativeCost] when cost is negative. A request whose answer was lost to the
// timeout may still have been counted, as with any store reached over a network.
func (s *Store) Decide(ctx context.Context, key string, cost int, now time.Time) (retryafter.Decision, error) {
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
	a := ask{key: key, cost: cost, now: now, at: s.instant(now), sig: pl.mix(0), timeout: s.timeout}
	if d, done, err := s.recall(ctx, &a); done { // answer from memory
		return d, err
	}
	if a.lead != nil {
		defer func() { s.refusals.land(key, a.lead, a.failure) }()
	}
	carried, err := s.takeCharges(ctx, key) // take what is carried
	if err != nil {
		return s.fail(ctx, key, cost, now, errors.Is(err, ErrUnavailable), err)
	}
	var tr trip
	defer func() { s.landed(key, carried, tr.again()) }()
	c := s.newCall(key, cost, now, &pl)
	if carried.f != nil {
		c.extend(carried.tokens, max(a.at-carried.at, 0))
	}
	t := s.refusals.ticketOf(key, carried.f != nil)
	rt, cancel := newRoundTrip(ctx, a.timeout)
	defer cancel()
	rt.short = a.timeout < s.timeout
	if tr, err = s.run(ctx, rt, decideScript, c.keys[:], c.args[:c.nargs], 4); err != nil { // send
		if tr.down {
			a.failure = err
		}
		return s.fail(ctx, key, cost, now, tr.down, err)
	}
	d := decision(tr.res, pl.policy)
	s.learn(key, cost, now, &pl, a.sig, tr.res, d, t) // learn
	return d, nil
}

// An ask is one request of [Store.Decide] on its way to Redis.
type ask struct {
	key     string
	cost    int
	now     time.Time
	at      int64         // now's instant (see Store.instant)
	sig     uint64        // the fingerprint of the key's plan (see plan.mix)
	timeout time.Duration // what the round trip may take: the store's, or what a wait left of it
	lead    *flight       // the key's flight that the request leads (see refusals.board), to land
	failure error         // the failure of Redis its round trip met, for lead's waiters
}

// recall answers a from the memory of refusals (done), or leaves it to Redis: as the lead of the
// key's flight (a.lead), or after waiting for another's flight that did not answer it, with
// what is left of the wait's budget (a.timeout).
func (s *Store) recall(ctx context.Context, a *ask) (_ retryafter.Decision, done bool, _ error) {
	if s.refusals == nil {
		return retryafter.Decision{}, false, nil
	}
	if d, ok := s.refusals.answer(a.key, a.cost, a.at, 0, a.sig); ok {
		s.refusals.answered.Add(1)
		return d, true, nil
	}
	f, lead := s.refusals.board(a.key, a.cost, a.at, a.sig)
	if lead {
		a.lead = f
	}
	if lead || f == nil {
		return retryafter.Decision{}, false, nil
	}
	b := s.budget(ctx)
	if d, ok, err := s.ride(ctx, b, f, a.key, a.cost, a.now, a.sig); ok {
		return d, true, err
	}
	if !b.own { // then ctx's deadline is the sooner, which newRoundTrip reads
		if a.timeout = time.Until(b.deadline); a.timeout <= 0 {
			d, err := b.outOfTime(ctx, &s.local, a.key, a.cost, a.now)
			return d, true, err
		}
	}
	return retryafter.Decision{}, false, nil
}

// learn takes into the memory of refusals what Redis answered, res and its Decision d, to a
// request of key of cost, whose answer arrived at now, of plan pl (its fingerprint sig), sent with
// the ticket t: an admission that spent the key refreshes what is remembered, a refusal whose
// wait is known is remembered (see WithRefusalMemory).
func (s *Store) learn(key string, cost int, now time.Time, pl *plan, sig uint64, res []int64, d retryafter.Decision, t ticket) {
	if s.refusals == nil {
		return
	}
	// Timed from the answer's arrival, which is after Redis's reading: so a remembered wait is
	// never shorter than Redis's (see WithRefusalMemory).
	e := refusal{cost: cost, learned: s.instant(now), d: res[3], interval: pl.interval, horizon: pl.horizon(), burst: pl.policy.Burst, plans: sig, dec: d}
	switch {
	case d.Allowed && cost > 0:
		s.changes.Add(1)
		s.refusals.refresh(key, e, t) // the request spent what the refusal remembered did not
		s.refusals.changed(key)       // for the answers in flight meanwhile, which lack it
	case !d.Allowed && d.RetryAfter < rate.InfDuration:
		s.refusals.remember(key, e, t)
	}
}

// ride waits, within the budget b, for f, the round trip in the air of another request of key
// (see refusals.board), and answers this request as what that round trip taught the memory of
// refusals says (ok); if the memory does not cover it, not (!ok), and the request then asks
// Redis itself, within what is left of b. A round trip that met a failure of Redis fails the
// requests waiting on it with its error (or has them decided locally, as it was), rather than
// send them into the same failure.
func (s *Store) ride(ctx context.Context, b budget, f *flight, key string, cost int, now time.Time, plans uint64) (_ retryafter.Decision, ok bool, _ error) {
	if testHookBoarded != nil {
		testHookBoarded(ctx)
	}
	if !b.wait(f) {
		d, err := b.outOfTime(ctx, &s.local, key, cost, now)
		return d, true, err
	}
	if f.err != nil && f.down {
		d, err := s.local.decide(ctx, key, cost, now, f.err)
		return d, true, err
	}
	if d, ok := s.refusals.answer(key, cost, s.instant(now), 0, plans); ok {
		s.refusals.answered.Add(1)
		return d, true, nil
	}
	return retryafter.Decision{}, false, nil
}

// A trip is the outcome of one script call (see Store.run).
type trip struct {
	res    []int64
	health *health // of the node the call went to
	at     int64   // the call's instant on health's clock (see health.admit)
	sent   bool    // the call went out: what it carried may have been made
	down   bool    // its error is a failure of Redis (see failed)
	cause  error   // its error as the client returned it
}

// again reports whether the charges that the call carried (see takeCharges) are to be held
// again: it failed before it was sent, or in a way that made none of them (see resend).
func (t *trip) again() bool {
	return t.cause != nil && (!t.sent || resend(t.cause))
}

// run makes the one script call of a decision, a charge or a lease on keys, within rt: it asks
// the health of the node of keys[0] (and fails at once while that is down), runs script, checks
// that the answer holds want integers (0: any answer), and learns from the outcome: the node is
// up, or the failure is evidence against it, or the key's own (see failed). Every script call of
// the store but a flush's pipeline goes through it, and it sends through send.
func (s *Store) run(ctx context.Context, rt roundTrip, script *script, keys []string, args []any, want int) (trip, error) {
	t := trip{health: s.health.of(rt.ctx, keys[0])}
	var err error
	if t.at, err = t.health.admit(); err != nil {
		t.down, t.cause = true, err
		return t, err
	}
	cmd, sent := s.send(rt.ctx, script, keys, args)
	t.sent = sent
	if want == 0 {
		err = cmd.Err()
	} else if t.res, err = cmd.Int64Slice(); err == nil && len(t.res) != want {
		err = fmt.Errorf("script answered %d values, want %d", len(t.res), want)
	}
	if err != nil {
		t.cause = err
		if !sent { // its time ran out in the queue: no evidence against Redis
			return t, unsent(rt, err)
		}
		err, t.down = s.failed(ctx, rt, t.health, t.at, err)
		return t, err
	}
	t.health.ok()
	return t, nil
}

// A call is the key and the script's arguments of one round trip, in one allocation.
type call struct {
	keys  [1]string
	args  [9]any
	nargs int
}

// optional are the values of the optional arguments of decide.lua and charge.lua that mean "not
// given", for a call that gives later ones.
var optional = [7]any{3: "", 4: 0, 5: "", 6: ""}

// extend appends vals to c's arguments after the optional ones of decide.lua and charge.lua,
// giving those c has not.
func (c *call) extend(vals ...any) {
	for i := c.nargs; i < len(optional); i++ {
		c.args[i] = optional[i]
	}
	c.nargs = len(optional) + copy(c.args[len(optional):], vals)
}

// newCall prepares the script call of one decision of key's plan pl (see decide.lua).
func (s *Store) newCall(key string, cost int, now time.Time, pl *plan) *call {
	c := &call{nargs: 3}
	c.keys[0] = s.prefix + key
	c.args[0], c.args[1], c.args[2] = pl.args[0], pl.args[1], cost
	if s.clock.caller {
		c.args[3], c.args[4] = now.UnixMicro(), s.clock.tolerance
		c.nargs = 5
	}
	if s.policyOf != nil {
		if !s.clock.caller {
			c.args[3], c.args[4] = "", 0
		}
		c.args[5], c.args[6] = s.own.args[0], s.own.args[1]
		c.nargs = 7
	}
	return c
}

// A roundTrip is the context of one round trip: the caller's values, and a deadline, the
// store's timeout from now or the caller's own if sooner, which the caller's cancellation does
// not shorten (see [Store.Decide]).
type roundTrip struct {
	ctx      context.Context
	deadline time.Time
	own      bool // the deadline is the caller's
	short    bool // the round trip has what a wait for another's left of the store's timeout
}

// newRoundTrip returns the round trip of a call of the caller's ctx with the store's timeout,
// and the function that releases its timer.
func newRoundTrip(ctx context.Context, timeout time.Duration) (roundTrip, context.CancelFunc) {
	rt := roundTrip{deadline: time.Now().Add(timeout)}
	if d, ok := ctx.Deadline(); ok && d.Before(rt.deadline) {
		rt.deadline, rt.own = d, true
	}
	var cancel context.CancelFunc
	rt.ctx, cancel = context.WithDeadline(context.WithoutCancel(ctx), rt.deadline)
	return rt, cancel
}

// unsent returns the error of a call of rt whose deadline passed before it was sent (err): the
// caller's own deadline's, or Redis's failure to answer within the store's timeout, which is
// no evidence that Redis is down (see batcher).
func unsent(rt roundTrip, err error) error {
	if rt.own {
		return fmt.Errorf("redisstore: %w", err)
	}
	return &unavailableError{cause: err}
}

// starved returns how long after the deadline of a round trip of the store's timeout its failure
// may be seen before it is taken to show a process starved of CPU rather than a Redis down.
func starved(timeout time.Duration) time.Duration {
	return max(timeout/10, time.Millisecond)
}

// isTimeout reports whether err is a round trip's deadline passing, as the context or the
// connection reports it.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}

// failed returns the error of a round trip rt of the caller's ctx, sent at sent (from
// health.admit), that failed with err, and whether it was a failure of Redis, which it then
// records in health: not when the caller's own deadline ended it, nor when the failure is a
// key's (see [ErrKeyState]), the one place that tells them apart.
func (s *Store) failed(ctx context.Context, rt roundTrip, health *health, sent int64, err error) (error, bool) {
	err = s.dials.cause(err, rt.deadline.Add(-s.timeout))
	if isKeyState(err) {
		health.ok() // Redis answered: the failure is the key's (see ErrKeyState)
		return &keyStateError{cause: err}, false
	}
	if rt.own && (ctx.Err() != nil || !time.Now().Before(rt.deadline)) {
		return fmt.Errorf("redisstore: %w", err), false
	}
	if rt.short && isTimeout(err) {
		// The round trip had only what a wait for another's left of the timeout: that it ran
		// out says nothing of Redis, which the round trip waited for may have.
		return &unavailableError{cause: err}, true
	}
	if late := time.Since(rt.deadline); late > starved(s.timeout) && isTimeout(err) {
		// The timeout was seen long after the deadline: this process did not run in time to
		// read the answer, and that says nothing of Redis. A probe so failed is asked again by
		// the next decision. Other errors (a refused connection) count however late.
		health.reprobe()
		return &unavailableError{cause: err}, true
	}
	if s.health.cluster != nil {
		// go-redis reloads the slot map only on a MOVED reply or once a minute, and a master
		// that is down sends none: without this, its keys would fail for up to a minute after
		// its replica took over. Failures are at most one probe per interval and master, and
		// go-redis coalesces the reloads.
		s.health.cluster.ReloadState(ctx)
	}
	return health.failed(sent, err), true
}
