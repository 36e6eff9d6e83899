package limitertest

import (
	"context"
	"testing"
	"time"

	"github.com/retryafter/retryafter/edge"
)

// reserveProperties runs the properties of an edge.Reserver, when the Limiter of c is one: what
// a Core configured to wait (retryafter.WithWait) relies on.
func reserveProperties(t *testing.T, c Config) {
	if _, ok := c.New(t).(edge.Reserver); !ok {
		t.Skip("limitertest: the Limiter is not an edge.Reserver: waiting not checked")
	}
	if c.CannotWait {
		t.Run("RefusesAsDecide", func(t *testing.T) { reserveRefuses(t, c, time.Second, time.Hour) })
		return
	}
	t.Run("HoldsAPlace", func(t *testing.T) { reserveHoldsAPlace(t, c) })
	t.Run("BeyondMaxWaitRefuses", func(t *testing.T) { reserveRefuses(t, c, -c.Resolution, -time.Second) })
	t.Run("ReleaseGivesBack", func(t *testing.T) { releaseGivesBack(t, c) })
}

// reserver decides and reserves on one Reserver and fails the test on an error.
type reserver struct {
	checker
	r edge.Reserver
}

func newReserver(t *testing.T, c Config) *reserver {
	k := newChecker(t, c)
	return &reserver{checker: *k, r: k.l.(edge.Reserver)}
}

func (k *reserver) reserve(cost int, now time.Time, maxWait time.Duration) edge.Decision {
	k.t.Helper()
	d, err := k.r.Reserve(context.Background(), k.key, cost, now, maxWait)
	if err != nil {
		k.t.Fatalf("Reserve(cost %d, %v, maxWait %v): %v", cost, now, maxWait, err)
	}
	if !d.Allowed && d.RetryAfter <= 0 {
		k.t.Fatalf("Reserve(cost %d, %v, maxWait %v) = %+v: a refusal without a wait", cost, now, maxWait, d)
	}
	return d
}

// reserveHoldsAPlace: a request refused with a wait of w, reserved with a maxWait of w, is
// admitted with that very wait, and its place is taken: another reserved at the same instant
// with the same maxWait is refused, and a request at the end of w is refused, then admitted at
// the end of its own wait; with maxWait 0, Reserve is Decide on a fresh key.
func reserveHoldsAPlace(t *testing.T, c Config) {
	k := newReserver(t, c)
	now := c.Start
	if d := k.reserve(1, now, 0); !d.Allowed || d.RetryAfter != 0 {
		t.Fatalf("Reserve with maxWait 0 on a fresh key: %+v, want admitted at once", d)
	}
	w := k.spend(c.Burst-1, now).RetryAfter
	d := k.reserve(1, now, w)
	if !d.Allowed || d.RetryAfter != w {
		t.Fatalf("Reserve with maxWait %v of a request Decide refuses with that wait: %+v, want admitted with RetryAfter %v", w, d, w)
	}
	if d := k.reserve(1, now, w); d.Allowed {
		t.Fatalf("a second Reserve with maxWait %v at the same instant admitted, its place taken: %+v", w, d)
	}
	next := k.decide(1, now.Add(w))
	if next.Allowed {
		t.Fatalf("a request at the end of a reserved wait of %v admitted: the reservation spent nothing", w)
	}
	if d := k.decide(1, now.Add(w+next.RetryAfter)); !d.Allowed {
		t.Fatalf("refused at the end of the wait %v after a reserved place: %+v", next.RetryAfter, d)
	}
}

// reserveRefuses: a request refused by Decide with a wait of w, reserved with a maxWait of w
// plus each of more (shorter by the Limiter's resolution, for one that waits; longer, for one
// that cannot), and of 0, is refused as Decide refuses it (its wait, quota, policy and layers),
// and spends nothing.
func reserveRefuses(t *testing.T, c Config, more ...time.Duration) {
	k := newReserver(t, c)
	now := c.Start
	refused := k.spend(c.Burst, now)
	w := refused.RetryAfter
	for _, maxWait := range append([]time.Duration{0}, more...) {
		if maxWait != 0 {
			maxWait += w
		}
		if d := k.reserve(1, now, maxWait); !sameRefusal(d, refused) {
			t.Fatalf("Reserve with maxWait %v of a request Decide refuses: %+v (layers %+v), want Decide's refusal %+v (layers %+v)",
				maxWait, d, d.Layers(), refused, refused.Layers())
		}
	}
	if d := k.decide(1, now.Add(w)); !d.Allowed {
		t.Fatalf("refused at the end of the wait %v after refused reservations: %+v", w, d)
	}
}

// releaseGivesBack: a reserved place released at once is as if it had not been taken: the next
// request is refused with the wait the reserved one was told, and admitted at its end.
func releaseGivesBack(t *testing.T, c Config) {
	k := newReserver(t, c)
	now := c.Start
	w := k.spend(c.Burst, now).RetryAfter
	if d := k.reserve(1, now, w); !d.Allowed || d.RetryAfter != w {
		t.Fatalf("Reserve with maxWait %v: %+v, want admitted with RetryAfter %v", w, d, w)
	}
	if err := k.r.Release(context.Background(), k.key, 1, now); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if d := k.decide(1, now); d.Allowed || d.RetryAfter != w {
		t.Fatalf("after the place was released: %+v, want refused with RetryAfter %v, as before it was taken", d, w)
	}
	if d := k.decide(1, now.Add(w)); !d.Allowed {
		t.Fatalf("refused at the end of the wait %v of a released place: %+v", w, d)
	}
}

// sameRefusal reports whether a and b refuse alike: the same wait, quota and policy, in each of
// their layers too.
func sameRefusal(a, b edge.Decision) bool {
	if a.Allowed || b.Allowed || !sameQuota(a, b) || len(a.Layers()) != len(b.Layers()) {
		return false
	}
	for i, l := range a.Layers() {
		if m := b.Layers()[i]; l.Allowed != m.Allowed || !sameQuota(l, m) {
			return false
		}
	}
	return true
}

func sameQuota(a, b edge.Decision) bool {
	return a.RetryAfter == b.RetryAfter && a.Limit == b.Limit && a.Remaining == b.Remaining &&
		a.Reset == b.Reset && a.Policy == b.Policy
}
