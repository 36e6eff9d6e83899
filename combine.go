package retryafter

import (
	"context"
	"fmt"
	"time"
	"unsafe"

	"golang.org/x/time/rate"
)

// maxDebt is the longest a debt may take to repay: far longer than any client waits, and far
// from the 292 years at which a wait no longer fits a Duration.
const maxDebt = 100 * 365 * 24 * time.Hour

// Charge implements [Charger]: it spends cost tokens from key's bucket at now whether or not
// it holds them, so that the bucket may go into debt (one that would take more than 100 years
// to repay is forgiven down to that), or with a negative cost gives tokens back, never beyond
// the burst. It fails only when key is new and the table is full (see
// [WithMaxMemory]). Decide then refuses key, whatever its cost, until the debt is repaid, with the
// exact wait; a debt that would take longer than [rate.InfDuration] to repay is never.
func (b *TokenBucket) Charge(_ context.Context, key string, cost int, now time.Time) error {
	if cost == 0 || b.limit == rate.Inf {
		return nil
	}
	h := b.seed.sum(key)
	p := &b.parts[h%shardCount]
	p.mu.Lock()
	defer p.mu.Unlock()
	at := p.at(now)
	lim, ok := p.get(h, key)
	if !ok {
		if cost < 0 {
			return nil // a key not held has a full bucket: nothing to give back
		}
		if lim, _ = b.add(p, h, key, at, nil); lim == nil {
			return fmt.Errorf("retryafter: cannot charge %d to a new key: the table is full", cost)
		}
	}
	if b.limit > 0 {
		// A debt whose repayment does not fit a Duration would wrap x/time/rate's wait into a
		// negative one, which admits: beyond maxDebt, a debt is forgiven down to it.
		if most := lim.TokensAt(at) + float64(b.limit)*maxDebt.Seconds(); float64(cost) > most {
			cost = int(max(0, most))
		}
	}
	if cost > b.burst {
		// ReserveN takes at most the burst: raise it for the one reservation that goes into
		// debt, then lower it again; the tokens stay as the reservation left them.
		lim.SetBurstAt(at, cost)
		lim.ReserveN(at, cost)
		lim.SetBurstAt(at, b.burst)
		return nil
	}
	// A negative reservation gives tokens back; the bucket caps them at the burst when it next
	// looks at them.
	lim.ReserveN(at, cost)
	return nil
}

// Combine implements [Combiner]: TokenBuckets combine with each other, whichever their rates,
// bursts and tables, and decide a request under the locks of every part of their tables it
// touches, taken in one fixed order.
func (b *TokenBucket) Combine(layers []Layer) (Limiter, bool) {
	g := &bucketGroup{layers: append([]Layer(nil), layers...), sharedHash: make([]uint64, len(layers))}
	for i, l := range layers {
		tb, ok := l.Limiter.(*TokenBucket)
		if !ok {
			return nil, false
		}
		g.buckets = append(g.buckets, tb)
		if l.shared {
			g.sharedHash[i] = tb.seed.sum(l.sharedKey)
		}
	}
	return g, true
}

// A bucketGroup is the layers of TokenBuckets that an All decides in one step.
type bucketGroup struct {
	layers     []Layer
	buckets    []*TokenBucket
	sharedHash []uint64 // the hash of a Shared layer's one key in its bucket's table
}

// layerState is what a bucketGroup's Decide holds for one layer.
type layerState struct {
	b      *TokenBucket
	p      *part
	h      uint64 // the key's hash
	key    string
	cost   int
	lim    *rate.Limiter
	tokens float64 // in the bucket at the instant of the decision, before it
	need   int     // cost, and the costs of earlier layers on the same bucket
	d      Decision
}

// Decide implements [Limiter] under the locks of every part the layers touch: it reserves each
// layer's cost at one instant and, if any reservation is not due then, cancels every one of them
// at that instant, so that the refusal spends nothing in any layer.
func (g *bucketGroup) Decide(_ context.Context, key string, cost int, now time.Time) (Decision, error) {
	if cost < 0 {
		return Decision{}, fmt.Errorf("%w: %d", ErrNegativeCost, cost)
	}
	var d Decision
	g.decide(key, cost, now, &d, true)
	return d, nil
}

// decide is Decide for a cost of 0 or more, writing its Decision to out, with the quota only
// when asked (the middleware asks only when it writes rate-limit fields). A request of a few
// layers that each admit at once is decided by allow. Otherwise, with the quota, it looks at each
// bucket first and spends only once every layer holds its cost (the look gives the quota too);
// without, it reserves at once, and cancels every reservation if one is not due.
func (g *bucketGroup) decide(key string, cost int, now time.Time, out *Decision, quota bool) {
	if len(g.layers) <= fastLayers && g.allow(key, cost, now, out, quota) {
		return
	}
	// The state of each layer, on the stack for the usual few: zeroing sixteen of them would
	// cost as much as deciding two.
	n := len(g.layers)
	var few [4]layerState
	st := few[:]
	if n > len(few) {
		st = make([]layerState, n)
	}
	for i := range n {
		l, s := &g.layers[i], &st[i]
		s.b, s.cost = g.buckets[i], l.cost(cost)
		switch {
		case s.b.limit == rate.Inf:
		case l.shared:
			s.key, s.h = l.sharedKey, g.sharedHash[i]
			s.p = &s.b.parts[s.h%shardCount]
		default:
			s.key = l.key(key)
			s.h = s.b.seed.sum(s.key)
			s.p = &s.b.parts[s.h%shardCount]
		}
	}
	var ps [maxLayers]*part
	for i := range n {
		ps[i] = st[i].p
	}
	var order [maxLayers]*part
	locked := order[:sortParts(order[:], ps[:n])]
	at := lockAt(locked, now)

	admitted := true
	if !quota {
		admitted = g.reserve(st[:n], at)
	} else {
		admitted = g.look(st[:n], at)
	}
	var d Decision
	for i := range n {
		d = tighter(d, st[i].d, i == 0)
	}
	unlock(locked)
	d.Allowed = admitted
	lag := at.Sub(now)
	d.RetryAfter = late(d.RetryAfter, lag)
	d.Reset = late(d.Reset, lag)
	*out = d
}

// fastLayers is the most layers that allow takes.
const fastLayers = 4

// allow is decide for the request that every layer admits at once, of at most fastLayers
// layers. Under the locks, it spends each layer's cost with AllowN, as a TokenBucket alone does,
// which costs a layer about half of what reserving, or looking first, does; the quota, when
// asked, is each layer's after the spending. When a layer does not admit at once, it gives back
// what the layers before it spent, at the same instant, and reports false, leaving out alone:
// decide then decides the request again the long way, which finds each layer's wait, or admits
// within the slack.
//
// Giving back is a reservation of minus the cost at the instant of the spending, which leaves a
// rate.Limiter exactly as cancelling a reservation due at that instant does: the same tokens,
// from the same arithmetic, the same last instant and last event.
func (g *bucketGroup) allow(key string, cost int, now time.Time, out *Decision, quota bool) bool {
	n := len(g.layers)
	var (
		keys  [fastLayers]string
		costs [fastLayers]int
		hs    [fastLayers]uint64
		ps    [fastLayers]*part
	)
	// Each layer's key, hash and part, as decide finds them: written out in both, since a call
	// that does it costs an All of two 64 instructions, 2% of its decision.
	for i := range n {
		l, b := &g.layers[i], g.buckets[i]
		costs[i] = l.cost(cost)
		if b.limit == rate.Inf {
			continue
		}
		if l.shared {
			keys[i], hs[i] = l.sharedKey, g.sharedHash[i]
		} else {
			keys[i] = l.key(key)
			hs[i] = b.seed.sum(keys[i])
		}
		ps[i] = &b.parts[hs[i]%shardCount]
	}
	var order [fastLayers]*part
	locked := order[:sortParts(order[:], ps[:n])]
	at := lockAt(locked, now)
	var spent [fastLayers]*rate.Limiter
	admitted := true
	for i := range n {
		p := ps[i]
		if p == nil { // rate.Inf
			continue
		}
		lim, ok := p.get(hs[i], keys[i])
		if !ok {
			if lim, _ = g.buckets[i].add(p, hs[i], keys[i], at, spent[:i]); lim == nil {
				admitted = false
				break
			}
		}
		if !lim.AllowN(at, costs[i]) {
			admitted = false
			break
		}
		spent[i] = lim
	}
	if !admitted {
		for i := n - 1; i >= 0; i-- {
			if spent[i] != nil && costs[i] != 0 {
				spent[i].ReserveN(at, -costs[i])
			}
		}
		unlock(locked)
		return false
	}
	if !quota {
		unlock(locked)
		*out = Decision{Allowed: true}
		return true
	}
	d := Decision{Allowed: true}
	var e Decision // its quota, set whole for each layer
	for i := range n {
		b := g.buckets[i]
		if spent[i] == nil { // rate.Inf
			e.Limit, e.Remaining, e.Reset = b.burst, b.burst, 0
		} else {
			b.fillQuota(&e, spent[i].TokensAt(at))
		}
		if i == 0 || tighterQuota(d, e) {
			d.Limit, d.Remaining, d.Reset = e.Limit, e.Remaining, e.Reset
		}
	}
	unlock(locked)
	if at != now {
		d.Reset = late(d.Reset, at.Sub(now))
	}
	*out = d
	return true
}

// sortParts copies the distinct parts of ps, but nil, into order, sorted by address, and returns
// how many: every decide of a bucketGroup locks its parts in this order, so that two requests
// never wait for each other's locks.
func sortParts(order, ps []*part) int {
	locked := 0
	for _, p := range ps {
		if p == nil {
			continue
		}
		j := locked
		for j > 0 && uintptr(unsafe.Pointer(order[j-1])) > uintptr(unsafe.Pointer(p)) {
			j--
		}
		if j > 0 && order[j-1] == p {
			continue
		}
		for k := locked; k > j; k-- { // not copy, which costs a write barrier check
			order[k] = order[k-1]
		}
		order[j] = p
		locked++
	}
	return locked
}

// lockAt locks parts, in order, and returns the one instant every layer is decided at: the
// latest instant any of them has seen, now or later, which each then records.
func lockAt(parts []*part, now time.Time) time.Time {
	at := now
	for _, p := range parts {
		p.mu.Lock()
		if lat := p.at(now); at.Before(lat) {
			at = lat
		}
	}
	if at != now { // else each part took now as its latest already
		for _, p := range parts {
			p.latest = at
		}
	}
	return at
}

// unlock unlocks parts.
func unlock(parts []*part) {
	for _, p := range parts {
		p.mu.Unlock()
	}
}

// look decides the layers of st at at, their parts locked, by looking at each bucket first and
// spending only once every layer holds its cost; it fills each layer's quota. Layers on the same
// bucket count together, as if reserved one after the other.
func (g *bucketGroup) look(st []layerState, at time.Time) bool {
	admitted := true
	var held [maxLayers]*rate.Limiter // each layer's bucket: a later layer's new key keeps them
	for i := range st {
		s := &st[i]
		if s.p == nil { // rate.Inf
			s.d = Decision{Allowed: true, Limit: s.b.burst, Remaining: s.b.burst}
			continue
		}
		lim, ok := s.p.get(s.h, s.key)
		if !ok {
			var wait time.Duration
			if lim, wait = s.b.add(s.p, s.h, s.key, at, held[:i]); lim == nil {
				admitted = false
				s.d = Decision{RetryAfter: wait, Limit: s.b.burst, Reset: wait}
				continue
			}
		}
		held[i] = lim
		s.lim, s.tokens, s.need = lim, lim.TokensAt(at), s.cost
		for j := range i {
			if st[j].lim == lim {
				s.need += st[j].cost
			}
		}
		if !s.b.admits(s.need, s.tokens) {
			admitted = false
		}
	}
	if admitted {
		for i := range st {
			s := &st[i]
			if s.lim == nil {
				continue
			}
			if !s.lim.AllowN(at, s.cost) {
				s.lim.ReserveN(at, s.cost) // due within the slack: the bucket lends it
			}
			s.d.Allowed = true
			s.b.fillQuota(&s.d, s.tokens-float64(s.need))
		}
	} else {
		// Each layer's wait is its own reservation's delay; then every reservation is cancelled,
		// in the reverse order, at the same instant.
		var rs [maxLayers]rate.Reservation // only on this path: zeroing it costs
		for i := range st {
			s := &st[i]
			if s.lim == nil {
				continue
			}
			rs[i] = *s.lim.ReserveN(at, s.cost)
			if wait := rs[i].DelayFrom(at); wait <= slack {
				s.d.Allowed = true
			} else {
				if wait != rate.InfDuration {
					wait -= slack
				}
				s.d.RetryAfter = wait
			}
		}
		for i := len(st) - 1; i >= 0; i-- {
			rs[i].CancelAt(at) // a zero Reservation cancels nothing
		}
		for i := range st {
			if s := &st[i]; s.lim != nil {
				s.b.fillQuota(&s.d, s.lim.TokensAt(at))
			}
		}
	}
	return admitted
}

// reserve decides the layers of st at at, their parts locked, by reserving each layer's cost
// and, if any reservation is not due, cancelling every one of them at at, in the reverse order.
// It leaves the quota out: the look that gives it would cost a layer as much again.
func (g *bucketGroup) reserve(st []layerState, at time.Time) bool {
	var few [4]rate.Reservation
	rs := few[:]
	if len(st) > len(few) {
		rs = make([]rate.Reservation, len(st))
	}
	admitted := true
	var held [maxLayers]*rate.Limiter // as in look
	for i := range st {
		s := &st[i]
		if s.p == nil { // rate.Inf
			s.d.Allowed = true
			continue
		}
		lim, ok := s.p.get(s.h, s.key)
		if !ok {
			var wait time.Duration
			if lim, wait = s.b.add(s.p, s.h, s.key, at, held[:i]); lim == nil {
				admitted = false
				s.d.RetryAfter = wait
				continue
			}
		}
		held[i] = lim
		rs[i] = *lim.ReserveN(at, s.cost)
		if wait := rs[i].DelayFrom(at); wait <= slack {
			s.d.Allowed = true
		} else {
			admitted = false
			if wait != rate.InfDuration {
				wait -= slack
			}
			s.d.RetryAfter = wait
		}
	}
	if !admitted {
		for i := len(st) - 1; i >= 0; i-- {
			rs[i].CancelAt(at) // a zero Reservation cancels nothing
		}
	}
	return admitted
}
