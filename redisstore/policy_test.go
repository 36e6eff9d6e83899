package redisstore

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/retryafter/retryafter"
	"github.com/retryafter/retryafter/edge"
)

// TestPolicy checks, on a real Redis, that every Decision of a Store names the Store's rate and
// burst, over random rates and bursts and every kind of answer: admitted, refused, a peek, a cost
// above the burst, a key in debt; and a Store at rate.Inf.
func TestPolicy(t *testing.T) {
	client := newClient(t, sharedAddr(t))
	rng := rand.New(rand.NewPCG(3, 4))
	for range 20 {
		limit := rate.Limit(0.01 + rng.Float64()*1000)
		burst := 1 + rng.IntN(50)
		s := New(client, limit, burst, WithPrefix(testPrefix(t)), WithTimeout(testTimeout), withInjectedClock())
		want := retryafter.Policy{Limit: limit, Burst: burst}
		now := t0
		var refused int
		for i := range 2*burst + 4 {
			cost := 1
			switch i % 5 {
			case 2:
				cost = 0
			case 4:
				cost = burst + 1
			}
			d := decide(t, s, "k", cost, now)
			if d.Policy != want {
				t.Fatalf("%v/s, burst %d, cost %d: Policy %+v, want %+v", limit, burst, cost, d.Policy, want)
			}
			if !d.Allowed {
				refused++
			}
		}
		charge(t, s, "k", 3*burst, now)
		if d := decide(t, s, "k", 0, now); d.Allowed || d.Policy != want {
			t.Fatalf("in debt: %+v, want refused with Policy %+v", d, want)
		}
		if refused == 0 {
			t.Fatalf("%v/s, burst %d: nothing refused", limit, burst)
		}
	}
	inf := New(client, rate.Inf, 7)
	if d := decide(t, inf, "k", 3, t0); !d.Allowed || d.Policy != (retryafter.Policy{Limit: rate.Inf, Burst: 7}) {
		t.Fatalf("rate.Inf: %+v", d)
	}
}

// TestAllPolicy checks, on a real Redis, that the combined decision of an All of Stores carries
// the policy of the layer that binds: the per-key limit while it has the least left or refuses,
// the shared one when it refuses; a layer at rate.Inf never binds.
func TestAllPolicy(t *testing.T) {
	client := newClient(t, sharedAddr(t))
	prefix := testPrefix(t)
	opts := func(name string) []Option {
		return []Option{WithPrefix(prefix + name), WithTimeout(testTimeout), withInjectedClock()}
	}
	perKey := New(client, rate.Every(time.Hour), 3, opts("key:")...)
	shared := New(client, rate.Every(time.Minute), 5, opts("all:")...)
	tokens := New(client, 1000, 100, opts("tokens:")...)
	free := New(client, rate.Inf, 1, opts("free:")...)
	all := retryafter.All(perKey, retryafter.Shared(shared, "all"), retryafter.ChargedAfter(tokens), free)
	if _, ok := perKey.Combine([]edge.Layer{{Limiter: perKey}, {Limiter: shared}, {Limiter: tokens, Deferred: true}, {Limiter: free}}); !ok {
		t.Fatal("the layers do not combine")
	}
	pk := retryafter.Policy{Limit: rate.Every(time.Hour), Burst: 3}
	sh := retryafter.Policy{Limit: rate.Every(time.Minute), Burst: 5}
	for i, want := range []struct {
		key     string
		allowed bool
		policy  retryafter.Policy
	}{
		{"a", true, pk}, {"a", true, pk}, {"a", true, pk}, // 2/3 then 1/3 then 0/3 left, against 4/5 .. 2/5
		{"a", false, pk},                 // refused by the per-key limit, for an hour
		{"b", true, sh}, {"b", true, sh}, // shared 1/5 then 0/5 left, against b's 2/3 then 1/3
		{"c", false, sh}, // refused by the shared limit, for a minute
	} {
		d, err := all.Decide(context.Background(), want.key, 1, t0)
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed != want.allowed || d.Policy != want.policy {
			t.Fatalf("decision %d (%s): allowed %v with Policy %+v, want %v with %+v", i, want.key, d.Allowed, d.Policy, want.allowed, want.policy)
		}
	}
}

// TestLocalFallbackPolicy checks that what a Store decides locally while Redis is down, alone
// and in an All, names the policy of the replica's share: the rate divided by the replicas and
// the burst divided by them (at least 1).
func TestLocalFallbackPolicy(t *testing.T) {
	client := newClient(t, sharedAddr(t))
	o := &outages{Scripter: keptKeys{client}}
	o.down.Store(true)
	prefix := testPrefix(t)
	opts := func(name string) []Option {
		return []Option{WithPrefix("{p}" + prefix + name), WithTimeout(testTimeout), withCallerClock(), WithLocalFallback(3)}
	}
	perKey := New(o, 30, 9, opts("key:")...)
	shared := New(o, 60, 2, opts("all:")...)
	d, err := perKey.Decide(context.Background(), "k", 1, t0)
	if err != nil || !d.Allowed || d.Policy != (retryafter.Policy{Limit: 10, Burst: 3}) {
		t.Fatalf("alone, decided locally: %+v, %v, want admitted with Policy {10 3}", d, err)
	}
	all := retryafter.All(perKey, retryafter.Shared(shared, "all"))
	// The share of the shared limit is 20/s with a burst of 1: it binds at once.
	for i, want := range []struct {
		allowed bool
		policy  retryafter.Policy
	}{{true, retryafter.Policy{Limit: 20, Burst: 1}}, {false, retryafter.Policy{Limit: 20, Burst: 1}}} {
		d, err := all.Decide(context.Background(), "j", 1, t0)
		if err != nil || d.Allowed != want.allowed || d.Policy != want.policy {
			t.Fatalf("in an All, decision %d decided locally: %+v, %v, want allowed %v with Policy %+v", i, d, err, want.allowed, want.policy)
		}
	}
}
