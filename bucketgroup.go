package retryafter

import (
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/retryafter/retryafter/edge"
	"github.com/retryafter/retryafter/internal/clock"
	"golang.org/x/time/rate"
)

// Combine implements [edge.Combiner]: TokenBuckets combine with each other, whichever their rates,
// bursts and policies, and decide a request under the locks of every part it touches, taken in
// one fixed order.
func (b *TokenBucket) Combine(layers []edge.Layer) (Limiter, bool) {
	if len(layers) > maxLayers {
		return nil, false
	}
	g := &bucketGroup{layers: make([]layer, len(layers))}
	for i, l := range layers {
		g.layers[i] = layer(l)
	}
	for _, l := range layers {
		tb, ok := l.Limiter.(*TokenBucket)
		if !ok {
			return nil, false
		}
		g.buckets = append(g.buckets, tb)
	}
	return g, true
}

// A bucketGroup is the layers of TokenBuckets that an All decides in one step.
type bucketGroup struct {
	layers  []layer
	buckets []*TokenBucket
}

// Unwrap implements [edge.Composite]: the Limiter of each layer.
func (g *bucketGroup) Unwrap() []Limiter { return unwrapLayers(g.layers) }

// layerState is what a bucketGroup's decision holds for one layer.
type layerState struct {
	key string
	pol Policy
	t   *table    // nil for a limit of rate.Inf
	at  time.Time // the instant it is decided at, on t's side (see table.at)
	lim *rate.Limiter
	r   rate.Reservation // in lim, of its cost and the earlier layers' on lim (see takeOver)
	d   Decision

	shared bool // another layer of the request is on lim (see sharing)
}

// Decide implements [Limiter] under the locks of every part the layers touch: it reserves each
// layer's cost at one instant and, if any reservation is not due then, cancels every one of them
// at that instant, so that the refusal spends nothing in any layer. Layers on the same bucket
// and key count together, as if reserved one after the other. The Decision is the binding
// layer's (see [edge.Binding]).
func (g *bucketGroup) Decide(ctx context.Context, key string, cost int, now time.Time) (Decision, error) {
	return g.Reserve(ctx, key, cost, now, 0)
}

// Reserve implements [edge.Reserver] as Decide decides, but a request whose every layer has a
// place within maxWait is admitted at the latest of them, each layer's cost spent as of its own
// place, with RetryAfter the wait until the latest. A layer charged afterwards does not wait.
func (g *bucketGroup) Reserve(_ context.Context, key string, cost int, now time.Time, maxWait time.Duration) (Decision, error) {
	if cost < 0 {
		return Decision{}, fmt.Errorf("%w: %d", ErrNegativeCost, cost)
	}
	var few [4]layerState // more layers grow it
	st := g.states(few[:0], key)
	var order [maxLayers]*table
	locked := lockInOrder(order[:0], st)
	late := alignLines(locked, now)
	admitted := g.reserve(st, cost, maxWait-late.Lag)
	g.answer(st, cost, admitted)
	for _, t := range locked {
		t.mu.Unlock()
	}
	var decided [4]Decision
	ds := decided[:0]
	var wait time.Duration
	for i := range st {
		lateBy(&st[i].d, late)
		ds = append(ds, st[i].d)
		wait = max(wait, st[i].d.RetryAfter)
	}
	d := edge.Binding(ds...)
	d.Allowed = admitted
	if admitted {
		d.RetryAfter = wait // the latest place, 0 when every layer admitted at once
	}
	return d, nil
}

// Release implements [edge.Reserver]: it gives each layer's cost back at now.
func (g *bucketGroup) Release(ctx context.Context, key string, cost int, now time.Time) error {
	return group{Limiter: g, layers: g.layers}.refund(ctx, key, cost, now)
}

// states appends to st the state of each layer for key: its key, its policy (asked of the
// policy function, under no lock) and, unless its limit is rate.Inf, its part.
func (g *bucketGroup) states(st []layerState, key string) []layerState {
	for i := range g.layers {
		l, b := &g.layers[i], g.buckets[i]
		s := layerState{key: l.key(key)}
		s.pol = b.policyFor(s.key)
		if s.pol.Limit != rate.Inf {
			s.t = b.part(s.key)
		}
		st = append(st, s)
	}
	return st
}

// alignLines readies the locked parts to decide at one instant, the latest any has seen: as far
// after now in each as in the one furthest ahead (tables of different TokenBuckets may have
// shifted the readings of their clock by different steps back), and returns how far that is.
func alignLines(locked []*table, now time.Time) clock.Late {
	var lags [maxLayers]time.Duration
	var late clock.Late
	for i, t := range locked {
		_, l := t.At(now)
		lags[i], late.Lag, late.Step = l.Lag, max(late.Lag, l.Lag), max(late.Step, l.Step)
	}
	for i, t := range locked {
		t.Latest = t.Latest.Add(late.Lag - lags[i])
	}
	return late
}

// reserve reserves each layer's cost in its bucket at its part's latest instant, and reports
// whether every reservation is due then, or within maxWait (but for a layer charged
// afterwards); if not, it cancels them all at that instant.
func (g *bucketGroup) reserve(st []layerState, cost int, maxWait time.Duration) bool {
	admitted := true
	var keep [maxLayers]*rate.Limiter // each layer's bucket: a later layer's new key keeps them
	held := keep[:0]
	for i := range st {
		s := &st[i]
		if s.t == nil {
			continue
		}
		s.at = s.t.Latest
		lim, full := g.buckets[i].bucket(s.t, s.key, s.pol, s.at, held)
		if lim == nil {
			admitted = false
			s.d = Decision{RetryAfter: full, Limit: s.pol.Burst, Reset: full, Policy: s.pol}
			if g.layers[i].cost(cost) > s.pol.Burst {
				s.d.RetryAfter = rate.InfDuration // as once it has room
			}
			continue
		}
		s.lim = lim
		n := g.layers[i].cost(cost)
		if holds(held, lim) {
			n = addCost(n, g.takeOver(st, i, cost))
			s.shared = true
		}
		held = append(held, lim)
		s.r = *lim.ReserveN(s.at, n)
		if ok, wait := settle(s.r.DelayFrom(s.at)); !ok {
			if wait < rate.InfDuration {
				// The wait Decide tells, from the bucket as cancelling the reservation will
				// leave it (its tokens, and n back), which maxWait is held to.
				wait = enough(s.pol, n, s.lim.TokensAt(s.at)+float64(n), wait)
			}
			s.d.RetryAfter = wait
			admitted = admitted && wait <= maxWait && !g.layers[i].Deferred
		}
	}
	if !admitted {
		for i := len(st) - 1; i >= 0; i-- {
			st[i].r.CancelAt(st[i].at) // a zero Reservation cancels nothing
		}
	}
	return admitted
}

// takeOver makes layer i of st, on the bucket and key of earlier layers, the holder of that
// bucket's reservation, and returns the cost of the earlier layers on it: the earlier holder's
// reservation is cancelled, and layer i reserves their cost with its own, at once. So a bucket
// holds one reservation at a time, which cancelling gives back whole: x/time/rate gives back
// the earlier of several made one after the other on one bucket only as far as its float
// arithmetic finds them adjacent, which at a rate such as 100 a minute leaves most of what they
// took spent.
func (g *bucketGroup) takeOver(st []layerState, i, cost int) int {
	n := g.before(st, i, cost)
	for j := i - 1; j >= 0; j-- {
		if e := &st[j]; e.lim == st[i].lim {
			e.r.CancelAt(e.at)
			e.r, e.shared = rate.Reservation{}, true
			break
		}
	}
	return n
}

// before returns the cost of the layers of st before i on the bucket and key of layer i.
func (g *bucketGroup) before(st []layerState, i, cost int) int {
	n := 0
	for j := range i {
		if st[j].lim == st[i].lim {
			n = addCost(n, g.layers[j].cost(cost))
		}
	}
	return n
}

// addCost returns a + b, costs of 0 or more, saturating at the largest int, which no bucket
// admits: wrapped, a sum of huge costs would reserve a negative one, which fills the bucket.
func addCost(a, b int) int {
	if a > math.MaxInt-b {
		return math.MaxInt
	}
	return a + b
}

// sharing returns how many layers of st, layer i among them, spend a request's cost in the
// bucket and key of layer i: each request spends its cost that many times there.
func (g *bucketGroup) sharing(st []layerState, i int) int {
	n := 0
	for j := range st {
		if st[j].lim == st[i].lim && !g.layers[j].Deferred {
			n++
		}
	}
	return max(n, 1)
}

// answer fills each layer's Decision, with its quota read under the locks: allowed when the
// request is admitted (at once or at a later place), or when it did not have to wait for it. A
// refused layer's wait is checked with x/time/rate's arithmetic from where the cancelled
// reservation left its bucket (counted at s.at), as TokenBucket.decide checks its own.
func (g *bucketGroup) answer(st []layerState, cost int, admitted bool) {
	for i := range st {
		s := &st[i]
		switch {
		case s.t == nil:
			s.d = Decision{Allowed: true, Limit: s.pol.Burst, Remaining: s.pol.Burst, Policy: s.pol}
		case s.lim != nil:
			s.d.Allowed = admitted || s.d.RetryAfter == 0
			tokens := s.lim.TokensAt(s.at)
			if !s.d.Allowed {
				n := addCost(g.layers[i].cost(cost), g.before(st, i, cost))
				s.d.RetryAfter = enough(s.pol, n, tokens, s.d.RetryAfter)
			}
			quota(&s.d, s.pol, tokens)
			if s.shared {
				s.d.Remaining /= g.sharing(st, i)
			}
		}
	}
}

// lockInOrder locks the distinct parts of st, in the order of their rank, appends them to locked
// in that order and returns it: every decision of several layers locks its parts in this one
// order, so that two never wait for each other's locks.
func lockInOrder(locked []*table, st []layerState) []*table {
	for _, s := range st {
		if s.t == nil {
			continue
		}
		j := len(locked)
		for j > 0 && locked[j-1].rank > s.t.rank {
			j--
		}
		if j > 0 && locked[j-1] == s.t {
			continue // a part of an earlier layer
		}
		locked = slices.Insert(locked, j, s.t)
	}
	for _, t := range locked {
		t.mu.Lock()
	}
	return locked
}
