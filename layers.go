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

// A Layer is one limit of a request that [All] decides in several Limiters: a Limiter, the key
// it counts the request against, and when it is charged. [Shared] and [ChargedAfter] make
// layers; All takes them apart into this form for the Limiters that decide several layers at
// once ([Combiner]).
type Layer struct {
	// Limiter decides the layer.
	Limiter Limiter

	// Key returns the key the layer counts a request of key k against. If nil, it is k.
	Key func(k string) string

	// Deferred marks a layer that admits a request while its key is not in debt, deciding at
	// cost 0, and is charged the request's real cost afterwards (see [ChargedAfter]).
	Deferred bool
}

// key returns the key the layer counts a request of key k against.
func (l *Layer) key(k string) string {
	if l.Key == nil {
		return k
	}
	return l.Key(k)
}

// cost returns what the layer is charged at admission for a request of cost.
func (l *Layer) cost(cost int) int {
	if l.Deferred {
		return 0
	}
	return cost
}

// A Combiner is a Limiter that can decide several layers of its own kind in one atomic step:
// all admit and each spends, or none spends. [All] uses it: [TokenBucket] combines with the
// other TokenBuckets of the process, and redisstore with the Stores of the same Redis, in one
// script. Implementing it is for Limiters that keep their counts where one step can reach them
// all.
type Combiner interface {
	Limiter

	// Combine returns a Limiter that decides a request in every one of layers, all or nothing,
	// in one atomic step, with the Decision of the layer that binds (see [All]); ok is false
	// when it cannot take them all (a layer of another kind or another store). Its Decide must
	// keep the contract of [Limiter] for the request as a whole.
	Combine(layers []Layer) (l Limiter, ok bool)
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

// A Composite is a Limiter that decides through others: what [All], [Shared], [ChargedAfter]
// and [Peek] return. The middleware sees the layers of a Composite, so a Limiter that wraps
// another to observe it (package otelmetrics) wraps those a Composite is made of, not the
// Composite.
type Composite interface {
	Limiter

	// Unwrap returns, in a new slice, the Limiters it decides through, in order.
	Unwrap() []Limiter
}

// unwrapLayers returns the Limiters of layers, for Unwrap.
func unwrapLayers(layers []Layer) []Limiter {
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
// longest wait, otherwise the one with the least of its quota left as a share of its Limit (the
// layers count in their own units). So the rate-limit fields report that layer.
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
	var layers []Layer
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

// Unwrap implements [Composite]: the Limiter of each layer.
func (a *all) Unwrap() []Limiter { return unwrapLayers(a.layers) }

// appendLayers appends the layers of l to layers: its own, or those of an All it is.
func appendLayers(layers []Layer, l Limiter) []Layer {
	switch l := l.(type) {
	case nil:
		panic("retryafter: nil Limiter")
	case *all:
		return append(layers, l.layers...)
	case *layered:
		return append(layers, l.Layer)
	}
	return append(layers, Layer{Limiter: l})
}

// combine returns the group of layers that layers[i]'s kind decides in one step, wherever they
// stand in layers, and marks them grouped: the most of them, in order, that its Combine takes,
// or layers[i] alone (a nil Limiter: decided by its own Limiter, with its key and cost).
func combine(layers []Layer, i int, grouped []bool) group {
	grouped[i] = true
	c, ok := layers[i].Limiter.(Combiner)
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
		g := make([]Layer, n)
		for k, j := range same[:n] {
			g[k] = layers[j]
		}
		if l, ok := c.Combine(g); ok {
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
	layers []Layer
	groups []group
	one    Limiter // the one combined Limiter that decides every layer, if there is one
}

// A group is layers that one step decides: by a combined Limiter, or, when it is nil, by the
// one layer's own Limiter.
type group struct {
	Limiter
	layers []Layer
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

// decide decides the request in the group's layers.
func (g group) decide(ctx context.Context, key string, cost int, now time.Time) (Decision, error) {
	if g.Limiter != nil {
		return g.Limiter.Decide(ctx, key, cost, now)
	}
	l := &g.layers[0]
	return l.Limiter.Decide(ctx, l.key(key), l.cost(cost), now)
}

// refund gives back what the group spent on admitting the request at now.
func (g group) refund(ctx context.Context, key string, cost int, now time.Time) error {
	var errs []error
	for i := range g.layers {
		l := &g.layers[i]
		if c := l.cost(cost); c > 0 {
			errs = append(errs, l.Limiter.(Charger).Charge(ctx, l.key(key), -c, now))
		}
	}
	return errors.Join(errs...)
}

// Decide implements [Limiter] as [All] describes.
func (a *all) Decide(ctx context.Context, key string, cost int, now time.Time) (Decision, error) {
	if cost < 0 {
		return Decision{}, fmt.Errorf("%w: %d", ErrNegativeCost, cost)
	}
	if a.one != nil {
		return a.one.Decide(ctx, key, cost, now)
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
		if gd, err = g.decide(ctx, key, cost, now); err != nil {
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
		return edge.Binding(ds...), nil
	}
	// A refusal or an error: give back what the groups that admitted spent.
	var refunds []error
	for i, g := range a.groups {
		if admitted&(1<<i) != 0 {
			refunds = append(refunds, g.refund(ctx, key, cost, now))
		}
	}
	if rerr := errors.Join(refunds...); rerr != nil {
		err = errors.Join(err, fmt.Errorf("retryafter: All could not give back what it spent: %w", rerr))
	}
	if err != nil {
		return Decision{}, err
	}
	return edge.Binding(ds...), nil
}

// Binding returns the Decision of a request decided in several layers: [edge.Binding], for the
// Limiters that decide several layers at once ([Combiner]).
func Binding(ds ...Decision) Decision { return edge.Binding(ds...) }

// layered is a Limiter that decides one Layer: what Shared and ChargedAfter return.
type layered struct{ Layer }

// Decide implements [Limiter]: the layer's Limiter decides at the layer's key and cost.
func (l *layered) Decide(ctx context.Context, key string, cost int, now time.Time) (Decision, error) {
	if cost < 0 {
		return Decision{}, fmt.Errorf("%w: %d", ErrNegativeCost, cost)
	}
	return l.Limiter.Decide(ctx, l.key(key), l.cost(cost), now)
}

// Unwrap implements [Composite]: the layer's Limiter.
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
	lay := Layer{Limiter: l}
	if s, ok := l.(*layered); ok {
		lay = s.Layer
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
	lay := Layer{Limiter: l}
	if s, ok := l.(*layered); ok {
		lay = s.Layer
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
func (l *Layer) deferred() bool { return l.Deferred || hasDeferred(l.Limiter) }

// chargeAfter charges the layer, or the layers it wraps, cost afterwards, for a request of key.
func (l *Layer) chargeAfter(ctx context.Context, key string, cost int, now time.Time) error {
	if l.Deferred {
		return l.Limiter.(Charger).Charge(ctx, l.key(key), cost, now)
	}
	return chargeDeferred(l.Limiter, ctx, l.key(key), cost, now)
}

func (l *layered) deferred() bool { return l.Layer.deferred() }

func (l *layered) chargeAfter(ctx context.Context, key string, cost int, now time.Time) error {
	return l.Layer.chargeAfter(ctx, key, cost, now)
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

// A chargeSlot holds what the handler of an admitted request reported with Charge.
type chargeSlot struct{ cost atomic.Int64 }

// add adds cost, at least 1, to what s holds, saturating at the largest int: a total that
// wrapped would make the request free.
func (s *chargeSlot) add(cost int) {
	for {
		old := s.cost.Load()
		sum := old + int64(cost)
		if sum < old || int64(int(sum)) != sum {
			sum = math.MaxInt
		}
		if s.cost.CompareAndSwap(old, sum) {
			return
		}
	}
}

// total returns what s holds.
func (s *chargeSlot) total() int { return int(s.cost.Load()) }

// Charge adds cost to what the request r is charged once its handler returns, in the layers of
// its limiter that [ChargedAfter] made, for a cost known only as the handler runs. It may be
// called several times, from any goroutine, until the handler returns; a middleware mounted
// inside the limiter can charge what the handler wrote. The total saturates at the largest int.
// The request is charged even when its handler panics (an [http.ErrAbortHandler] from a proxy
// whose client hung up). It reports whether r is charged: false when r did not come through
// middleware whose limiter has such a layer, or cost is below 1.
func Charge(r *http.Request, cost int) bool {
	s, _ := r.Context().Value(chargeKey{}).(*chargeSlot)
	if s == nil || cost < 1 {
		return false
	}
	s.add(cost)
	return true
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

// Unwrap implements [Composite]: the Limiter it peeks at.
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
