package retryafter

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"reflect"
	"sync/atomic"
	"time"

	"github.com/retryafter/retryafter/edge"
)

// A layer is an [edge.Layer] as All holds it: one limit of a request, its Limiter, the key it
// counts the request against, and when it is charged.
type layer edge.Layer

// key returns the key the layer counts a request of key k against.
func (l *layer) key(k string) string {
	if l.Key == nil {
		return k
	}
	return l.Key(k)
}

// cost returns what the layer is charged at admission for a request of cost.
func (l *layer) cost(cost int) int {
	if l.Deferred {
		return 0
	}
	return cost
}

// A Charger is a Limiter that can charge a key after the fact: a cost known only once a
// request ran (tokens a model produced, bytes sent), or quota given back.
type Charger interface {
	Limiter

	// Charge spends cost from key's quota at now, whether or not it holds that much: the key
	// may go into debt, and its next request is then refused until the debt is repaid, with
	// the exact wait. A negative cost gives quota back, never beyond a full quota, as if a
	// request admitted at now had not been made.
	Charge(ctx context.Context, key string, cost int, now time.Time) error
}

// edgeLayers returns layers as a Combiner takes them.
func edgeLayers(layers []layer) []edge.Layer {
	ls := make([]edge.Layer, len(layers))
	for i, l := range layers {
		ls[i] = edge.Layer(l)
	}
	return ls
}

// unwrapLayers returns the Limiters of layers, for Unwrap.
func unwrapLayers(layers []layer) []Limiter {
	ls := make([]Limiter, len(layers))
	for i := range layers {
		ls[i] = layers[i].Limiter
	}
	return ls
}

// maxLayers is the most layers one All decides.
const maxLayers = 16

// All returns a Limiter that admits a request only when every one of limiters admits it, and
// then spends its cost in each: 10 per second and 1,000 per hour, a limit per client and one
// for the whole service ([Shared]), requests per minute and tokens charged afterwards
// ([ChargedAfter]).
//
// A refusal by any spends nothing in any, and its RetryAfter is the exact wait until all would
// admit the request: the largest of their waits, each taken at the same instant. The Decision's
// Limit, Remaining and Reset are those of the layer that binds: on a refusal the one with the
// longest wait, otherwise the one with the least Remaining, so that Remaining is the largest
// cost every layer admits at now. So the rate-limit fields report that layer.
//
// How atomic it is depends on where the limits are kept:
//   - TokenBuckets of one process are decided under the locks of every part of their tables
//     that the request touches, taken in one fixed order: no other request sees a layer spent
//     by a request that another layer refuses.
//   - Stores of one Redis are decided in one round trip, by one script (package redisstore).
//   - A mix that spans stores (memory and Redis, two Redises) is decided one store after the
//     other, in the order given; when a later one refuses, what the earlier ones spent is given
//     back at the same instant, so a refusal still spends nothing once Decide returns. While it
//     decides, a concurrent request for the same key may find a layer spent that is then given
//     back, and be refused where it would have been admitted, never the reverse. So every
//     limiter of a mix must be a [Charger], but for at most one, which is decided last, and
//     not at all once another has refused: its own wait is then not known, and RetryAfter can
//     be shorter than the wait until it too admits.
//
// All panics if limiters is empty, holds nil, holds more than 16 layers in all, or mixes
// stores and more than one of them cannot give back what it spent.
func All(limiters ...Limiter) Limiter {
	var layers []layer
	for _, l := range limiters {
		layers = appendLayers(layers, l)
	}
	if len(layers) == 0 {
		panic("retryafter: All of no limiter")
	}
	if len(layers) > maxLayers {
		panic("retryafter: All of more than 16 layers")
	}
	a := &all{layers: layers}
	grouped := make([]bool, len(layers))
	for i := range layers {
		if !grouped[i] {
			a.groups = append(a.groups, combine(layers, i, grouped))
		}
	}
	if len(a.groups) == 1 && a.groups[0].Limiter != nil {
		a.one = a.groups[0].Limiter
	}
	// Whatever cannot give back what it spent is decided last, and only one may.
	last := -1
	for i, g := range a.groups {
		if !g.refundable() {
			if last >= 0 {
				panic("retryafter: All of stores that cannot give back what they spent: at most one may be neither a Charger nor combined")
			}
			last = i
		}
	}
	if last >= 0 && len(a.groups) > 1 {
		g := a.groups[last]
		a.groups = append(append(a.groups[:last:last], a.groups[last+1:]...), g)
	}
	return a
}

// Unwrap implements [edge.Composite]: the Limiter of each layer.
func (a *all) Unwrap() []Limiter { return unwrapLayers(a.layers) }

// appendLayers appends the layers of l to layers: its own, or those of an All it is.
func appendLayers(layers []layer, l Limiter) []layer {
	switch l := l.(type) {
	case nil:
		panic("retryafter: nil Limiter")
	case *all:
		return append(layers, l.layers...)
	case *layered:
		return append(layers, l.layer)
	}
	return append(layers, layer{Limiter: l})
}

// combine returns the group of layers that layers[i]'s kind decides in one step, wherever they
// stand in layers, and marks them grouped: the most of them, in order, that its Combine takes,
// or layers[i] alone (a nil Limiter: decided by its own Limiter, with its key and cost).
func combine(layers []layer, i int, grouped []bool) group {
	grouped[i] = true
	c, ok := layers[i].Limiter.(edge.Combiner)
	if !ok {
		return group{layers: layers[i : i+1]}
	}
	kind := reflect.TypeOf(layers[i].Limiter)
	var same []int // the ungrouped layers of the same kind, layers[i] first
	for j := i; j < len(layers); j++ {
		if (j == i || !grouped[j]) && reflect.TypeOf(layers[j].Limiter) == kind {
			same = append(same, j)
		}
	}
	for n := len(same); n >= 1; n-- {
		g := make([]layer, n)
		for k, j := range same[:n] {
			g[k] = layers[j]
		}
		if l, ok := c.Combine(edgeLayers(g)); ok {
			for _, j := range same[:n] {
				grouped[j] = true
			}
			return group{Limiter: l, layers: g}
		}
	}
	return group{layers: layers[i : i+1]}
}

// all is the Limiter that All returns.
type all struct {
	layers []layer
	groups []group
	one    Limiter // the one combined Limiter that decides every layer, if there is one
}

// A group is layers that one step decides: by a combined Limiter, or, when it is nil, by the
// one layer's own Limiter.
type group struct {
	Limiter
	layers []layer
}

// refundable reports whether what the group spends can be given back.
func (g group) refundable() bool {
	for _, l := range g.layers {
		if _, ok := l.Limiter.(Charger); !ok {
			return false
		}
	}
	return true
}

// decide decides the request in the group's layers, with a place within maxWait when its
// Limiter can give one (see [edge.Reserver]).
func (g group) decide(ctx context.Context, key string, cost int, now time.Time, maxWait time.Duration) (Decision, error) {
	if g.Limiter != nil {
		return reserve(g.Limiter, ctx, key, cost, now, maxWait)
	}
	l := &g.layers[0]
	return l.reserve(ctx, key, cost, now, maxWait)
}

// reserve decides the request of key and cost in the layer, with a place within maxWait when its
// Limiter can give one and it is not charged afterwards.
func (l *layer) reserve(ctx context.Context, key string, cost int, now time.Time, maxWait time.Duration) (Decision, error) {
	if l.Deferred {
		maxWait = 0 // admitted while not in debt, without a wait
	}
	return reserve(l.Limiter, ctx, l.key(key), l.cost(cost), now, maxWait)
}

// reserve asks l for a place within maxWait when it is an [edge.Reserver] and maxWait is above
// 0, and otherwise decides as l does.
func reserve(l Limiter, ctx context.Context, key string, cost int, now time.Time, maxWait time.Duration) (Decision, error) {
	if r, ok := l.(edge.Reserver); ok && maxWait > 0 {
		return r.Reserve(ctx, key, cost, now, maxWait)
	}
	return l.Decide(ctx, key, cost, now)
}

// refund gives back what the group spent on admitting the request at now.
func (g group) refund(ctx context.Context, key string, cost int, now time.Time) error {
	var errs []error
	for i := range g.layers {
		errs = append(errs, g.layers[i].release(ctx, key, cost, now))
	}
	return errors.Join(errs...)
}

// Decide implements [Limiter] as [All] describes.
func (a *all) Decide(ctx context.Context, key string, cost int, now time.Time) (Decision, error) {
	return a.Reserve(ctx, key, cost, now, 0)
}

// Reserve implements [edge.Reserver]: as Decide decides, but a request that every layer admits
// at once or, in those that can promise one, at a place within maxWait, is admitted at the
// latest of them, with RetryAfter the wait until it. Layers that cannot (a [Spread], a
// [ChargedAfter], a Limiter that is no edge.Reserver) must admit at once; a request one of them
// refuses is refused as Decide refuses it, after the places the others gave it are given back.
func (a *all) Reserve(ctx context.Context, key string, cost int, now time.Time, maxWait time.Duration) (Decision, error) {
	if cost < 0 {
		return Decision{}, fmt.Errorf("%w: %d", ErrNegativeCost, cost)
	}
	if a.one != nil {
		return reserve(a.one, ctx, key, cost, now, maxWait)
	}
	refused := false
	var admitted uint32 // bit i: group i admitted, and spent
	var err error
	var few [4]Decision
	ds := few[:0]
	for i, g := range a.groups {
		if refused && !g.refundable() {
			break // it could not give back what it would spend just to tell its wait
		}
		var gd Decision
		if gd, err = g.decide(ctx, key, cost, now, maxWait); err != nil {
			break
		}
		if gd.Allowed {
			admitted |= 1 << i
		} else {
			refused = true
		}
		ds = append(ds, gd)
	}
	if err == nil && !refused {
		return atLatest(ds), nil
	}
	// A refusal or an error: give back what the groups that admitted spent.
	if rerr := a.giveBack(ctx, key, cost, now, admitted); rerr != nil {
		err = errors.Join(err, fmt.Errorf("retryafter: All could not give back what it spent: %w", rerr))
	}
	if err != nil {
		return Decision{}, err
	}
	if maxWait > 0 && gavePlace(ds) {
		// A group that gave the request a place has taken it back, and would refuse it now: the
		// refusal is Decide's, so that its wait, its binding layer and its fields are those of
		// each layer as it stands (a client told only the other layer's wait would be refused
		// again).
		return a.again(ctx, key, cost, now, ds)
	}
	return edge.Binding(ds...), nil
}

// again decides at now, as Decide does, the request that the groups of ds admitted, once what
// they spent is given back, and returns the refusal. The groups that refused keep their
// Decision, which is Decide's already: one that books what it tells (a [Spread]) would book a
// second time. As in Decide, a group that cannot give back is left out after a refusal.
func (a *all) again(ctx context.Context, key string, cost int, now time.Time, ds []Decision) (Decision, error) {
	var admitted uint32
	var err error
	refused := false
	for i := range ds {
		if refused && !a.groups[i].refundable() {
			ds = ds[:i]
			break
		}
		if ds[i].Allowed {
			if ds[i], err = a.groups[i].decide(ctx, key, cost, now, 0); err != nil {
				break
			}
		}
		if ds[i].Allowed {
			admitted |= 1 << i
		} else {
			refused = true
		}
	}
	if rerr := a.giveBack(ctx, key, cost, now, admitted); rerr != nil {
		err = errors.Join(err, fmt.Errorf("retryafter: All could not give back what it spent: %w", rerr))
	}
	if err != nil {
		return Decision{}, err
	}
	return edge.Binding(ds...), nil
}

// giveBack gives back at now what the groups of a that admitted spent: group i when bit i of
// admitted is set.
func (a *all) giveBack(ctx context.Context, key string, cost int, now time.Time, admitted uint32) error {
	var errs []error
	for i, g := range a.groups {
		if admitted&(1<<i) != 0 {
			errs = append(errs, g.refund(ctx, key, cost, now))
		}
	}
	return errors.Join(errs...)
}

// gavePlace reports whether a group admitted a request in ds at a place later than now. Only a
// Reserve with a maxWait asks: Decide gives no place (a Limiter that admits with a wait from
// Decide breaks its contract, and must not make Decide ask again and again).
func gavePlace(ds []Decision) bool {
	for _, d := range ds {
		if d.Allowed && d.RetryAfter > 0 {
			return true
		}
	}
	return false
}

// atLatest returns the binding Decision of a request that every group admitted, with RetryAfter
// the wait until the latest place any group gave it.
func atLatest(ds []Decision) Decision {
	var wait time.Duration
	for _, d := range ds {
		wait = max(wait, d.RetryAfter)
	}
	d := edge.Binding(ds...)
	d.RetryAfter = wait
	return d
}

// Release implements [edge.Reserver]: it gives back at now what the request spent, in every
// layer that can give back.
func (a *all) Release(ctx context.Context, key string, cost int, now time.Time) error {
	var errs []error
	for _, g := range a.groups {
		errs = append(errs, g.release(ctx, key, cost, now))
	}
	return errors.Join(errs...)
}

// release gives back what the group spent on a request it gave a place: by its combined
// Limiter's Release when it has one, otherwise layer by layer, in those that can.
func (g group) release(ctx context.Context, key string, cost int, now time.Time) error {
	if r, ok := g.Limiter.(edge.Reserver); ok {
		return r.Release(ctx, key, cost, now)
	}
	return g.refund(ctx, key, cost, now)
}

// layered is a Limiter that decides one Layer: what Shared and ChargedAfter return.
type layered struct{ layer }

// Decide implements [Limiter]: the layer's Limiter decides at the layer's key and cost.
func (l *layered) Decide(ctx context.Context, key string, cost int, now time.Time) (Decision, error) {
	if cost < 0 {
		return Decision{}, fmt.Errorf("%w: %d", ErrNegativeCost, cost)
	}
	return l.Limiter.Decide(ctx, l.key(key), l.cost(cost), now)
}

// Reserve implements [edge.Reserver]: the layer's Limiter gives a place within maxWait when it
// can and the layer is not charged afterwards; otherwise it decides.
func (l *layered) Reserve(ctx context.Context, key string, cost int, now time.Time, maxWait time.Duration) (Decision, error) {
	if cost < 0 {
		return Decision{}, fmt.Errorf("%w: %d", ErrNegativeCost, cost)
	}
	return l.layer.reserve(ctx, key, cost, now, maxWait)
}

// Release implements [edge.Reserver]: it gives the layer's cost back, when its Limiter can.
func (l *layered) Release(ctx context.Context, key string, cost int, now time.Time) error {
	return l.release(ctx, key, cost, now)
}

// release gives back at now what the layer spent on a request of key and cost, when its
// Limiter can give back: as a Charger (a wrapped Limiter may promise places only through the
// one it wraps), or by its Release.
func (l *layer) release(ctx context.Context, key string, cost int, now time.Time) error {
	c := l.cost(cost)
	if c <= 0 {
		return nil
	}
	switch r := l.Limiter.(type) {
	case Charger:
		return r.Charge(ctx, l.key(key), -c, now)
	case edge.Reserver:
		return r.Release(ctx, l.key(key), c, now)
	}
	return nil
}

// Unwrap implements [edge.Composite]: the layer's Limiter.
func (l *layered) Unwrap() []Limiter { return []Limiter{l.Limiter} }

// Shared returns a Limiter that counts every request against the one key key in l, whatever key
// it is asked about: a limit for the whole service, or a route, beside the per-client limits of
// an [All]:
//
//	retryafter.All(perClient, retryafter.Shared(service, "all"))
//
// It panics if l is nil.
func Shared(l Limiter, key string) Limiter {
	if l == nil {
		panic("retryafter: Shared(nil)")
	}
	lay := layer{Limiter: l}
	if s, ok := l.(*layered); ok {
		lay = s.layer
	}
	lay.Key = func(string) string { return key }
	return &layered{lay}
}

// ChargedAfter returns a Limiter that admits a request while its key is not in debt in l (it
// decides at cost 0, spending nothing) and charges l afterwards what the request really cost,
// as its handler reports with [Charge]: tokens a model produced, bytes sent. The key may go into
// debt; its next request is then refused until the debt is repaid, with the exact wait. l may
// be a Charger within [Shared] and [Spread], in any order.
//
// It panics if l is not a [Charger] (an [All], a [Peek]): it could not be charged afterwards.
func ChargedAfter(l Limiter) Limiter {
	lay := layer{Limiter: l}
	if s, ok := l.(*layered); ok {
		lay = s.layer
	}
	if _, ok := lay.Limiter.(Charger); !ok {
		panic("retryafter: ChargedAfter needs a Charger (a TokenBucket, a store, or Shared or Spread of one): an All or a Peek cannot be charged afterwards, and would let every request through uncharged")
	}
	lay.Deferred = true
	return &layered{lay}
}

// An afterCharger is a Limiter with layers that are charged after the request: ChargedAfter's,
// and an All that holds one.
type afterCharger interface {
	chargeAfter(ctx context.Context, key string, cost int, now time.Time) error
	deferred() bool
}

// hasDeferred reports whether l has layers charged afterwards, its own or those of a Limiter it
// wraps (a Spread of an All).
func hasDeferred(l Limiter) bool {
	a, ok := l.(afterCharger)
	return ok && a.deferred()
}

// chargeDeferred charges the layers of l charged afterwards cost, for a request of key.
func chargeDeferred(l Limiter, ctx context.Context, key string, cost int, now time.Time) error {
	if a, ok := l.(afterCharger); ok && a.deferred() {
		return a.chargeAfter(ctx, key, cost, now)
	}
	return nil
}

// deferred reports whether the layer is charged afterwards, or wraps layers that are.
func (l *layer) deferred() bool { return l.Deferred || hasDeferred(l.Limiter) }

// chargeAfter charges the layer, or the layers it wraps, cost afterwards, for a request of key.
func (l *layer) chargeAfter(ctx context.Context, key string, cost int, now time.Time) error {
	if l.Deferred {
		return l.Limiter.(Charger).Charge(ctx, l.key(key), cost, now)
	}
	return chargeDeferred(l.Limiter, ctx, l.key(key), cost, now)
}

func (l *layered) deferred() bool { return l.layer.deferred() }

func (l *layered) chargeAfter(ctx context.Context, key string, cost int, now time.Time) error {
	return l.layer.chargeAfter(ctx, key, cost, now)
}

func (a *all) deferred() bool {
	for i := range a.layers {
		if a.layers[i].deferred() {
			return true
		}
	}
	return false
}

func (a *all) chargeAfter(ctx context.Context, key string, cost int, now time.Time) error {
	var errs []error
	for i := range a.layers {
		if l := &a.layers[i]; l.deferred() {
			errs = append(errs, l.chargeAfter(ctx, key, cost, now))
		}
	}
	return errors.Join(errs...)
}

// chargeKey is the context key of a request's chargeSlot.
type chargeKey struct{}

// A chargeSlot holds what the handler of an admitted request reported with Charge, until the
// middleware that charges it takes the total. The slot of a middleware mounted outside is
// outer: a charge is for every middleware the request came through.
type chargeSlot struct {
	cost  atomic.Int64 // closed once taken
	outer *chargeSlot
}

// closed is what a chargeSlot holds once its total is taken: a charge then reaches nothing.
const closed = math.MinInt64

// newChargeSlot returns the slot of a request whose context is ctx, inside the slot of the
// middleware mounted outside, if any.
func newChargeSlot(ctx context.Context) *chargeSlot {
	outer, _ := ctx.Value(chargeKey{}).(*chargeSlot)
	return &chargeSlot{outer: outer}
}

// add adds cost, at least 1, to what s holds, saturating at the largest int (a total that
// wrapped would make the request free), and reports whether s was still open.
func (s *chargeSlot) add(cost int) bool {
	for {
		old := s.cost.Load()
		if old == closed {
			return false
		}
		sum := old + int64(cost)
		if sum < old || int64(int(sum)) != sum {
			sum = math.MaxInt
		}
		if s.cost.CompareAndSwap(old, sum) {
			return true
		}
	}
}

// take returns what s holds and closes it.
func (s *chargeSlot) take() int { return int(s.cost.Swap(closed)) }

// open opens s, closed by take before it was handed on, and reports whether it was closed.
func (s *chargeSlot) open() bool { return s.cost.CompareAndSwap(closed, 0) }

// Charge adds cost to what the request r is charged once its handler returns, in the layers of
// its limiter that [ChargedAfter] made, for a cost known only as the handler runs. It may be
// called several times, from any goroutine, until the handler returns; a middleware mounted
// inside the limiter can charge what the handler wrote. The total saturates at the largest int.
// The request is charged even when its handler panics (an [http.ErrAbortHandler] from a proxy
// whose client hung up). Through several such middlewares, nested, it is charged in each. It
// reports whether r is charged: false when r did not come through middleware whose limiter has
// such a layer, when every such middleware's handler has returned, or when cost is below 1; for
// a request shaped as a CORS preflight, which is counted only when its handler first writes
// (see the package doc's Browsers section), false until then and for one that goes free.
func Charge(r *http.Request, cost int) bool {
	s, _ := r.Context().Value(chargeKey{}).(*chargeSlot)
	if cost < 1 {
		return false
	}
	charged := false
	for ; s != nil; s = s.outer {
		charged = s.add(cost) || charged
	}
	return charged
}

// Peek returns a Limiter that admits every request and spends nothing in l: it asks l at cost 0
// and reports l's quota. Behind middleware with [WithRateLimitFields], it adds the fields to
// responses that l does not limit (a status route, reads beside limited writes). It panics if l
// is nil.
func Peek(l Limiter) Limiter {
	if l == nil {
		panic("retryafter: Peek(nil)")
	}
	return peek{l}
}

type peek struct{ l Limiter }

// Unwrap implements [edge.Composite]: the Limiter it peeks at.
func (p peek) Unwrap() []Limiter { return []Limiter{p.l} }

// Decide implements [Limiter]: l's quota at cost 0, admitted whatever l says.
func (p peek) Decide(ctx context.Context, key string, cost int, now time.Time) (Decision, error) {
	if cost < 0 {
		return Decision{}, fmt.Errorf("%w: %d", ErrNegativeCost, cost)
	}
	d, err := p.l.Decide(ctx, key, 0, now)
	d.Allowed, d.RetryAfter = true, 0
	return d, err
}
