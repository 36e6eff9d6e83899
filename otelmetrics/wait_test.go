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

// TestWrapperDryRunOfAStoreThatCannotWait: a Limiter that cannot promise places (no edge.Reserver,
// like httpratestore.Store or redisstore.Leased) must be decided the same wrapped or not. In a
// dry run with WithWait, the unwrapped one's would-be refusal is dry_run_refused ("only a
// Limiter that can promise a place waits"); wrapped by m.Limiter it becomes dry_run_waited.
func TestWrapperDryRunOfAStoreThatCannotWait(t *testing.T) {
	outcomes := func(l retryafter.Limiter) []retryafter.Outcome {
		var got []retryafter.Outcome
		h := retryafter.LimitWith(l,
			retryafter.WithClock(func() time.Time { return t0 }),
			retryafter.WithDryRun(true),
			retryafter.WithWait(time.Second),
			retryafter.WithDecisionHook(func(_ *http.Request, o retryafter.Outcome, _ retryafter.Decision) {
				got = append(got, o)
			}))(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
		for range 2 {
			serve(h, request("/items/7", "GET /items/{id}"))
		}
		return got
	}
	m := newReader(t).m
	bare := outcomes(&fakeStore{l: retryafter.NewTokenBucket(10, 1)})
	wrapped := outcomes(m.Limiter("store", &fakeStore{l: retryafter.NewTokenBucket(10, 1)}))
	t.Logf("unwrapped: %v, wrapped: %v", bare, wrapped)
	if len(bare) != len(wrapped) || bare[1] != wrapped[1] {
		t.Fatalf("wrapping changed the decision: unwrapped %v, wrapped %v", bare, wrapped)
	}
}

// combStore is a store like redisstore.Store: a Charger and a Combiner whose combined Limiter
// decides its layers in one step but cannot promise places (no Reserve/Release), as
// redisstore's group cannot. It combines only layers of its own.
type combStore struct{ tb *retryafter.TokenBucket }

func (s *combStore) Decide(ctx context.Context, key string, cost int, now time.Time) (retryafter.Decision, error) {
	return s.tb.Decide(ctx, key, cost, now)
}

func (s *combStore) Charge(ctx context.Context, key string, cost int, now time.Time) error {
	return s.tb.Charge(ctx, key, cost, now)
}

func (s *combStore) Combine(layers []edge.Layer) (retryafter.Limiter, bool) {
	if len(layers) != 1 || layers[0].Limiter != retryafter.Limiter(s) {
		return nil, false
	}
	return combGroup{s}, true
}

// combGroup is combStore's combined Limiter: Decide only.
type combGroup struct{ s *combStore }

func (g combGroup) Decide(ctx context.Context, key string, cost int, now time.Time) (retryafter.Decision, error) {
	return g.s.Decide(ctx, key, cost, now)
}

// TestWrappedCombinedStoreGivenBack: in an All of a store that combines without promising
// places (as redisstore does) and a TokenBucket that gives a place later, a request admitted at
// once by the store and given a place by the bucket is released when its client leaves during
// the wait: the store gets its token back, wrapped or not. Wrapped, its combined Limiter claimed
// to promise places, and its Release gave nothing back.
func TestWrappedCombinedStoreGivenBack(t *testing.T) {
	ctx := context.Background()
	run := func(wrap func(string, retryafter.Limiter) retryafter.Limiter) int {
		store := &combStore{retryafter.NewTokenBucket(1, 5)}
		mem := retryafter.NewTokenBucket(10, 1)
		if d, _ := mem.Decide(ctx, "k", 1, t0); !d.Allowed {
			t.Fatal("setup")
		}
		all := retryafter.All(wrap("store", store), wrap("mem", mem)).(edge.Reserver)
		d, err := all.Reserve(ctx, "k", 1, t0, time.Second)
		if err != nil || !d.Allowed || d.RetryAfter <= 0 {
			t.Fatalf("Reserve: %+v, %v; want a place later", d, err)
		}
		// The client leaves while it waits: the edge's waiter releases its place.
		if err := all.Release(ctx, "k", 1, t0); err != nil {
			t.Fatal(err)
		}
		peek, _ := store.tb.Decide(ctx, "k", 0, t0)
		return peek.Remaining
	}
	bare := run(func(_ string, l retryafter.Limiter) retryafter.Limiter { return l })
	m := newReader(t).m
	wrapped := run(m.Limiter)
	if bare != wrapped {
		t.Fatalf("store's tokens after a released place: unwrapped %d, wrapped %d", bare, wrapped)
	}
}
