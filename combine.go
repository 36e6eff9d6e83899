package retryafter

import (
	"context"
	"fmt"
	"hash/maphash"
	"time"
	"unsafe"

	"golang.org/x/time/rate"
)

// Charge implements [Charger]: it spends cost tokens from key's bucket at now whether or not
// it holds them, so that the bucket may go into debt, or with a negative cost gives tokens back,
// never beyond the burst. It fails only when key is new and the table is full (see
// [WithMaxMemory]). Decide then refuses key, whatever its cost, until the debt is repaid, with the
// exact wait; a debt that would take longer than [rate.InfDuration] to repay is never.
func (b *TokenBucket) Charge(_ context.Context, key string, cost int, now time.Time) error {
	if cost == 0 || b.limit == rate.Inf {
		return nil
	}
	p := &b.parts[maphash.String(b.seed, key)%shardCount]
	p.mu.Lock()
	defer p.mu.Unlock()
	at := p.at(now)
	lim, ok := p.get(key)
	if !ok {
		if cost < 0 {
			return nil // a key not held has a full bucket: nothing to give back
		}
		if lim, _ = b.add(p, key, at); lim == nil {
			return fmt.Errorf("retryafter: cannot charge %d to a new key: the table is full", cost)
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
	g := &bucketGroup{layers: append([]Layer(nil), layers...)}
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
	layers  []Layer
	buckets []*TokenBucket
}

// layerState is what a bucketGroup's Decide holds for one layer.
type layerState struct {
	b    *TokenBucket
	p    *part
	key  string
	cost int
	lim  *rate.Limiter
	r    rate.Reservation // a copy, which keeps it off the heap
	d    Decision
}

// Decide implements [Limiter]: it reserves each layer's cost in its bucket at one instant and,
// if any reservation is not due then, cancels all of them at that instant, so that the refusal
// spends nothing in any layer.
func (g *bucketGroup) Decide(_ context.Context, key string, cost int, now time.Time) (Decision, error) {
	if cost < 0 {
		return Decision{}, fmt.Errorf("%w: %d", ErrNegativeCost, cost)
	}
	var st [maxLayers]layerState
	n := len(g.layers)
	for i := range n {
		l, s := &g.layers[i], &st[i]
		s.b, s.key, s.cost = g.buckets[i], l.key(key), l.cost(cost)
		if s.b.limit != rate.Inf {
			s.p = &s.b.parts[maphash.String(s.b.seed, s.key)%shardCount]
		}
	}
	// Lock each part once, in the order of their addresses, which every Decide shares, so that
	// two requests never wait for each other's locks.
	var order [maxLayers]*part
	locked := 0
	for i := range n {
		p := st[i].p
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
		copy(order[j+1:locked+1], order[j:locked])
		order[j] = p
		locked++
	}
	for _, p := range order[:locked] {
		p.mu.Lock()
	}
	// One instant for every layer: the latest any of their parts has seen.
	at := now
	for _, p := range order[:locked] {
		if lat := p.at(now); at.Before(lat) {
			at = lat
		}
	}
	for _, p := range order[:locked] {
		p.latest = at
	}

	refused := false
	for i := range n {
		s := &st[i]
		if s.p == nil { // rate.Inf
			s.d = Decision{Allowed: true, Limit: s.b.burst, Remaining: s.b.burst}
			continue
		}
		lim, ok := s.p.get(s.key)
		if !ok {
			var wait time.Duration
			if lim, wait = s.b.add(s.p, s.key, at); lim == nil {
				refused = true
				s.d = Decision{RetryAfter: wait, Limit: s.b.burst, Reset: wait}
				continue
			}
		}
		s.lim, s.r = lim, *lim.ReserveN(at, s.cost)
		if wait := s.r.DelayFrom(at); wait <= slack {
			s.d.Allowed = true
		} else {
			refused = true
			if wait != rate.InfDuration {
				wait -= slack
			}
			s.d.RetryAfter = wait
		}
	}
	if refused {
		for i := n - 1; i >= 0; i-- {
			st[i].r.CancelAt(at) // a zero Reservation cancels nothing
		}
	}
	var d Decision
	for i := range n {
		s := &st[i]
		if s.lim != nil {
			s.b.fillQuota(&s.d, s.lim.TokensAt(at))
		}
		d = tighter(d, s.d, i == 0)
	}
	for _, p := range order[:locked] {
		p.mu.Unlock()
	}
	d.Allowed = !refused
	lag := at.Sub(now)
	d.RetryAfter = late(d.RetryAfter, lag)
	d.Reset = late(d.Reset, lag)
	return d, nil
}
