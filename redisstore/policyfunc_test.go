package redisstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/retryafter/retryafter"
	"github.com/retryafter/retryafter/edge"
	"github.com/retryafter/retryafter/internal/testkit"
)

// plans are the policies the tests of WithPolicyFunc change keys between: the store's own, some
// named plans, plans that leave out a rate or a burst, and one without limit.
var plans = []retryafter.Policy{
	{},
	{Name: "free", Limit: rate.Every(2 * time.Second), Burst: 2},
	{Name: "pro", Limit: rate.Every(100 * time.Millisecond), Burst: 20},
	{Name: "burst only", Burst: 7},
	{Name: "rate only", Limit: rate.Every(time.Minute)},
	{Name: "odd", Limit: rate.Every(333333 * time.Microsecond), Burst: 3},
	{Name: "open", Limit: rate.Inf, Burst: 4},
}

// planSwitch is a policy function whose one plan the test changes.
type planSwitch struct {
	p atomic.Pointer[retryafter.Policy]
}

func (s *planSwitch) set(p retryafter.Policy) { s.p.Store(&p) }
func (s *planSwitch) of(string) retryafter.Policy {
	if p := s.p.Load(); p != nil {
		return *p
	}
	return retryafter.Policy{}
}

// planModel is an in-memory reference for a Store whose keys change plans: a TokenBucket with the
// same policy function, and the one rule in which the Store differs from it, that a key whose
// bucket is full when its plan changes starts the new plan full, as a key never seen does (Redis
// forgets a full key; the TokenBucket keeps it until it needs the room).
type planModel struct {
	*retryafter.TokenBucket
	plan *planSwitch
	last map[string]retryafter.Policy // the last limited plan each key was decided at
}

func newPlanModel(limit rate.Limit, burst int, plan *planSwitch) *planModel {
	return &planModel{retryafter.NewTokenBucket(limit, burst, retryafter.WithPolicyFunc(plan.of)), plan, map[string]retryafter.Policy{}}
}

// sync applies that rule to key at now, before a decision or a charge.
func (m *planModel) sync(key string, now time.Time) {
	cur := m.plan.of(key)
	if cur.Limit == rate.Inf {
		return // the bucket is not touched
	}
	old, seen := m.last[key]
	m.last[key] = cur
	if !seen || old == cur {
		return
	}
	m.plan.set(old)
	d, _ := m.TokenBucket.Decide(context.Background(), key, 0, now)
	m.plan.set(cur)
	if d.Remaining == d.Limit {
		m.TokenBucket.Charge(context.Background(), key, -1<<30, now) // full at the new plan
	}
}

func (m *planModel) Decide(ctx context.Context, key string, cost int, now time.Time) (retryafter.Decision, error) {
	m.sync(key, now)
	return m.TokenBucket.Decide(ctx, key, cost, now)
}

func (m *planModel) Charge(ctx context.Context, key string, cost int, now time.Time) error {
	m.sync(key, now)
	return m.TokenBucket.Charge(ctx, key, cost, now)
}

// agreesAcrossPlans reports whether got is the decision want is, as agrees does, with the same
// Limit and Policy, and waits within a billionth more: x/time/rate keeps a bucket's tokens in a
// float64, whose error a change to a slower rate multiplies, where the scripts count in whole
// nanoseconds.
func agreesAcrossPlans(got, want retryafter.Decision) bool {
	scale := max(want.Reset, want.RetryAfter%rate.InfDuration)
	near := func(a, b time.Duration) bool { return (a - b).Abs() <= 2*time.Microsecond+scale/1e9 }
	return got.Allowed == want.Allowed && got.Remaining == want.Remaining && got.Limit == want.Limit &&
		got.Policy == want.Policy && near(got.RetryAfter, want.RetryAfter) && near(got.Reset, want.Reset)
}

// TestPolicyFuncAgreesWithTokenBucket changes a key's plan at random between its requests and
// charges (into debt, and back), and has them decided on a real Redis by two replicas' Stores in
// turn and by an in-memory TokenBucket with the same plans: they must agree, to Redis's
// microsecond, on every decision, its Remaining, Reset and Policy. So the tokens a key holds
// (a debt included) stay across a change of plan in Redis as they do in memory, capped at the
// new burst, the new rate applies from the change, and the replicas agree on it.
func TestPolicyFuncAgreesWithTokenBucket(t *testing.T) {
	client := newClient(t, sharedAddr(t))
	ctx := context.Background()
	for seed := range 6 {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			var plan planSwitch
			prefix := testPrefix(t)
			opts := []Option{WithPrefix(prefix), WithTimeout(testTimeout), withInjectedClock(), WithPolicyFunc(plan.of)}
			// One replica with refusals remembered and refunds, or two without either: a
			// replica's remembered refusal tells too short a wait once another spends the key
			// (WithRefusalMemory), which is no part of what this test checks.
			fleet := []*Store{New(client, 1, 5, opts...)}
			refunds := seed%2 == 0
			if !refunds {
				opts = append(opts, WithRefusalMemory(0))
				fleet = []*Store{New(client, 1, 5, opts...), New(client, 1, 5, opts...)}
			}
			ref := newPlanModel(1, 5, &plan)
			rng := rand.New(rand.NewPCG(uint64(seed), 30))
			now := t0
			changes := 0
			for i := range 600 {
				if rng.IntN(6) == 0 {
					plan.set(plans[rng.IntN(len(plans))])
					changes++
				}
				now = now.Add(time.Duration(rng.Int64N(int64(700*time.Millisecond))) / time.Microsecond * time.Microsecond)
				s := fleet[rng.IntN(len(fleet))]
				if rng.IntN(10) == 0 {
					cost := 1 + rng.IntN(12)
					if refunds && rng.IntN(2) == 0 {
						cost = -cost
					}
					charge(t, s, "k", cost, now)
					if err := ref.Charge(ctx, "k", cost, now); err != nil {
						t.Fatal(err)
					}
				}
				cost := rng.IntN(4)
				got := decide(t, s, "k", cost, now)
				want, _ := ref.Decide(ctx, "k", cost, now)
				if !agreesAcrossPlans(got, want) {
					t.Fatalf("request %d, cost %d, plan %+v: %+v, in memory %+v", i, cost, plan.of(""), got, want)
				}
			}
			if changes == 0 {
				t.Fatal("no plan changed")
			}
		})
	}
}

// TestPolicyFuncAllAgreesWithTokenBuckets does the same for an All of a per-key layer whose plans
// change and a shared layer of its own plan, decided in one round trip (Combine) and in memory:
// the decisions agree, and so do the layers of every admission.
func TestPolicyFuncAllAgreesWithTokenBuckets(t *testing.T) {
	client := newClient(t, sharedAddr(t))
	ctx := context.Background()
	var plan planSwitch
	shared := func(string) retryafter.Policy { return retryafter.Policy{Name: "service", Limit: 8, Burst: 12} }
	prefix := testPrefix(t)
	opts := func(name string, fn func(string) retryafter.Policy) []Option {
		return []Option{WithPrefix(prefix + name), WithTimeout(testTimeout), withInjectedClock(), WithPolicyFunc(fn)}
	}
	perKey := New(client, 1, 5, opts("key:", plan.of)...)
	service := New(client, 1, 1, opts("all:", shared)...)
	if _, ok := perKey.Combine([]edge.Layer{{Limiter: perKey}, {Limiter: service}}); !ok {
		t.Fatal("the layers do not combine")
	}
	all := retryafter.All(perKey, retryafter.Shared(service, "all"))
	ref := retryafter.All(newPlanModel(1, 5, &plan),
		retryafter.Shared(retryafter.NewTokenBucket(1, 1, retryafter.WithPolicyFunc(shared)), "all"))
	rng := rand.New(rand.NewPCG(9, 9))
	now := t0
	for i := range 600 {
		if rng.IntN(5) == 0 {
			plan.set(plans[rng.IntN(len(plans))])
		}
		now = now.Add(time.Duration(rng.Int64N(int64(300*time.Millisecond))) / time.Microsecond * time.Microsecond)
		key := fmt.Sprint("k", rng.IntN(3))
		cost := rng.IntN(4)
		got, err := all.Decide(ctx, key, cost, now)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := ref.Decide(ctx, key, cost, now)
		if !agreesAcrossPlans(got, want) {
			t.Fatalf("request %d (%s), cost %d, plan %+v: %+v, in memory %+v", i, key, cost, plan.of(""), quota(got), quota(want))
		}
		if !got.Allowed {
			// All reports the layers of a refusal it decided layer by layer, as the in-memory
			// reference is, before it gives back what they spent.
			continue
		}
		gl, wl := got.Layers(), want.Layers()
		if len(gl) != len(wl) {
			t.Fatalf("request %d: %d layers, in memory %d", i, len(gl), len(wl))
		}
		for j := range gl {
			if !agreesAcrossPlans(gl[j], wl[j]) {
				t.Fatalf("request %d (%s), layer %d: %+v, in memory %+v", i, key, j, gl[j], wl[j])
			}
		}
	}
}

// TestPolicyFuncReadsStateOfOwnPolicy spends a key with a Store that has no policy function,
// then reads it with one that has: the state, written without a policy, is read at the Store's
// own, and its tokens carry to the key's plan.
func TestPolicyFuncReadsStateOfOwnPolicy(t *testing.T) {
	client := newClient(t, sharedAddr(t))
	prefix := testPrefix(t)
	opts := []Option{WithPrefix(prefix), WithTimeout(testTimeout), withInjectedClock()}
	before := New(client, 1, 5, opts...)
	decide(t, before, "k", 3, t0)
	pro := retryafter.Policy{Name: "pro", Limit: 10, Burst: 20}
	after := New(client, 1, 5, append(opts, WithPolicyFunc(func(string) retryafter.Policy { return pro }))...)
	if d := decide(t, after, "k", 0, t0); d.Remaining != 2 || d.Policy != pro {
		t.Fatalf("after policies were turned on: %+v, want the 2 tokens left under %+v", d, pro)
	}
}

// TestPolicyFuncForgetsRefusal has a Store remember a refusal under one plan, then moves the key
// to another: the next request is asked of Redis, and gets the new plan's wait.
func TestPolicyFuncForgetsRefusal(t *testing.T) {
	client := newClient(t, sharedAddr(t))
	var plan planSwitch
	free := retryafter.Policy{Name: "free", Limit: rate.Every(time.Minute), Burst: 1}
	pro := retryafter.Policy{Name: "pro", Limit: rate.Every(time.Second), Burst: 10}
	plan.set(free)
	s := New(client, 1, 1, WithPrefix(testPrefix(t)), WithTimeout(testTimeout), withInjectedClock(), WithPolicyFunc(plan.of))
	decide(t, s, "k", 1, t0)
	if d := decide(t, s, "k", 1, t0); d.Allowed || d.RetryAfter != time.Minute {
		t.Fatalf("the free plan's second request: %+v, want refused for a minute", d)
	}
	if d := decide(t, s, "k", 1, t0); d.Allowed || s.LocalAnswers() != 1 {
		t.Fatalf("the free plan's third request: %+v with %d local answers, want refused from memory", d, s.LocalAnswers())
	}
	plan.set(pro)
	d := decide(t, s, "k", 1, t0)
	if d.Allowed || d.RetryAfter != time.Second || d.Policy != pro || s.LocalAnswers() != 1 {
		t.Fatalf("on the pro plan: %+v with %d local answers, want refused by Redis for the pro plan's second", d, s.LocalAnswers())
	}
}

// TestPolicyFuncUnkept gives a key a policy the store cannot keep: its decisions and charges,
// alone and in an All, fail with ErrPolicy, and write nothing.
func TestPolicyFuncUnkept(t *testing.T) {
	client := newClient(t, sharedAddr(t))
	ctx := context.Background()
	for _, p := range []retryafter.Policy{
		{Name: "fast", Limit: 2e9},
		{Name: "long", Limit: rate.Every(time.Hour), Burst: 1 << 30},
	} {
		prefix := testPrefix(t)
		s := New(client, 1, 5, WithPrefix(prefix), WithTimeout(testTimeout), WithPolicyFunc(func(string) retryafter.Policy { return p }))
		for name, err := range map[string]error{
			"Decide": func() error { _, err := s.Decide(ctx, "k", 1, t0); return err }(),
			"Charge": s.Charge(ctx, "k", 1, t0),
			"All":    func() error { _, err := retryafter.All(s, s).Decide(ctx, "k", 1, t0); return err }(),
		} {
			if !errors.Is(err, ErrPolicy) {
				t.Errorf("%s under %+v: %v, want ErrPolicy", name, p, err)
			}
		}
		if n := client.Exists(ctx, prefix+"k").Val(); n != 0 {
			t.Errorf("%+v: the key was written", p)
		}
	}
}

// TestPolicyFuncConcurrent flips a key's plan between bursts of 3 and of 8 while 8 goroutines ask
// for it at one instant, under -race: a change of plan never gives a fresh burst, so no more
// than the larger burst is admitted.
func TestPolicyFuncConcurrent(t *testing.T) {
	client := newClient(t, sharedAddr(t))
	var plan planSwitch
	small := retryafter.Policy{Name: "small", Limit: rate.Every(time.Hour), Burst: 3}
	large := retryafter.Policy{Name: "large", Limit: rate.Every(time.Hour), Burst: 8}
	plan.set(small)
	s := New(client, 1, 1, WithPrefix(testPrefix(t)), WithTimeout(testTimeout), withInjectedClock(), WithPolicyFunc(plan.of))
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 25 {
				if (g+i)%3 == 0 {
					plan.set([]retryafter.Policy{small, large}[i%2])
				}
				d, err := s.Decide(context.Background(), "k", 1, t0)
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed {
					admitted.Add(1)
				}
				if d.Policy != small && d.Policy != large {
					t.Errorf("Policy %+v", d.Policy)
				}
			}
		})
	}
	wg.Wait()
	if n := admitted.Load(); n < 3 || n > 8 {
		t.Fatalf("%d admitted at one instant, want 3 to 8", n)
	}
}

// TestPolicyFuncLocalFallback takes Redis down under a Store with a local fallback: it limits each
// key at the replica's share of the key's own plan.
func TestPolicyFuncLocalFallback(t *testing.T) {
	client := newClient(t, sharedAddr(t))
	o := &outages{Scripter: keptKeys{client}}
	o.down.Store(true)
	pro := retryafter.Policy{Name: "pro", Limit: 30, Burst: 9}
	s := New(o, 1, 1, WithPrefix(testPrefix(t)), WithTimeout(testTimeout), withCallerClock(), WithLocalFallback(3),
		WithPolicyFunc(func(string) retryafter.Policy { return pro }))
	want := retryafter.Policy{Name: "pro", Limit: 10, Burst: 3}
	for i := range 4 {
		d, err := s.Decide(context.Background(), "k", 1, t0)
		if err != nil || d.Allowed != (i < 3) || d.Policy != want {
			t.Fatalf("request %d decided locally: %+v, %v, want allowed %v with Policy %+v", i, d, err, i < 3, want)
		}
	}
}

// TestPolicyFuncRoundTrip puts a Store with plans behind the middleware: the RateLimit fields
// name the key's plan, and a client that waits the Retry-After it is given is admitted.
func TestPolicyFuncRoundTrip(t *testing.T) {
	client := newClient(t, sharedAddr(t))
	clk := testkit.NewClock(t0)
	pro := retryafter.Policy{Name: "pro", Limit: rate.Every(1500 * time.Millisecond), Burst: 4}
	s := New(client, 1, 1, WithPrefix(testPrefix(t)), WithTimeout(testTimeout), withInjectedClock(),
		WithPolicyFunc(func(string) retryafter.Policy { return pro }))
	h := retryafter.LimitWith(s, retryafter.WithClock(clk.Now), retryafter.WithRateLimitFields(""))(okHandler)
	if w := get(h, "192.0.2.1:1234"); w.Header().Get("RateLimit-Policy") != `"pro";q=4;w=6` {
		t.Fatalf("RateLimit-Policy %q, want the pro plan's", w.Header().Get("RateLimit-Policy"))
	}
	rng := rand.New(rand.NewPCG(4, 4))
	if n := testkit.RoundTrip(t, h, clk, 100, func() time.Duration { return time.Duration(rng.Int64N(int64(time.Second))) }); n == 0 {
		t.Fatal("nothing refused")
	}
}

// TestPolicyFuncOwnLimitInf makes a Store whose own limit is rate.Inf but whose plans per key are
// finite: it still remembers a key's refusal (the next is answered without Redis), and still
// falls back locally at the key's plan when Redis is down.
func TestPolicyFuncOwnLimitInf(t *testing.T) {
	client := newClient(t, sharedAddr(t))
	free := retryafter.Policy{Name: "free", Limit: rate.Every(time.Minute), Burst: 1}
	o := &outages{Scripter: keptKeys{client}}
	s := New(o, rate.Inf, 1, WithPrefix(testPrefix(t)), WithTimeout(testTimeout), withCallerClock(), WithLocalFallback(1),
		WithPolicyFunc(func(string) retryafter.Policy { return free }))
	decide(t, s, "k", 1, t0)
	if d := decide(t, s, "k", 1, t0); d.Allowed || d.RetryAfter != time.Minute {
		t.Fatalf("the free plan's second request: %+v, want refused for a minute", d)
	}
	if d := decide(t, s, "k", 1, t0); d.Allowed || s.LocalAnswers() != 1 {
		t.Fatalf("the free plan's third request: %+v with %d local answers, want refused from memory", d, s.LocalAnswers())
	}
	o.down.Store(true)
	for i := range 2 {
		d, err := s.Decide(context.Background(), "other", 1, t0)
		if err != nil || d.Allowed != (i < 1) || d.Policy != free {
			t.Fatalf("request %d with Redis down: %+v, %v, want decided locally, allowed %v, under %+v", i, d, err, i < 1, free)
		}
	}
}
