package redisstore

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/time/rate"

	"github.com/retryafter/retryafter"
	"github.com/retryafter/retryafter/edge"
)

//go:embed all.lua
var allLua string

// allScript decides a request in several layers, all or nothing.
var allScript = newScript(assemble(allLua))

var _ edge.Combiner = (*Store)(nil)

// maxLayers is the most layers Combine takes, as many as [retryafter.All] decides.
const maxLayers = 16

// Combine implements [edge.Combiner], so that [retryafter.All] decides the layers of
// Stores on one Redis in one round trip: one script reserves the request's cost in every layer's
// key at one instant of Redis's clock and, if any layer cannot admit it then, writes nothing.
// So a refusal spends nothing in any layer, its RetryAfter is the largest of the layers' waits,
// exact to the microsecond, and the Decision is that of the layer that binds
// ([edge.Binding]), its Policy that layer's Store's rate and burst. Layers may have different rates, bursts and prefixes, share a key
// ([retryafter.Shared]) or be charged afterwards ([retryafter.ChargedAfter], at cost 0 in the
// script; [Store.Charge] charges them later).
//
// Combine takes the layers only if every one is a Store built on s's client (the same value,
// not just the same server), all deciding by the same clock. On a *redis.Client, that is all.
// On any other client, a *redis.ClusterClient or *redis.Ring above all, which send a script to
// the node of its first key, every key of one script must be in one hash slot (a cluster refuses
// others with CROSSSLOT): Combine then takes several layers only if every prefix carries the same
// hash tag, as WithPrefix("{rl}:tokens:") and WithPrefix("{rl}:requests:") do, which puts every
// key of those Stores in one slot, on one master, the price of deciding them at once. Otherwise
// it returns false, and All decides each layer on its own, one round trip after the other,
// giving back through [Store.Charge] what a layer spent when a later one refuses. In an All that
// mixes Stores with limiters of other kinds, what the combined layers spent on a request that a
// later limiter refuses is given back that way too, layer by layer.
//
// The combined decision fails, waits and falls back as each Store's Decide does: it waits at
// most the shortest timeout of the layers' Stores; the first layer's Store tells whether Redis is
// known to be down (and one decision per probe interval asks it again), and every layer's Store
// learns what the round trip showed. While Redis is down, the layers are decided in memory, all
// or nothing, if every layer's Store has a local fallback ([WithLocalFallback]); otherwise the
// decision returns the error. It promises no place: a request that may wait for one
// (retryafter.WithWait) is refused as Decide refuses it, with the same wait.
func (s *Store) Combine(layers []edge.Layer) (retryafter.Limiter, bool) {
	if len(layers) == 0 || len(layers) > maxLayers {
		return nil, false
	}
	g := &group{caller: s.clock.caller, cluster: s.health.cluster}
	var tags []string // of the prefixes that have one
	var locals []edge.Layer
	for _, l := range layers {
		st, ok := l.Limiter.(*Store)
		if !ok || !sameClient(st.client, s.client) || st.clock.caller != s.clock.caller {
			return nil, false
		}
		if st.own.unlimited() && st.policyOf == nil {
			g.inf = append(g.inf, st.own.unlimitedDecision())
			continue
		}
		if tag, ok := hashTag(st.prefix); ok {
			tags = append(tags, tag)
		}
		g.add(st, l, &locals)
	}
	// Keys of one layer are in one slot whatever their prefix; those of several, only when
	// every prefix has the same hash tag.
	if len(g.layers) > 1 && !s.oneServer && !oneTag(tags, len(g.layers)) {
		return nil, false
	}
	g.start(locals)
	return g, true
}

// add adds the layer l of the Store st to g, and its local fallback, if any, to locals.
func (g *group) add(st *Store, l edge.Layer, locals *[]edge.Layer) {
	var tolerance any = 0
	if g.caller {
		tolerance = st.clock.tolerance
	}
	g.crossKeys = g.crossKeys || l.Key != nil
	g.layers = append(g.layers, layer{store: st, key: l.Key, deferred: l.Deferred, tolerance: tolerance})
	if g.timeout == 0 || st.timeout < g.timeout {
		g.timeout = st.timeout
	}
	if st.local.on() {
		*locals = append(*locals, edge.Layer{Limiter: st.local.TokenBucket, Key: l.Key, Deferred: l.Deferred})
	}
}

// oneTag reports whether the n layers' prefixes have tags, one each, all the same.
func oneTag(tags []string, n int) bool {
	if len(tags) < n {
		return false
	}
	for _, tag := range tags[1:] {
		if tag != tags[0] {
			return false
		}
	}
	return true
}

// start gives g, its layers added, its memory of refusals, with its first layer's Store's
// budget, and the layers' local fallbacks, combined, if every layer has one.
func (g *group) start(locals []edge.Layer) {
	if len(g.layers) == 0 {
		return
	}
	if r := g.layers[0].store.refusals; r != nil {
		g.refusals = newRefusals(r.total)
		g.refusals.group = true
	}
	if len(locals) == len(g.layers) {
		g.local, _ = locals[0].Limiter.(edge.Combiner).Combine(locals)
	}
}

// sameClient reports whether a and b are the same client.
func sameClient(a, b redis.Scripter) bool {
	va, vb := reflect.ValueOf(a), reflect.ValueOf(b)
	return va.Type() == vb.Type() && va.Comparable() && vb.Comparable() && a == b
}

// hashTag returns the hash tag that prefix gives every key it begins, as Redis Cluster reads a
// key: the text between its first "{" and the first "}" after it, if there is any. ok is false
// when the tag of a key would depend on more than the prefix.
func hashTag(prefix string) (tag string, ok bool) {
	i := strings.IndexByte(prefix, '{')
	if i < 0 {
		return "", false
	}
	j := strings.IndexByte(prefix[i+1:], '}')
	if j <= 0 { // none in the prefix, or "{}": the key, not the prefix, decides
		return "", false
	}
	return prefix[i+1 : i+1+j], true
}

// A group is the layers of Stores that Combine decides in one round trip.
type group struct {
	caller  bool                  // decide at the caller's now (tests)
	cluster *redis.ClusterClient  // client, when it is one
	layers  []layer               // the layers that ask Redis, in order
	inf     []retryafter.Decision // the Decisions of the layers at rate.Inf
	timeout time.Duration         // the shortest of the layers' Stores', which bounds the call
	local   retryafter.Limiter    // the layers' local fallbacks, combined; nil unless all have one
	// refusals remembers the group's refusals by the request's key, with the first layer's
	// Store's budget; nil without.
	refusals *refusals
	// crossKeys says whether a layer maps the request's key to another (Shared), so that the
	// requests of one key spend another's quota; spent counts the group's admissions then.
	crossKeys bool
	spent     atomic.Uint64
}

// A layer is one layer of a group that asks Redis.
type layer struct {
	store     *Store
	key       func(string) string
	deferred  bool
	tolerance any // boxed once
}

// A groupCall is the script's keys and arguments of one group decision and the plan of each
// layer, held by one allocation, a smallCall for the usual few layers or a largeCall for up to
// maxLayers.
type groupCall struct {
	request
	refunds uint64 // the count of refunds when it was sent (see refundCount)
	keys    []string
	args    []any
	plans   []plan
	carried []carry // what each layer's Store held back for its key and the call carries
	sig     uint64  // the fingerprint of plans (see plan.mix)
}

type smallCall struct {
	keys    [4]string
	args    [1 + 8*4]any
	plans   [4]plan
	carried [4]carry
}

type largeCall struct {
	keys    [maxLayers]string
	args    [1 + 8*maxLayers]any
	plans   [maxLayers]plan
	carried [maxLayers]carry
}

// Decide implements [retryafter.Limiter] as [Store.Combine] describes.
func (g *group) Decide(ctx context.Context, key string, cost int, now time.Time) (retryafter.Decision, error) {
	if cost < 0 {
		return retryafter.Decision{}, fmt.Errorf("redisstore: %w: %d", retryafter.ErrNegativeCost, cost)
	}
	n := len(g.layers)
	if n == 0 {
		return edge.Binding(g.inf...), nil
	}
	lead := g.layers[0].store
	c, err := g.newCall(key, cost, now) // plan
	if err != nil {
		return retryafter.Decision{}, err
	}
	at := lead.instant(now)
	c.refunds = g.refundCount()
	if g.refusals != nil { // a refusal remembered may answer
		if d, ok := g.refusals.answer(key, cost, at, c.refunds, c.sig); ok {
			lead.refusals.answered.Add(1)
			return d, nil
		}
	}
	if err := g.carry(ctx, c, at); err != nil { // the charges held for the keys go with the call
		return g.fail(ctx, &c.request, errors.Is(err, ErrUnavailable), err)
	}
	var tr trip
	defer func() { g.landed(c, tr.again()) }()
	rt, cancel := newRoundTrip(ctx, g.timeout)
	defer cancel()
	if tr, err = lead.run(ctx, rt, scriptCall{allScript, c.keys, c.args, 4 * n}); err != nil { // one call
		g.failed(rt, c, tr)
		return g.fail(ctx, &c.request, tr.down, err)
	}
	return g.learn(rt, &c, tr.res), nil // decision
}

// failed records the failure of Redis that the round trip rt of c met, tr, as evidence against
// the nodes of every layer's key, the first's as run did.
func (g *group) failed(rt roundTrip, c groupCall, tr trip) {
	if !tr.down || !tr.sent {
		return
	}
	for i := 1; i < len(g.layers); i++ {
		if h := g.layers[i].store.health.of(rt.ctx, c.keys[i]); h != tr.health {
			h.failed(tr.at, tr.cause)
		}
	}
}

// learn returns the Decision of the answer res of the round trip rt of c, and takes into the
// layers' health and the memories of refusals what it told.
func (g *group) learn(rt roundTrip, c *groupCall, res []int64) retryafter.Decision {
	n := len(g.layers)
	var ds [maxLayers]retryafter.Decision
	for i := range n {
		ds[i] = decision(res[4*i:4*i+4], c.plans[i].policy)
		ds[i].Remaining /= g.sharing(c, i)
		if i > 0 {
			g.layers[i].store.health.of(rt.ctx, c.keys[i]).ok()
		}
	}
	copy(ds[n:], g.inf)
	d := edge.Binding(ds[:n+len(g.inf)]...)
	at := g.layers[0].store.instant(c.now) // the answer's arrival, after Redis's reading (see WithRefusalMemory)
	if d.Allowed && c.cost > 0 {
		g.admitted(c, at, res, g.refundCount() == c.refunds)
	}
	if !d.Allowed && g.refusals != nil && d.RetryAfter < rate.InfDuration && g.refundCount() == c.refunds {
		g.remember(c, ds[:n], res, d, at)
	}
	return d
}

// sharing returns how many layers of the call c, layer i among them, spend a request's cost in
// the key of layer i: each request spends its cost that many times there, so its Remaining is
// the key's room divided by it (all.lua reports the key's tokens to each).
func (g *group) sharing(c *groupCall, i int) int {
	n := 0
	for j := range g.layers {
		if c.keys[j] == c.keys[i] && !g.layers[j].deferred {
			n++
		}
	}
	return max(n, 1)
}

// remember takes into the group's memory the refusal d of the request of the call c, whose
// layers answered res and ds, which arrived at at.
func (g *group) remember(c *groupCall, ds []retryafter.Decision, res []int64, d retryafter.Decision, at int64) {
	// The layer that binds, as Binding picks it: the first refused with the longest wait. Every
	// refused layer's wait shortens with time as long as its key's bucket is not full (d > 0, as
	// read): until the first of them is, the layer that binds stays the same and the group's wait
	// shortens with time, exactly; after, Redis is asked.
	b := -1
	valid := at + int64(d.RetryAfter)
	for i := range ds {
		if !ds[i].Allowed {
			valid = min(valid, at+res[4*i+3])
			if b < 0 || ds[i].RetryAfter > ds[b].RetryAfter {
				b = i
			}
		}
	}
	if pl := &c.plans[b]; valid > at {
		// The group's own count of changes is refunds, checked by the caller and by answer.
		g.refusals.remember(c.key, refusal{cost: c.cost, learned: at, until: at + int64(d.RetryAfter), valid: valid, d: res[4*b+3],
			interval: pl.interval, horizon: pl.horizon(), burst: pl.policy.Burst, sharing: g.sharing(c, b), plans: c.sig, dec: d, refunds: c.refunds}, g.refusals.ticket(c.key, false))
	}
}

// refundCount returns a count that changes whenever a layer's Store gives quota back, is charged
// or admits a request outside the group: any of them may make a refusal the group remembers tell
// too short a wait, or a wrong one.
func (g *group) refundCount() uint64 {
	n := g.spent.Load()
	for i := range g.layers {
		n += g.layers[i].store.changes.Load()
	}
	return n
}

// admitted records that the group admitted the request of the call c at at, whose script
// answered res:
// the group forgets its refusal of key, and each layer's Store that remembers a refusal of the
// layer's key learns the key's new state, or forgets it unless fresh (no layer's Store gave
// quota back, was charged or admitted meanwhile, which the answer may predate).
func (g *group) admitted(c *groupCall, at int64, res []int64, fresh bool) {
	if g.refusals != nil {
		g.refusals.forget(c.key)
		if g.crossKeys {
			g.spent.Add(1)
		}
	}
	for i := range g.layers {
		l := &g.layers[i]
		st := l.store
		if st.refusals == nil || l.deferred {
			continue
		}
		k := strings.TrimPrefix(c.keys[i], st.prefix)
		if !fresh {
			st.refusals.forget(k)
			st.refusals.changed(k)
			continue
		}
		pl := &c.plans[i]
		// fresh stands for the changes the Store made (they count in the group's) but those in
		// flight now; the spending of this request then counts as one, for the Store's answers
		// in flight.
		st.refusals.refresh(k, refusal{learned: at, d: res[4*i+3], interval: pl.interval, horizon: pl.horizon(),
			burst: pl.policy.Burst, plans: pl.mix(0), dec: retryafter.Decision{Limit: pl.policy.Burst, Policy: pl.policy}}, st.refusals.ticket(k, false))
		st.refusals.changed(k)
	}
}

// newCall prepares the script call of one group decision (see all.lua), or returns the error of
// a layer's key's policy.
func (g *group) newCall(key string, cost int, now time.Time) (groupCall, error) {
	c := groupCall{request: request{key, cost, now}}
	if n := len(g.layers); n <= 4 {
		a := new(smallCall)
		c.keys, c.args, c.plans, c.carried = a.keys[:n], a.args[:1+8*n], a.plans[:n], a.carried[:n]
	} else {
		a := new(largeCall)
		c.keys, c.args, c.plans, c.carried = a.keys[:n], a.args[:1+8*n], a.plans[:n], a.carried[:n]
	}
	c.args[0] = ""
	if g.caller {
		c.args[0] = now.UnixMicro()
	}
	var costArg any = cost
	for i := range g.layers {
		l := &g.layers[i]
		k := key
		if l.key != nil {
			k = l.key(key)
		}
		st := l.store
		pl, err := st.planOf(k)
		if err != nil {
			return groupCall{}, err
		}
		c.plans[i] = pl
		c.keys[i] = st.prefix + k
		a := c.args[1+8*i : 9+8*i]
		a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7] = pl.args[0], pl.args[1], costArg, l.tolerance, "", "", 0, 0
		if st.policyOf != nil {
			a[4], a[5] = st.own.args[0], st.own.args[1]
		}
		if l.deferred {
			a[2] = 0
		}
		c.sig = pl.mix(c.sig)
	}
	return c, nil
}

// carry takes what each layer's Store holds back for the layer's key (WithDeferredCharges) into
// c, for a call sent at the instant at. While a charge of a layer's key is on its way to Redis,
// it holds again what it took, waits for that charge's answer within the budget of a request of
// ctx (so that two calls never wait for each other), and takes again; it returns the budget's
// error if it runs out.
func (g *group) carry(ctx context.Context, c groupCall, at int64) error {
	var b *budget
	for {
		wait := g.take(c, at)
		if wait == nil {
			return nil
		}
		g.landed(c, true)
		clear(c.carried)
		if b == nil {
			nb := g.layers[0].store.budget(ctx)
			b = &nb
		}
		if !b.wait(wait) {
			return b.expired()
		}
	}
}

// take takes what each layer's Store holds back for the layer's key into c, until a key whose
// charge is on its way to Redis, whose flight it returns.
func (g *group) take(c groupCall, at int64) *flight {
	for i := range g.layers {
		st := g.layers[i].store
		c.args[7+8*i], c.args[8+8*i] = 0, 0 // nothing carried, unless taken below
		if st.deferred == nil {
			continue
		}
		key := strings.TrimPrefix(c.keys[i], st.prefix)
		o, f, wait := st.deferred.take(key)
		if wait != nil {
			return wait
		}
		if f != nil {
			if st.refusals != nil {
				st.refusals.begin(key)
			}
			c.carried[i] = carry{owed: o, f: f}
			c.args[7+8*i], c.args[8+8*i] = o.tokens, max(at-o.at, 0)
		}
	}
	return nil
}

// landed records that the round trip of c, which carried what its keys owed, has landed (see
// Store.landed), holding it again if again.
func (g *group) landed(c groupCall, again bool) {
	for i := range g.layers {
		st := g.layers[i].store
		cr := c.carried[i]
		cr.again = again
		st.landed(strings.TrimPrefix(c.keys[i], st.prefix), &cr)
	}
}

// fail returns the decision of a request r whose round trip failed with err: err itself, unless
// it is a failure of Redis (down) and every layer has a local fallback, whose combined decision
// it then returns.
func (g *group) fail(ctx context.Context, r *request, down bool, err error) (retryafter.Decision, error) {
	if !down || g.local == nil {
		return retryafter.Decision{}, err
	}
	d, err := g.local.Decide(ctx, r.key, r.cost, r.now)
	if err != nil {
		return d, err
	}
	if len(g.inf) == 0 {
		return d, nil
	}
	var ds [maxLayers]retryafter.Decision
	ds[0] = d
	copy(ds[1:], g.inf)
	return edge.Binding(ds[:1+len(g.inf)]...), nil
}
