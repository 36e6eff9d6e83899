package redisstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/time/rate"

	"github.com/retryafter/retryafter"
	"github.com/retryafter/retryafter/edge"
	"github.com/retryafter/retryafter/internal/testkit"
	"github.com/retryafter/retryafter/limitertest"
)

// randomLayer is one layer of a random All in TestAllAgainstModel.
type randomLayer struct {
	store    *Store
	interval time.Duration
	shared   bool // counted against one key
	deferred bool // ChargedAfter
}

func (l *randomLayer) key(k string) string {
	if l.shared {
		return "shared"
	}
	return k
}

// TestAllAgainstModel decides random requests of random clients with a random All of Stores on
// one Redis (and on a cluster, with one hash tag), some shared by every client, some charged
// afterwards, some on a Store that another layer uses too, on an injected clock, and checks
// every Decision against the exact model: refused exactly when some layer would overshoot, with
// a RetryAfter of the largest overshoot rounded up to the microsecond (so that the request is
// admitted then and refused a microsecond earlier), and the Limit, Remaining and Reset of the
// layer that binds. A refusal must spend nothing in any layer, and an admission its cost in
// every one, or the model, which does just that, parts from Redis at the next request: so no
// layer ever admits more than its burst + rate × elapsed. Charges afterwards put keys into debt,
// and refunds give back: the next request waits exactly until the debt is repaid. Each All must
// be decided in one round trip.
func TestAllAgainstModel(t *testing.T) {
	t.Run("server", func(t *testing.T) {
		allAgainstModel(t, newClient(t, sharedAddr(t)), 40, func(t *testing.T, i int) string { return testPrefix(t) })
	})
	t.Run("cluster", func(t *testing.T) {
		tag := testPrefix(t)
		allAgainstModel(t, newClusterClient(t, clusterAddrs(t)), 10, func(t *testing.T, i int) string {
			return fmt.Sprintf("{%s}:%s", tag, testPrefix(t))
		})
	})
}

func allAgainstModel(t *testing.T, client redis.UniversalClient, seeds int, prefix func(t *testing.T, i int) string) {
	ctx := context.Background()
	if err := allScript.Load(ctx, client).Err(); err != nil {
		t.Fatal(err)
	}
	rounds := countRoundTrips(client)
	checked := map[string]int{}
	for seed := range uint64(seeds) {
		rng := rand.New(rand.NewPCG(seed, 15))
		var layers []randomLayer
		var limiters []retryafter.Limiter
		minBurst := 1 << 30
		for i := range 1 + rng.IntN(6) {
			interval := time.Duration(1 + rng.Int64N(int64(3*time.Second)))
			burst := 1 + rng.IntN(8)
			l := randomLayer{interval: interval, shared: i > 0 && rng.IntN(3) == 0, deferred: i > 0 && rng.IntN(4) == 0}
			if i > 0 && rng.IntN(5) == 0 {
				// A Store that an earlier layer uses too: with the same key, the layers reserve
				// one after the other in one bucket.
				prev := layers[rng.IntN(i)]
				l.store, l.interval = prev.store, prev.interval
			} else {
				l.store = New(client, rate.Every(interval), burst, WithPrefix(prefix(t, i)), WithTimeout(testTimeout), withInjectedClock())
				if time.Duration(l.store.own.interval) != interval {
					t.Fatalf("interval %v stored as %v ns", interval, l.store.own.interval)
				}
			}
			var lim retryafter.Limiter = l.store
			if l.shared {
				lim = retryafter.Shared(lim, "shared")
			}
			if l.deferred {
				lim = retryafter.ChargedAfter(lim)
			} else {
				minBurst = min(minBurst, l.store.own.policy.Burst)
			}
			layers = append(layers, l)
			limiters = append(limiters, lim)
		}
		a := retryafter.All(limiters...)
		m := newModel()
		now := t0
		before := rounds.Load()
		decisions := 0
		for range 300 {
			now = now.Add(time.Duration(rng.Int64N(int64(800*time.Millisecond))) / time.Microsecond * time.Microsecond)
			key := fmt.Sprintf("client-%d", rng.IntN(3))
			cost := 1 + rng.IntN(3)
			if minBurst < 1<<30 && rng.IntN(10) == 0 {
				cost = minBurst + 1 // never admitted
			}
			ml := make([]modelLayer, len(layers))
			for i, l := range layers {
				ml[i] = modelLayer{key: l.store.prefix + l.key(key), interval: l.interval, burst: l.store.own.policy.Burst, cost: cost}
				if l.deferred {
					ml[i].cost = 0
				}
			}
			want := m.decide(ml, now)
			got, err := a.Decide(ctx, key, cost, now)
			decisions++
			if err != nil {
				t.Fatal(err)
			}
			if got.Policy.Burst != got.Limit || got.Policy.Limit <= 0 {
				t.Fatalf("seed %d, %s cost %d at %v: %+v names no policy of its Limit", seed, key, cost, now.Sub(t0), got)
			}
			got.Policy = retryafter.Policy{} // the model's Decisions have none; TestAllPolicy checks it
			if quota(got) != quota(want) {
				t.Fatalf("seed %d, %s cost %d at %v: %+v, the model says %+v", seed, key, cost, now.Sub(t0), got, want)
			}
			if !got.Allowed {
				checked["refused"]++
				if got.RetryAfter < rate.InfDuration {
					checked["refused, finite"]++
				}
				continue
			}
			checked["admitted"]++
			later := now.Add(time.Duration(rng.Int64N(int64(time.Second))) / time.Microsecond * time.Microsecond)
			switch rng.IntN(6) {
			case 0, 1: // what the request really cost, charged afterwards
				used := rng.IntN(15)
				for _, l := range layers {
					if l.deferred {
						charge(t, l.store, l.key(key), used, later)
						m.charge(l.store.prefix+l.key(key), l.interval, used, later)
					}
				}
				now = later
				checked["charged"]++
			case 2: // given back, as All does when a store decided later refuses
				l := layers[rng.IntN(len(layers))]
				charge(t, l.store, l.key(key), -cost, later)
				m.charge(l.store.prefix+l.key(key), l.interval, -cost, later)
				now = later
				checked["given back"]++
			}
		}
		n := rounds.Load() - before
		if n > int64(decisions) {
			t.Fatalf("seed %d: %d round trips for %d decisions", seed, n, decisions)
		}
		checked["refused from memory"] += decisions - int(n) // WithRefusalMemory
	}
	t.Log(checked)
	if checked["refused, finite"] < 500 || checked["charged"] < 200 || checked["given back"] < 100 {
		t.Fatalf("too little was checked: %v", checked)
	}
}

// A roundTrips counts the round trips of a client's decisions: the scripts that decide (EVAL
// and EVALSHA of the decision and of All, alone or in a transaction), not the charges.
type roundTrips struct{ n atomic.Int64 }

func (r *roundTrips) Load() int64 { return r.n.Load() }

// countRoundTrips counts the round trips of client's decisions from now on.
func countRoundTrips(client redis.UniversalClient) *roundTrips {
	r := &roundTrips{}
	client.AddHook(roundTripHook{r})
	return r
}

type roundTripHook struct{ r *roundTrips }

func (h roundTripHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h roundTripHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if decides(cmd) {
			h.r.n.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (h roundTripHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			if decides(cmd) {
				h.r.n.Add(1)
				break
			}
		}
		return next(ctx, cmds)
	}
}

// decides reports whether cmd runs a script that decides.
func decides(cmd redis.Cmder) bool {
	args := cmd.Args()
	if len(args) < 2 {
		return false
	}
	switch name, arg := strings.ToLower(fmt.Sprint(args[0])), fmt.Sprint(args[1]); name {
	case "evalsha":
		return arg == allScript.Hash() || arg == decideScript.Hash()
	case "eval":
		return arg == assemble(allLua) || arg == assemble(decideLua)
	}
	return false
}

// TestAllOneRoundTrip counts the round trips of an All of three Stores on Redis's own clock, one
// per client, one shared by every client and one charged afterwards, through the middleware:
// every request, admitted or refused, is one round trip (refusals not remembered: WithRefusalMemory(0)),
// and the charges after it are one each.
// On a cluster it holds with one hash tag in every prefix; without, Combine declines and All
// decides store after store.
func TestAllOneRoundTrip(t *testing.T) {
	ctx := context.Background()
	cluster := clusterAddrs(t)
	for _, c := range []struct {
		name   string
		client redis.UniversalClient
		tags   bool
		trips  int // round trips per decision
	}{
		{"server", newClient(t, sharedAddr(t)), false, 1},
		{"cluster with a hash tag", newClusterClient(t, cluster), true, 1},
		{"cluster without", newClusterClient(t, cluster), false, 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			if err := allScript.Load(ctx, c.client).Err(); err != nil {
				t.Fatal(err)
			}
			if err := decideScript.Load(ctx, c.client).Err(); err != nil {
				t.Fatal(err)
			}
			prefix := testPrefix(t)
			if c.tags {
				prefix = "{" + prefix + "}"
			}
			perClient := New(c.client, 10, 3, WithPrefix(prefix+"client:"), WithTimeout(testTimeout), WithRefusalMemory(0))
			service := New(c.client, 20, 5, WithPrefix(prefix+"service:"), WithTimeout(testTimeout), WithRefusalMemory(0))
			tokens := New(c.client, 100, 50, WithPrefix(prefix+"tokens:"), WithTimeout(testTimeout), WithRefusalMemory(0))
			a := retryafter.All(perClient, retryafter.Shared(service, "all"), retryafter.ChargedAfter(tokens))
			if _, ok := perClient.Combine([]edge.Layer{{Limiter: perClient}, {Limiter: service}}); ok != (c.trips == 1) {
				t.Fatalf("Combine: %v, want %v", ok, c.trips == 1)
			}
			h := retryafter.LimitWith(a)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				retryafter.Charge(r, 7)
			}))
			rounds := countRoundTrips(c.client)
			charges := countCommands(c.client, chargeScript.Hash())
			codes := map[int]int{}
			const n = 40
			for i := range n {
				codes[get(h, fmt.Sprintf("192.0.2.%d:1", i%4)).Code]++
			}
			if codes[http.StatusOK] == 0 || codes[http.StatusTooManyRequests] == 0 {
				t.Fatalf("answers %v: want some admitted and some refused", codes)
			}
			if got := rounds.Load(); got != int64(c.trips*n) {
				t.Fatalf("%d round trips for %d requests, want %d each", got, n, c.trips)
			}
			// Each admitted request is charged once. Store after store, a refusal by a later
			// layer gives back what the earlier ones spent, a charge each.
			if got := charges.Load(); c.trips == 1 && got != int64(codes[http.StatusOK]) {
				t.Fatalf("%d charges for %d admitted requests", got, codes[http.StatusOK])
			} else if c.trips > 1 {
				t.Logf("%v: %d round trips to decide %d requests, %d to charge and give back", codes, rounds.Load(), n, got)
			}
		})
	}
}

// countCommands counts client's commands whose first argument after the name is arg (a
// script's hash), from now on.
func countCommands(client redis.UniversalClient, arg string) *roundTrips {
	r := &roundTrips{}
	client.AddHook(commandHook{r, arg})
	return r
}

type commandHook struct {
	r   *roundTrips
	arg string
}

func (h commandHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h commandHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if args := cmd.Args(); len(args) > 1 && fmt.Sprint(args[1]) == h.arg {
			h.r.n.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (h commandHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestAllContract runs the Limiter contract on an All of three Stores decided in one script, on
// a server and on a cluster with one hash tag: the first binds (a burst of 3), the third is
// shared by every key. The one script promises no place, so that its Reserve refuses as
// Decide does (CannotWait).
func TestAllContract(t *testing.T) {
	run := func(t *testing.T, client redis.Scripter, tagged bool) {
		limitertest.Run(t, limitertest.Config{
			CannotWait: true,
			New: func(t *testing.T) retryafter.Limiter {
				p := testPrefix(t)
				if tagged {
					p = "{" + p + "}"
				}
				opts := func(name string) []Option {
					return []Option{WithPrefix(p + name), WithTimeout(testTimeout), withInjectedClock()}
				}
				a := New(client, 3, 5, opts("a:")...)
				b := New(client, 1, 3, opts("b:")...)
				c := New(client, 10, 20, opts("c:")...)
				if _, ok := a.Combine([]edge.Layer{{Limiter: a}, {Limiter: b}, {Limiter: c}}); !ok {
					t.Fatal("the Stores do not combine")
				}
				return retryafter.All(b, a, retryafter.Shared(c, "all"))
			},
			Burst:      3, // b's; on a fresh key, where all are full, the first binds
			Resolution: time.Microsecond,
		})
	}
	t.Run("server", func(t *testing.T) { run(t, newClient(t, sharedAddr(t)), false) })
	t.Run("cluster", func(t *testing.T) { run(t, newClusterClient(t, clusterAddrs(t)), true) })
}

// TestCombineTakes checks which layers Combine takes into one script: Stores on the very client
// of the first, by one clock; on a cluster or a ring, only with one hash tag in every prefix,
// which puts every key in one slot. Stores at rate.Inf never ask Redis, and take part whatever
// their prefix.
func TestCombineTakes(t *testing.T) {
	client := newClient(t, "127.0.0.1:1")
	other := newClient(t, "127.0.0.1:1")
	cluster := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}, ContextTimeoutEnabled: true})
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}, ContextTimeoutEnabled: true})
	t.Cleanup(func() { cluster.Close(); ring.Close() })
	store := func(c redis.Scripter, prefix string, opts ...Option) edge.Layer {
		return edge.Layer{Limiter: New(c, 1, 1, append([]Option{WithPrefix(prefix)}, opts...)...)}
	}
	a := store(client, "a:")
	shared := store(client, "b:")
	shared.Key = func(string) string { return "all" }
	deferred := store(client, "c:")
	deferred.Deferred = true
	for _, c := range []struct {
		name   string
		layers []edge.Layer
		want   bool
	}{
		{"one client", []edge.Layer{a, store(client, "b:"), a}, true},
		{"shared and charged afterwards", []edge.Layer{a, shared, deferred}, true},
		{"two clients of one server", []edge.Layer{a, store(other, "b:")}, false},
		{"two clocks", []edge.Layer{a, store(client, "b:", withCallerClock())}, false},
		{"a TokenBucket", []edge.Layer{a, {Limiter: retryafter.NewTokenBucket(1, 1)}}, false},
		{"16 layers", slices.Repeat([]edge.Layer{a}, 16), true}, // as many as All decides
		{"17 layers", slices.Repeat([]edge.Layer{a}, 17), false},
		{"cluster, no tag", []edge.Layer{store(cluster, "a:"), store(cluster, "b:")}, false},
		{"cluster, one layer", []edge.Layer{store(cluster, "a:")}, true},
		{"cluster, one layer and rate.Inf", []edge.Layer{store(cluster, "a:"), {Limiter: New(cluster, rate.Inf, 3)}}, true},
		{"cluster, one tag", []edge.Layer{store(cluster, "{rl}:a:"), store(cluster, "x{rl}:b:")}, true},
		{"cluster, two tags", []edge.Layer{store(cluster, "{rl}:a:"), store(cluster, "{rm}:b:")}, false},
		{"cluster, a tag the key closes", []edge.Layer{store(cluster, "{rl"), store(cluster, "{rl")}, false},
		{"cluster, an empty tag", []edge.Layer{store(cluster, "{}{rl}:a:"), store(cluster, "{}{rl}:b:")}, false},
		{"cluster and rate.Inf", []edge.Layer{store(cluster, "{rl}:a:"), {Limiter: New(cluster, rate.Inf, 3)}}, true},
		{"ring, one tag", []edge.Layer{store(ring, "{rl}:a:"), store(ring, "{rl}:b:")}, true},
		{"ring, no tag", []edge.Layer{store(ring, "a:"), store(ring, "b:")}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, ok := c.layers[0].Limiter.(*Store).Combine(c.layers); ok != c.want {
				t.Fatalf("Combine: %v, want %v", ok, c.want)
			}
		})
	}

	// rate.Inf alone asks nothing of the Redis that is not there.
	inf := retryafter.All(New(cluster, rate.Inf, 3), New(cluster, rate.Inf, 7))
	if d, err := inf.Decide(context.Background(), "k", 2, t0); err != nil || !d.Allowed || d.Limit != 3 || d.Remaining != 3 {
		t.Fatalf("All at rate.Inf: %+v, %v, want admitted with the first's quota", d, err)
	}
}

// TestAllMixed decides Alls of an in-memory TokenBucket and Stores, store after store: when a
// later one refuses, what the earlier ones spent is given back (through Store.Charge, layer by
// layer, for Stores decided in one script), so a refusal spends nothing in any; when Redis fails,
// the bucket gets back what it spent.
func TestAllMixed(t *testing.T) {
	client := newClient(t, sharedAddr(t))
	ctx := context.Background()
	newStore := func(t *testing.T, name string, limit rate.Limit, burst int) *Store {
		return New(client, limit, burst, WithPrefix(testPrefix(t)+name), WithTimeout(testTimeout), withInjectedClock())
	}
	t.Run("the bucket refuses after Redis", func(t *testing.T) {
		a := newStore(t, "a:", rate.Every(time.Minute), 5)
		b := newStore(t, "b:", rate.Every(time.Minute), 5)
		mem := retryafter.NewTokenBucket(rate.Every(time.Hour), 2)
		all := retryafter.All(a, retryafter.Shared(b, "all"), mem)
		for i := range 2 {
			if d, err := all.Decide(ctx, "k", 1, t0); err != nil || !d.Allowed {
				t.Fatalf("request %d: %+v, %v", i, d, err)
			}
		}
		for range 10 {
			if d, err := all.Decide(ctx, "k", 1, t0); err != nil || d.Allowed || d.RetryAfter < 59*time.Minute {
				t.Fatalf("refused by the bucket: %+v, %v, want a wait of about an hour", d, err)
			}
		}
		if d := decide(t, a, "k", 0, t0); d.Remaining != 3 {
			t.Fatalf("the per-key Store after 2 admitted and 10 refused: %+v, want 3 left", d)
		}
		if d := decide(t, b, "all", 0, t0); d.Remaining != 3 {
			t.Fatalf("the shared Store after 2 admitted and 10 refused: %+v, want 3 left", d)
		}
	})
	t.Run("Redis refuses after the bucket", func(t *testing.T) {
		mem := retryafter.NewTokenBucket(rate.Every(time.Hour), 10)
		a := newStore(t, "a:", rate.Every(time.Minute), 2)
		all := retryafter.All(mem, a)
		for range 2 {
			all.Decide(ctx, "k", 1, t0)
		}
		for range 10 {
			if d, err := all.Decide(ctx, "k", 1, t0.Add(time.Second)); err != nil || d.Allowed || d.RetryAfter != 59*time.Second || d.Limit != 2 {
				t.Fatalf("refused by the Store: %+v, %v, want its exact wait, 59s", d, err)
			}
		}
		if d, _ := mem.Decide(ctx, "k", 8, t0.Add(time.Second)); !d.Allowed {
			t.Fatal("the bucket kept what the refusals spent")
		}
	})
	t.Run("Redis fails", func(t *testing.T) {
		o := &outages{Scripter: keptKeys{client}}
		o.down.Store(true)
		mem := retryafter.NewTokenBucket(rate.Every(time.Hour), 3)
		s := New(o, 1, 5, WithPrefix(testPrefix(t)), WithTimeout(testTimeout), withCallerClock())
		if _, err := retryafter.All(mem, s).Decide(ctx, "k", 1, t0); !errors.Is(err, ErrUnavailable) {
			t.Fatalf("Redis down: %v, want an error wrapping ErrUnavailable", err)
		}
		if d, _ := mem.Decide(ctx, "k", 3, t0); !d.Allowed {
			t.Fatal("the bucket kept what it spent on a request Redis could not decide")
		}
	})
}

// TestAllInf decides random requests through an All of Stores at rate.Inf around a Store of a
// finite rate, in one script: the Stores at rate.Inf ask Redis nothing and never bind, so every
// Decision is the finite Store's, that of a twin of it on another prefix given the same
// requests.
func TestAllInf(t *testing.T) {
	client := newClient(t, sharedAddr(t))
	p := testPrefix(t)
	store := func(name string, limit rate.Limit, burst int) *Store {
		return New(client, limit, burst, WithPrefix(p+name), WithTimeout(testTimeout), withInjectedClock())
	}
	finite, twin := store("finite:", 3, 4), store("twin:", 3, 4)
	all := retryafter.All(store("a:", rate.Inf, 2), finite, retryafter.Shared(store("b:", rate.Inf, 9), "all"))
	if _, ok := finite.Combine([]edge.Layer{{Limiter: store("a:", rate.Inf, 2)}, {Limiter: finite}}); !ok {
		t.Fatal("the Stores do not combine")
	}
	rng := rand.New(rand.NewPCG(9, 9))
	now := t0
	refused := 0
	for range 200 {
		now = now.Add(time.Duration(rng.Int64N(int64(time.Second))) / time.Microsecond * time.Microsecond)
		cost := rng.IntN(6)
		got, err := all.Decide(context.Background(), "k", cost, now)
		if want := decide(t, twin, "k", cost, now); err != nil || quota(got) != quota(want) {
			t.Fatalf("cost %d at %v: %+v, %v; the finite Store alone: %+v", cost, now.Sub(t0), got, err, want)
		}
		if !got.Allowed {
			refused++
		}
	}
	if refused < 20 {
		t.Fatalf("only %d refusals", refused)
	}
}

// TestAllCrossSlot measures, on a real cluster, what Combine's rule guards against: the script
// over keys of two slots is refused (CROSSSLOT), and over keys of one hash tag decided.
func TestAllCrossSlot(t *testing.T) {
	c := newClusterClient(t, clusterAddrs(t))
	ctx := context.Background()
	p := testPrefix(t)
	args := []any{"", int64(time.Second), 1, 1, 0, "", "", 0, 0, int64(time.Second), 1, 1, 0, "", "", 0, 0}
	keys := []string{p + "a", p + "b"}
	for i := 0; c.ClusterKeySlot(ctx, keys[0]).Val() == c.ClusterKeySlot(ctx, keys[1]).Val(); i++ {
		keys[1] = fmt.Sprint(p, "b", i)
	}
	err := allScript.Run(ctx, c, keys, args...).Err()
	if err == nil || !strings.Contains(err.Error(), "CROSSSLOT") {
		t.Fatalf("the script over two slots: %v, want CROSSSLOT", err)
	}
	t.Logf("keys of two slots: %v", err)
	tagged := []string{"{" + p + "}a", "{" + p + "}b"}
	if res, err := allScript.Run(ctx, c, tagged, args...).Int64Slice(); err != nil || res[0] != 1 || res[4] != 1 {
		t.Fatalf("the script over one hash tag: %v, %v, want both admitted", res, err)
	}
}

// TestAllLocalFallback takes Redis away from an All of Stores that have local fallbacks: each
// layer is then decided in memory, all or nothing, with the local bucket's exact wait, and every
// Store learns that Redis is down; an All with a Store that has no fallback returns the error.
// Once Redis is back, it decides again from the state it kept.
func TestAllLocalFallback(t *testing.T) {
	client := newClient(t, sharedAddr(t))
	ctx := context.Background()
	o := &outages{Scripter: keptKeys{client}}
	p := "{" + testPrefix(t) + "}"
	opts := func(name string, more ...Option) []Option {
		return append([]Option{WithPrefix(p + name), WithTimeout(testTimeout), withCallerClock(), WithProbeInterval(time.Hour)}, more...)
	}
	a := New(o, rate.Every(time.Second), 5, opts("a:", WithLocalFallback(1))...)
	b := New(o, rate.Every(time.Minute), 2, opts("b:", WithLocalFallback(1))...)
	c := New(o, rate.Every(time.Second), 5, opts("c:")...)
	both := retryafter.All(a, retryafter.Shared(b, "all"))
	for range 2 {
		if d, err := both.Decide(ctx, "k", 1, t0); err != nil || !d.Allowed {
			t.Fatalf("Redis up: %+v, %v", d, err)
		}
	}

	o.down.Store(true)
	for i := range 2 {
		if d, err := both.Decide(ctx, "k", 1, t0); err != nil || !d.Allowed {
			t.Fatalf("Redis down, request %d: %+v, %v, want admitted by the local buckets", i, d, err)
		}
	}
	if d, err := both.Decide(ctx, "k", 1, t0); err != nil || d.Allowed || (d.RetryAfter-time.Minute).Abs() > 2*time.Microsecond || d.Limit != 2 {
		t.Fatalf("Redis down, the local shared bucket spent: %+v, %v, want refused for a minute", d, err)
	}
	if d, _ := a.local.Decide(ctx, "k", 0, t0); d.Remaining != 3 {
		t.Fatalf("the local per-key bucket: %+v, want 3 left: the refusal spent it", d)
	}
	if !errors.Is(a.Down(), ErrUnavailable) || !errors.Is(b.Down(), ErrUnavailable) {
		t.Fatalf("Down: %v and %v, want both Stores to know", a.Down(), b.Down())
	}
	if _, err := retryafter.All(a, c).Decide(ctx, "k", 1, t0); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("a layer without a fallback: %v, want an error wrapping ErrUnavailable", err)
	}
	// A layer at rate.Inf needs no fallback, and never binds.
	inf := retryafter.All(New(o, rate.Inf, 7, opts("inf:")...), a)
	for i := range 6 {
		d, err := inf.Decide(ctx, "other", 1, t0)
		if err != nil || d.Allowed != (i < 5) || d.Limit != 5 || d.Remaining != max(0, 4-i) {
			t.Fatalf("Redis down, a layer at rate.Inf beside a's, request %d: %+v, %v, want the local per-key bucket's answer", i, d, err)
		}
		if ls := d.Layers(); len(ls) != 2 || ls[0].Limit != 5 || ls[1].Limit != 7 {
			t.Fatalf("Redis down, a layer at rate.Inf beside a's, request %d: layers %+v, want both, a's first, as Redis up tells them", i, ls)
		}
	}

	o.down.Store(false)
	a.health.ok() // Redis is back; TestAllFailFast checks the probe that would find out
	if d, err := both.Decide(ctx, "k", 1, t0.Add(time.Second)); err != nil || d.Allowed || d.RetryAfter != 59*time.Second {
		t.Fatalf("Redis back: %+v, %v, want refused from the state Redis kept, for 59s", d, err)
	}
	if err := b.Down(); err != nil {
		t.Fatalf("b after a round trip of the All that Redis answered: %v, want it up", err)
	}
}

// TestAllConcurrent decides layered requests from many goroutines on Redis's own clock, through
// two Alls that hold the same Stores in two orders: no layer admits more than its burst + rate ×
// the time Redis's clock ran (plus one for its microsecond), neither the shared one nor any key's.
func TestAllConcurrent(t *testing.T) {
	const (
		clientRate, clientBurst   = 200, 10
		serviceRate, serviceBurst = 500, 20
	)
	client := newClient(t, sharedAddr(t))
	p := testPrefix(t)
	perClient := New(client, clientRate, clientBurst, WithPrefix(p+"client:"), WithTimeout(testTimeout))
	service := New(client, serviceRate, serviceBurst, WithPrefix(p+"service:"), WithTimeout(testTimeout))
	alls := []retryafter.Limiter{
		retryafter.All(perClient, retryafter.Shared(service, "all")),
		retryafter.All(retryafter.Shared(service, "all"), perClient),
	}
	var perKey [4]atomic.Int64
	var all atomic.Int64
	start := redisNow(t, client)
	deadline := time.Now().Add(300 * time.Millisecond)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := 0; time.Now().Before(deadline); i++ {
				k := (g + i) % 4
				d, err := alls[i%2].Decide(context.Background(), fmt.Sprint("c", k), 1, time.Time{})
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed {
					perKey[k].Add(1)
					all.Add(1)
				}
			}
		})
	}
	wg.Wait()
	elapsed := redisNow(t, client).Sub(start).Seconds()
	if n, most := all.Load(), serviceBurst+serviceRate*elapsed+1; float64(n) > most {
		t.Fatalf("the shared layer admitted %d, at most %.0f", n, most)
	}
	for k := range perKey {
		if n, most := perKey[k].Load(), clientBurst+clientRate*elapsed+1; float64(n) > most {
			t.Fatalf("client %d admitted %d, at most %.0f", k, n, most)
		}
	}
	t.Logf("%d admitted in %.3fs of Redis's clock (shared layer at most %.0f)", all.Load(), elapsed, serviceBurst+serviceRate*elapsed+1)
}

// TestAllRoundTrip puts an All of three Stores in one script, a limit per client, one shared by
// every client and an hourly one, behind the middleware on an injected clock, and holds every 429
// to the round trip: Retry-After waited exactly is admitted, a second less is refused.
func TestAllRoundTrip(t *testing.T) {
	client := newClient(t, sharedAddr(t))
	refusals := 0
	for seed := range uint64(8) {
		rng := rand.New(rand.NewPCG(seed, 3))
		p := testPrefix(t)
		store := func(name string, every time.Duration, burst int) *Store {
			return New(client, rate.Every(every), burst, WithPrefix(p+name), WithTimeout(testTimeout), withInjectedClock())
		}
		perClient := store("client:", time.Duration(1+rng.IntN(3000))*time.Millisecond, 1+rng.IntN(5))
		service := store("service:", time.Duration(1+rng.IntN(3000))*time.Millisecond, 1+rng.IntN(5))
		hour := store("hour:", time.Duration(1+rng.IntN(60))*time.Second, 3+rng.IntN(20))
		clk := testkit.NewClock(t0.Add(time.Duration(rng.Int64N(int64(time.Second)))))
		h := retryafter.LimitWith(retryafter.All(perClient, retryafter.Shared(service, "service"), hour), retryafter.WithClock(clk.Now))(okHandler)
		refusals += testkit.RoundTrip(t, h, clk, 100, func() time.Duration {
			return time.Duration(rng.Int64N(int64(1500 * time.Millisecond)))
		})
	}
	if refusals < 100 {
		t.Fatalf("only %d refusals checked", refusals)
	}
	t.Logf("%d refusals checked", refusals)
}

// TestAllRemembersBindingLayer has both layers of an All refuse a request with the same wait, the
// first's bucket full a second later and the second's two: the refusal the group remembers is the
// first layer's, as Binding picks it, and answered from memory it is the same Decision.
func TestAllRemembersBindingLayer(t *testing.T) {
	client := newClient(t, sharedAddr(t))
	prefix := testPrefix(t)
	o := []Option{WithTimeout(testTimeout), withInjectedClock()}
	first := New(client, rate.Every(time.Second), 1, append([]Option{WithPrefix(prefix + "first:")}, o...)...)
	second := New(client, rate.Every(time.Second), 2, append([]Option{WithPrefix(prefix + "second:")}, o...)...)
	all := retryafter.All(first, second)
	ctx := context.Background()
	if d, err := all.Decide(ctx, "k", 1, t0); err != nil || !d.Allowed {
		t.Fatalf("the first request: %+v, %v, want admitted", d, err)
	}
	if err := second.Charge(ctx, "k", 1, t0); err != nil {
		t.Fatal(err)
	}
	refused, err := all.Decide(ctx, "k", 1, t0)
	if err != nil || refused.Allowed || refused.RetryAfter != time.Second || refused.Reset != time.Second || refused.Limit != 1 {
		t.Fatalf("both layers empty: %+v, %v, want refused for 1s by the first layer, full in 1s", refused, err)
	}
	local := first.LocalAnswers()
	again, err := all.Decide(ctx, "k", 1, t0)
	if err != nil || first.LocalAnswers() != local+1 {
		t.Fatalf("the same request again: %v, %d local answers, want answered from memory", err, first.LocalAnswers()-local)
	}
	if again.Allowed || again.RetryAfter != refused.RetryAfter || again.Reset != refused.Reset || again.Remaining != refused.Remaining || again.Limit != refused.Limit {
		t.Fatalf("answered from memory: %+v, want %+v", again, refused)
	}
}

// TestAllRefreshesLayerMemory checks that a request an All admits refreshes what a layer's Store
// remembers of the key's refusal, rather than drop it: a Store that refused a cost of 5 with 2
// tokens left, then spent one in an All, answers the same cost again from memory, refused with
// the wait Redis gives for one token fewer.
func TestAllRefreshesLayerMemory(t *testing.T) {
	client := newClient(t, sharedAddr(t))
	prefix := testPrefix(t)
	o := []Option{WithTimeout(testTimeout), withInjectedClock()}
	layer := New(client, rate.Every(time.Second), 5, append([]Option{WithPrefix(prefix + "layer:")}, o...)...)
	other := New(client, rate.Every(time.Second), 100, append([]Option{WithPrefix(prefix + "other:")}, o...)...)
	peek := New(client, rate.Every(time.Second), 5, append([]Option{WithPrefix(prefix + "layer:"), WithRefusalMemory(0)}, o...)...)
	all := retryafter.All(layer, other)
	ctx := context.Background()
	if d := decide(t, layer, "k", 3, t0); !d.Allowed {
		t.Fatalf("3 of 5: %+v", d)
	}
	if d := decide(t, layer, "k", 5, t0); d.Allowed {
		t.Fatalf("5 of 2 left: %+v, want refused", d)
	}
	if d, err := all.Decide(ctx, "k", 1, t0); err != nil || !d.Allowed {
		t.Fatalf("the All, 1 of 2 left: %+v, %v, want admitted", d, err)
	}
	local := layer.LocalAnswers()
	got := decide(t, layer, "k", 5, t0)
	if layer.LocalAnswers() != local+1 {
		t.Fatalf("5 of 1 left: %+v, %d answers from memory, want 1", got, layer.LocalAnswers()-local)
	}
	if want := decide(t, peek, "k", 5, t0); got != want {
		t.Fatalf("5 of 1 left, from memory: %+v, Redis says %+v", got, want)
	}
}

// TestAllSharedLayerForgets checks that when every layer of an All maps keys (Shared), a request
// of one key that the group admits makes the group forget what it remembers of another key's
// refusal, as Redis answers it after: the admission spent a bucket they share.
func TestAllSharedLayerForgets(t *testing.T) {
	client := newClient(t, sharedAddr(t))
	prefix := testPrefix(t)
	o := []Option{WithTimeout(testTimeout), withInjectedClock()}
	a := New(client, rate.Every(time.Second), 2, append([]Option{WithPrefix(prefix + "a:")}, o...)...)
	b := New(client, rate.Every(time.Second), 100, append([]Option{WithPrefix(prefix + "b:")}, o...)...)
	all := retryafter.All(retryafter.Shared(a, "all"), retryafter.Shared(b, "all"))
	ctx := context.Background()
	at := func(key string, cost int, now time.Time) retryafter.Decision {
		t.Helper()
		d, err := all.Decide(ctx, key, cost, now)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	if d := at("x", 2, t0); !d.Allowed {
		t.Fatalf("the burst: %+v", d)
	}
	if d := at("B", 2, t0); d.Allowed || d.RetryAfter != 2*time.Second {
		t.Fatalf("B, 2 of none: %+v, want refused for 2s", d)
	}
	if d := at("A", 1, t0.Add(time.Second)); !d.Allowed {
		t.Fatalf("A, 1 of the token come in 1s: %+v, want admitted", d)
	}
	if d := at("B", 2, t0.Add(time.Second)); d.Allowed || d.RetryAfter != 2*time.Second {
		t.Fatalf("B again, after A took the token: %+v, want refused for 2s, as Redis says", d)
	}
}

// TestAllSameKeyRemaining is the root's TestAllSameKeyRemaining with a Store of one Redis:
// layers on one key spend a request's cost once each, so Remaining is the room for that many
// of it, and exactly that many more requests are admitted. The script's remaining counted the
// key's whole tokens for each layer (Remaining 2 after a request with a burst of 4 named
// twice, where 1 more was admitted).
func TestAllSameKeyRemaining(t *testing.T) {
	ctx := context.Background()
	client := newClient(t, sharedAddr(t))
	for burst := 1; burst <= 6; burst++ {
		for layers := 2; layers <= 3; layers++ {
			s := New(client, rate.Every(time.Minute), burst, WithPrefix(testPrefix(t)), withInjectedClock())
			ls := []retryafter.Limiter{s}
			for range layers - 1 {
				ls = append(ls, retryafter.Shared(s, "k"))
			}
			a := retryafter.All(ls...)
			d, err := a.Decide(ctx, "k", 1, t0)
			if err != nil {
				t.Fatal(err)
			}
			admitted := 0
			for range burst + 1 {
				if e, _ := a.Decide(ctx, "k", 1, t0); e.Allowed {
					admitted++
				}
			}
			if d.Allowed && admitted != d.Remaining || !d.Allowed && d.Remaining != 0 {
				t.Errorf("burst %d, %d layers on one key: Allowed %v Remaining %d, then %d more admitted", burst, layers, d.Allowed, d.Remaining, admitted)
			}
		}
	}
}
