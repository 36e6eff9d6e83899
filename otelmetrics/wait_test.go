package otelmetrics

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/retryafter/retryafter"
	"github.com/retryafter/retryafter/edge"
)

// TestWaited: requests that wait for their place, through a wrapped TokenBucket, are counted as
// waited, apart from the admitted, and the time each waited is recorded.
func TestWaited(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rd := newReader(t)
		m := rd.m
		lim := m.Limiter("memory", retryafter.NewTokenBucket(10, 1))
		h := retryafter.LimitWith(lim, m.Option(), retryafter.WithWait(time.Second))(ok)
		const route = "/items/{id}"
		var wg sync.WaitGroup
		codes := make([]int, 3)
		for i := range codes {
			wg.Go(func() { codes[i] = serve(h, request("/items/7", "GET "+route)).Code })
		}
		wg.Wait()
		for _, c := range codes {
			if c != http.StatusOK {
				t.Fatalf("codes %v, want three 200s", codes)
			}
		}
		s := rd.collect()
		want(t, s, 1, "retryafter.decisions", decisions(edge.Admitted, "default", route)...)
		want(t, s, 2, "retryafter.decisions", decisions(edge.Waited, "default", route)...)
		want(t, s, 2, "retryafter.waited", quota("default", route)...)
		if p, _ := s.at("retryafter.waited", quota("default", route)...); p.sum < 0.2999 || p.sum > 0.3 {
			t.Fatalf("waited sum %v s, want the 0.1 + 0.2 s waited", p.sum)
		}
	})
}

// chargerOnly is a Charger that cannot promise places.
type chargerOnly struct{ tb *retryafter.TokenBucket }

func (c chargerOnly) Decide(ctx context.Context, key string, cost int, now time.Time) (retryafter.Decision, error) {
	return c.tb.Decide(ctx, key, cost, now)
}

func (c chargerOnly) Charge(ctx context.Context, key string, cost int, now time.Time) error {
	return c.tb.Charge(ctx, key, cost, now)
}

// TestWrappedChargerRefunded: a wrapped Charger that cannot promise places is still given back
// what it spent when another layer of an All refuses.
func TestWrappedChargerRefunded(t *testing.T) {
	m := newReader(t).m
	inner := retryafter.NewTokenBucket(1, 1)
	other := retryafter.NewTokenBucket(1, 1)
	ctx := context.Background()
	if d, _ := other.Decide(ctx, "k", 1, t0); !d.Allowed {
		t.Fatal("setup")
	}
	all := retryafter.All(m.Limiter("c", chargerOnly{inner}), other)
	if d, err := all.Decide(ctx, "k", 1, t0); err != nil || d.Allowed {
		t.Fatalf("All: %+v, %v; want a refusal", d, err)
	}
	if d, _ := inner.Decide(ctx, "k", 1, t0); !d.Allowed {
		t.Fatal("the wrapped Charger was not given back what the refused request spent")
	}
}
