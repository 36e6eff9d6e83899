package edge

import "golang.org/x/time/rate"

// Binding returns the Decision of a request decided in several layers from the Decision of each:
// refused if any refused, with the longest wait, and the Limit, Remaining and Reset of the layer
// that binds, as the root package's All describes. It is for the Limiters that decide several
// layers at once (a Combiner), so that they report as All does. It returns the zero Decision for none.
//
// The Decision it returns lists ds in its [Decision.Layers] (each one's own layers, when it has
// them, in its place), when there are several.
func Binding(ds ...Decision) Decision {
	if len(ds) == 0 {
		return Decision{}
	}
	b := 0
	for i := 1; i < len(ds); i++ {
		if binds(&ds[b], &ds[i]) {
			b = i
		}
	}
	return withLayers(ds[b], ds)
}

// withLayers returns d, the binding Decision of ds, listing ds, or their own layers where they
// have them, as its layers when there are several.
func withLayers(d Decision, ds []Decision) Decision {
	n := 0
	for _, e := range ds {
		n += max(1, len(e.Layers()))
	}
	if n < 2 {
		d.layers = nil
		return d
	}
	all := newLayers(n)
	i := 0
	for _, e := range ds {
		if l := e.Layers(); l != nil {
			i += copy((*all)[i:], l)
		} else {
			(*all)[i] = e
			i++
		}
	}
	d.layers = all
	return d
}

// layerList is the list of a Decision's layers with room for two, the usual All, so that the
// list and its Decisions are one allocation.
type layerList struct {
	ds  []Decision
	two [2]Decision
}

// newLayers returns a list of n Decisions for Decision.layers.
func newLayers(n int) *[]Decision {
	l := new(layerList)
	if n <= len(l.two) {
		l.ds = l.two[:n]
	} else {
		l.ds = make([]Decision, n)
	}
	return &l.ds
}

// binds reports whether e, the Decision of one more layer (or group), binds rather than d, the
// binding one so far: refused where d is admitted, or refused with a longer wait, or, both
// admitted, with less Remaining, which the request's cost meets first, so that the Decision's
// Remaining is the largest cost every layer admits. The first of equals binds.
func binds(d, e *Decision) bool {
	switch {
	case d.Allowed != e.Allowed:
		return !e.Allowed
	case !e.Allowed:
		return e.RetryAfter > d.RetryAfter
	}
	return tighterQuota(d, e)
}

// tighterQuota reports whether e's quota binds rather than d's: it has one, and less of it is
// left. (A share of the Limit would bind the layer of 30 of 100 left over one of 2 of 4, and
// tell 30 where 2 more are admitted.)
//
// A layer of rate.Inf admits any cost, whatever Remaining it reports (its burst), so it binds
// only when no other has a quota.
func tighterQuota(d, e *Decision) bool {
	switch {
	case e.Limit <= 0:
		return false
	case d.Limit <= 0:
		return true
	case unlimited(d) != unlimited(e):
		return unlimited(d)
	}
	return e.Remaining < d.Remaining
}

// unlimited reports whether d is a layer of rate.Inf.
func unlimited(d *Decision) bool { return d.Policy.Limit == rate.Inf }
