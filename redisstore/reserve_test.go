package redisstore

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/retryafter/retryafter"
	"github.com/retryafter/retryafter/edge"
)

// TestWaitFleet: three replicas on one Redis, with WithWait, on real time: 30 requests of one
// client at once, spread over the replicas. Some wait for their place and are served, the rest
// are refused, and the served are never more than the bucket allows: the i-th served (from 1) no
// earlier than (i − burst) / rate after the first was sent.
func TestWaitFleet(t *testing.T) {
	const (
		limit = 20
		burst = 2
		n     = 30
	)
	addr := sharedAddr(t)
	prefix := testPrefix(t)
	var mu sync.Mutex
	var served []time.Duration
	var waited atomic.Int64
	hook := retryafter.WithDecisionHook(func(_ *http.Request, o retryafter.Outcome, _ retryafter.Decision) {
		if o == edge.Waited {
			waited.Add(1)
		}
	})
	start := time.Now()
	handler := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		mu.Lock()
		served = append(served, time.Since(start))
		mu.Unlock()
	})
	var srvs []*httptest.Server
	for range 3 {
		store := New(newClient(t, addr), limit, burst, WithPrefix(prefix), WithTimeout(testTimeout))
		srv := httptest.NewServer(retryafter.LimitWith(store, retryafter.WithWait(300*time.Millisecond), byHeader, hook)(handler))
		t.Cleanup(srv.Close)
		srvs = append(srvs, srv)
	}
	var refused atomic.Int64
	var wg sync.WaitGroup
	start = time.Now()
	for i := range n {
		wg.Go(func() {
			resp := fetchKey(t, srvs[i%len(srvs)], "client")
			switch {
			case resp == nil:
			case resp.StatusCode == http.StatusTooManyRequests:
				refused.Add(1)
			case resp.StatusCode != http.StatusOK:
				t.Errorf("status %d", resp.StatusCode)
			}
		})
	}
	wg.Wait()
	slices.Sort(served)
	for i, at := range served {
		if early := time.Duration(float64(i+1-burst)/limit*float64(time.Second)) - at; early > 2*time.Millisecond {
			t.Errorf("served %d of %d at %v: %v before the bucket allows", i+1, len(served), at, early)
		}
	}
	if waited.Load() == 0 || refused.Load() == 0 || int64(len(served))+refused.Load() != n {
		t.Errorf("%d served (%d after a wait), %d refused of %d", len(served), waited.Load(), refused.Load(), n)
	}
	t.Logf("%d served (%d after a wait), %d refused, the last at %v", len(served), waited.Load(), refused.Load(), served[len(served)-1])
}

// TestReserveHangUp: a place given back by Release goes to the next request: Redis answers it
// a wait shorter by the cost's refill.
func TestReserveHangUp(t *testing.T) {
	client := newClient(t, sharedAddr(t))
	store := New(client, 10, 1, WithPrefix(testPrefix(t)), withInjectedClock())
	ctx := t.Context()
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	if d, err := store.Reserve(ctx, "k", 1, now, time.Second); err != nil || !d.Allowed || d.RetryAfter != 0 {
		t.Fatalf("first: %+v, %v", d, err)
	}
	d, err := store.Reserve(ctx, "k", 1, now, time.Second)
	if err != nil || !d.Allowed || d.RetryAfter != 100*time.Millisecond {
		t.Fatalf("second: %+v, %v; want a place 100 ms away", d, err)
	}
	if d, err := store.Reserve(ctx, "k", 1, now, 150*time.Millisecond); err != nil || d.Allowed || d.RetryAfter != 200*time.Millisecond {
		t.Fatalf("third, 200 ms away beyond 150: %+v, %v; want refused with 200 ms", d, err)
	}
	if err := store.Release(ctx, "k", 1, now); err != nil {
		t.Fatal(err)
	}
	if d, err := store.Reserve(ctx, "k", 1, now, 150*time.Millisecond); err != nil || !d.Allowed || d.RetryAfter != 100*time.Millisecond {
		t.Fatalf("after the release: %+v, %v; want the place 100 ms away", d, err)
	}
}

// TestReserveTeachesTheRefusalMemory reserves a place behind a refusal the store remembers: the
// next decision of the key is told Redis's wait, which counts the place. The memory once kept
// the refusal from before the place, a wait one reservation short.
func TestReserveTeachesTheRefusalMemory(t *testing.T) {
	client := newClient(t, sharedAddr(t))
	ctx := context.Background()
	prefix := testPrefix(t)
	s := New(client, rate.Every(time.Second), 1, WithPrefix(prefix), WithTimeout(testTimeout), withCallerClock())
	truth := New(client, rate.Every(time.Second), 1, WithPrefix(prefix), WithTimeout(testTimeout), withCallerClock(), WithRefusalMemory(0))
	if d, err := s.Decide(ctx, "k", 1, t0); err != nil || !d.Allowed {
		t.Fatalf("first: %+v, %v", d, err)
	}
	if d, err := s.Decide(ctx, "k", 1, t0); err != nil || d.Allowed { // remembered
		t.Fatalf("second: %+v, %v", d, err)
	}
	if d, err := s.Reserve(ctx, "k", 1, t0, 5*time.Second); err != nil || !d.Allowed {
		t.Fatalf("the place: %+v, %v", d, err)
	}
	now := t0.Add(time.Millisecond)
	got, err := s.Decide(ctx, "k", 1, now)
	if err != nil {
		t.Fatal(err)
	}
	want, err := truth.Decide(ctx, "k", 1, now)
	if err != nil {
		t.Fatal(err)
	}
	if !agrees(got, want) {
		t.Fatalf("after the place: the store answers %+v, Redis %+v", got, want)
	}
}
