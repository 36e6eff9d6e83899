package redisstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/time/rate"

	"github.com/retryafter/retryafter"
	"github.com/retryafter/retryafter/edge"
)

// TestRefusalMemory checks, on a real Redis and an injected clock, that a Store answers the
// requests that a refusal it remembers covers without a round trip, exactly as Redis does: a
// twin Store on the same keys that remembers nothing asks Redis every time, and every Decision of
// the two is the same, for random instants within the wait and random costs (above the burst
// too). The wait over, Redis is asked and admits; a Charge that gives quota back makes the Store
// forget the refusal, and the next request is admitted; a peek of a key not in debt goes to Redis.
func TestRefusalMemory(t *testing.T) {
	addr := sharedAddr(t)
	client, twinClient := newClient(t, addr), newClient(t, addr)
	rounds := countRoundTrips(client)
	prefix := testPrefix(t)
	const every, burst = time.Second, 3
	s := New(client, rate.Every(every), burst, WithPrefix(prefix), WithTimeout(testTimeout), withInjectedClock())
	twin := New(twinClient, rate.Every(every), burst, WithPrefix(prefix), WithTimeout(testTimeout), withInjectedClock(), WithRefusalMemory(0))
	rng := rand.New(rand.NewPCG(7, 8))
	for k := range 5 {
		key := fmt.Sprint("k", k)
		start := t0.Add(time.Duration(k) * time.Hour)
		if d := decide(t, s, key, burst, start); !d.Allowed {
			t.Fatalf("the burst: %+v", d)
		}
		before := rounds.Load()
		first := decide(t, s, key, 1, start)
		if first.Allowed || rounds.Load()-before != 1 {
			t.Fatalf("the first refusal: %+v after %d round trips", first, rounds.Load()-before)
		}
		local, answered := 0, s.LocalAnswers()
		for range 200 {
			now := start.Add(time.Duration(rng.Int64N(int64(every))) / time.Microsecond * time.Microsecond)
			cost := 1 + rng.IntN(burst+1)
			before := rounds.Load()
			got := decide(t, s, key, cost, now)
			if rounds.Load() == before {
				local++
			}
			if want := decide(t, twin, key, cost, now); got != want {
				t.Fatalf("%s cost %d at +%v: %+v, Redis says %+v", key, cost, now.Sub(start), got, want)
			}
		}
		if local != 200 || s.LocalAnswers()-answered != 200 {
			t.Fatalf("%s: %d of 200 refusals within the wait answered without Redis, want all; LocalAnswers counted %d", key, local, s.LocalAnswers()-answered)
		}
		if d := decide(t, s, key, 1, start.Add(every)); !d.Allowed {
			t.Fatalf("%s at the end of the wait: %+v, want admitted", key, d)
		}
		// Learn a refusal again, then give a token back: the refusal is forgotten.
		if d := decide(t, s, key, 1, start.Add(every)); d.Allowed {
			t.Fatalf("%s, the next request: %+v, want refused", key, d)
		}
		charge(t, s, key, -1, start.Add(every))
		if d := decide(t, s, key, 1, start.Add(every)); !d.Allowed {
			t.Fatalf("%s after a token given back: %+v, want admitted", key, d)
		}
		before = rounds.Load()
		if d := decide(t, s, key, 0, start.Add(every)); !d.Allowed || rounds.Load()-before != 1 {
			t.Fatalf("%s, a peek: %+v after %d round trips, want admitted by Redis", key, d, rounds.Load()-before)
		}
	}
}

// TestAllRefusalMemory checks, on a real Redis and an injected clock, that an All of Stores
// decided in one script answers the refusals it remembers without a round trip, exactly as an
// All of twin Stores that remember nothing, deciding the same requests on keys of their own: refused by the per-key limit, then by the shared one.
// An admission of another key, which spends the shared limit, makes the group forget.
func TestAllRefusalMemory(t *testing.T) {
	addr := sharedAddr(t)
	client, twinClient := newClient(t, addr), newClient(t, addr)
	rounds := countRoundTrips(client)
	newAll := func(c redis.Scripter, opts ...Option) retryafter.Limiter {
		prefix := testPrefix(t) // the twin's keys are its own: it decides the same requests
		o := append([]Option{WithTimeout(testTimeout), withInjectedClock()}, opts...)
		perKey := New(c, rate.Every(time.Second), 2, append([]Option{WithPrefix(prefix + "key:")}, o...)...)
		shared := New(c, rate.Every(time.Minute), 3, append([]Option{WithPrefix(prefix + "all:")}, o...)...)
		return retryafter.All(perKey, retryafter.Shared(shared, "all"))
	}
	all, twin := newAll(client), newAll(twinClient, WithRefusalMemory(0))
	check := func(key string, now time.Time, wantLocal bool) retryafter.Decision {
		t.Helper()
		before := rounds.Load()
		got, err := all.Decide(context.Background(), key, 1, now)
		if err != nil {
			t.Fatal(err)
		}
		if local := rounds.Load() == before; local != wantLocal {
			t.Fatalf("%s at +%v: answered locally %v, want %v", key, now.Sub(t0), local, wantLocal)
		}
		want, err := twin.Decide(context.Background(), key, 1, now)
		if err != nil || quota(got) != quota(want) {
			t.Fatalf("%s at +%v: %+v, Redis says %+v, %v", key, now.Sub(t0), got, want, err)
		}
		return got
	}
	check("a", t0, false)
	check("a", t0, false)
	check("a", t0, false) // refused by the per-key limit: remembered
	for i := range 10 {
		check("a", t0.Add(time.Duration(i)*50*time.Millisecond), true)
	}
	check("b", t0.Add(500*time.Millisecond), false) // the shared limit's last token
	check("c", t0.Add(500*time.Millisecond), false) // refused by the shared limit: remembered
	for i := range 10 {
		check("c", t0.Add(500*time.Millisecond+time.Duration(i)*time.Second), true)
	}
	check("a", t0.Add(600*time.Millisecond), false) // forgotten: b spent the shared limit
}

// TestRefusalMemoryBound checks that the memory of refusals holds to its budget, whatever the
// keys (short, long, longer than the budget), dropping the expired first, and keeps answering.
func TestRefusalMemoryBound(t *testing.T) {
	for _, budget := range []int{1, 4096, 1 << 16} {
		r := newRefusals(budget)
		rng := rand.New(rand.NewPCG(9, uint64(budget)))
		for i := range 5000 {
			key := fmt.Sprint(i, ":", string(make([]byte, rng.IntN(300))))
			r.remember(key, refusal{cost: 1, learned: int64(i), d: int64(1 + rng.IntN(10000)), interval: 1, horizon: 10, burst: 10}, r.ticket(key, false))
			var bytes, n int
			for j := range r.shards {
				sh := &r.shards[j]
				bytes += sh.bytes
				n += len(sh.m)
				if sh.bytes > r.budget || int(sh.n.Load()) != len(sh.m) {
					t.Fatalf("budget %d: a shard holds %d bytes of %d, n %d for %d", budget, sh.bytes, r.budget, sh.n.Load(), len(sh.m))
				}
			}
			if bytes > max(budget, refusalShards) {
				t.Fatalf("budget %d: %d bytes held", budget, bytes)
			}
		}
	}
	if newRefusals(0) != nil {
		t.Fatal("a budget of 0 remembers")
	}
}

// slowSends is a redis.Scripter that holds each script call back for delay before sending it,
// while told to: a request's one-way trip to Redis, made long.
type slowSends struct {
	redis.Scripter
	slow  atomic.Bool
	delay time.Duration
}

func (s *slowSends) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	if s.slow.Load() {
		time.Sleep(s.delay)
	}
	return s.Scripter.EvalSha(ctx, sha, keys, args...)
}

// TestRememberedWaitNeverShort has Redis's refusal of a key reach it a long one-way trip after the
// request was sent, then waits out the wait that the Store remembers of it and asks again,
// quickly: Redis admits. Timed from the send, the remembered wait would end that trip early, and
// Redis would refuse the client that waited it out. Redis decides by its own clock here, which no
// test can inject: the waits are real, and short.
func TestRememberedWaitNeverShort(t *testing.T) {
	client := newClient(t, sharedAddr(t))
	slow := &slowSends{Scripter: client, delay: 5 * time.Millisecond}
	s := New(slow, rate.Every(20*time.Millisecond), 1, WithPrefix(testPrefix(t)), WithTimeout(time.Second))
	checked := 0
	for round := range 3 {
		if d := decide(t, s, "k", 1, time.Now()); !d.Allowed {
			time.Sleep(d.RetryAfter)
			continue
		}
		slow.slow.Store(true)
		refused := decide(t, s, "k", 1, time.Now())
		slow.slow.Store(false)
		if refused.Allowed {
			continue // the bucket refilled meanwhile on a slow host
		}
		local := s.LocalAnswers()
		d := decide(t, s, "k", 1, time.Now())
		if d.Allowed || s.LocalAnswers() != local+1 {
			t.Fatalf("round %d: %+v, %d local answers, want the refusal answered from memory", round, d, s.LocalAnswers()-local)
		}
		time.Sleep(d.RetryAfter)
		if d := decide(t, s, "k", 1, time.Now()); !d.Allowed {
			t.Fatalf("round %d: refused %v after waiting out the remembered wait: %+v", round, d.RetryAfter, d)
		}
		checked++
	}
	if checked == 0 {
		t.Fatal("no refusal was remembered: the test checks nothing")
	}
}

// heldSends holds the first script call sent after hold is armed until release is closed or its
// deadline passes (and answers it with fail, if set, instead of Redis's); every other call
// arrives (see arrive), and with stall set waits out its deadline.
type heldSends struct {
	redis.Scripter
	hold    atomic.Bool
	held    chan struct{} // the held call is in
	release chan struct{}
	fail    error
	stall   atomic.Bool // the other calls wait out their deadline
	// answered holds the answer rather than the call: Redis decides it before what follows.
	answered bool
	calls    atomic.Int64
}

func (h *heldSends) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	h.calls.Add(1)
	fail := func(err error) *redis.Cmd {
		cmd := redis.NewCmd(ctx)
		cmd.SetErr(err)
		return cmd
	}
	if h.hold.CompareAndSwap(true, false) {
		var answer *redis.Cmd
		if h.answered {
			answer = h.Scripter.EvalSha(ctx, sha, keys, args...)
		}
		h.held <- struct{}{}
		select {
		case <-h.release:
		case <-ctx.Done():
			return fail(ctx.Err())
		}
		if h.fail != nil {
			return fail(h.fail)
		}
		if answer != nil {
			return answer
		}
	} else {
		arrive(ctx)
		if h.stall.Load() { // a Redis that does not answer in time
			<-ctx.Done()
			return fail(ctx.Err())
		}
	}
	return h.Scripter.EvalSha(ctx, sha, keys, args...)
}

// TestRefusalMemoryOneRoundTripAtTheLastToken checks, on a real Redis and an injected clock,
// that when a key's bucket, as the Store last saw it, holds one request's tokens but not two
// requests', the key's requests that come while one of them is in the air to Redis wait for its
// answer rather than each ask: one round trip for all, each answered exactly as Redis answers a
// twin Store that remembers nothing. With room for two they each ask; a round trip that Redis
// fails fails its waiters with it, and a waiter whose own deadline passes fails with that.
func TestRefusalMemoryOneRoundTripAtTheLastToken(t *testing.T) {
	addr := sharedAddr(t)
	prefix := testPrefix(t)
	const every, burst, waiters = time.Second, 3, 6
	arrived := make(chan struct{}, waiters)
	s := New(newClient(t, addr), rate.Every(every), burst, WithPrefix(prefix), WithTimeout(testTimeout), withInjectedClock())
	h := &heldSends{Scripter: s.client, held: make(chan struct{})}
	s.client = h
	twin := New(newClient(t, addr), rate.Every(every), burst, WithPrefix(prefix), WithTimeout(testTimeout), withInjectedClock(), WithRefusalMemory(0))
	boarded := atomic.Int64{}
	testHookBoarded = func(ctx context.Context) { boarded.Add(1); arrive(ctx) }
	t.Cleanup(func() { testHookBoarded = nil })
	rng := rand.New(rand.NewPCG(3, 4))

	// flood has a refusal of key remembered at start, then sends one request at at, held in
	// the air, and waiters more at random instants in [at, at + within), while it is held; it
	// releases it once each of them has waited for it, sent a call of its own or been answered,
	// and returns the held request's answer and theirs, and the calls and local answers since
	// the held one.
	flood := func(key string, start, at time.Time, within time.Duration, waiters int, fail error, ctx context.Context) (lead result, rest []result, calls, local int64) {
		t.Helper()
		if d := decide(t, s, key, burst, start); !d.Allowed {
			t.Fatalf("%s, the burst: %+v", key, d)
		}
		if d := decide(t, s, key, 1, start); d.Allowed {
			t.Fatalf("%s, after the burst: %+v, want refused", key, d)
		}
		h.release, h.fail = make(chan struct{}), fail
		h.hold.Store(true)
		calls, local = h.calls.Load(), int64(s.LocalAnswers())
		done := make(chan result)
		go func() {
			d, err := s.Decide(context.Background(), key, 1, at)
			done <- result{d, err, at}
		}()
		<-h.held
		results := make(chan result, waiters)
		for range waiters {
			now := at.Add(time.Duration(rng.Int64N(int64(within/time.Microsecond))) * time.Microsecond)
			ctx := context.WithValue(ctx, arrival{}, sync.OnceFunc(func() { arrived <- struct{}{} }))
			go func() {
				d, err := s.Decide(ctx, key, 1, now)
				arrive(ctx)
				results <- result{d, err, now}
			}()
		}
		for range waiters {
			<-arrived
		}
		close(h.release)
		lead = <-done
		for range waiters {
			rest = append(rest, <-results)
		}
		return lead, rest, h.calls.Load() - calls, int64(s.LocalAnswers()) - local
	}

	t.Run("one token", func(t *testing.T) {
		start := t0
		lead, rest, calls, local := flood("one", start, start.Add(every), every, waiters, nil, context.Background())
		if lead.err != nil || !lead.d.Allowed {
			t.Fatalf("the request at the token: %+v, %v; want admitted", lead.d, lead.err)
		}
		if calls != 1 || local != waiters {
			t.Fatalf("%d script calls and %d local answers for %d requests in the air together, want 1 and %d", calls, local, waiters+1, waiters)
		}
		for _, r := range rest {
			if want := decide(t, twin, "one", 1, r.at); r.err != nil || r != (result{want, nil, r.at}) {
				t.Fatalf("a waiter at +%v: %+v, %v; Redis says %+v", r.at.Sub(start), r.d, r.err, want)
			}
		}
	})
	t.Run("two tokens", func(t *testing.T) {
		start := t0.Add(time.Hour)
		before := boarded.Load()
		// At start + 2 s the bucket holds exactly two tokens: the second request asks too.
		lead, rest, calls, _ := flood("two", start, start.Add(2*every), time.Microsecond, 1, nil, context.Background())
		if calls != 2 || boarded.Load() != before {
			t.Fatalf("%d script calls, %d waits for another's, for 2 requests with room for two; want one each, none waiting", calls, boarded.Load()-before)
		}
		for _, r := range append(rest, lead) {
			if r.err != nil {
				t.Fatal(r.err)
			}
		}
	})
	t.Run("Redis fails", func(t *testing.T) {
		start := t0.Add(2 * time.Hour)
		lead, rest, calls, _ := flood("failed", start, start.Add(every), every, waiters, errors.New("connection reset by peer"), context.Background())
		if !errors.Is(lead.err, ErrUnavailable) {
			t.Fatalf("the held request: %v, want ErrUnavailable", lead.err)
		}
		for _, r := range rest {
			if !errors.Is(r.err, ErrUnavailable) || !strings.Contains(r.err.Error(), "connection reset") {
				t.Fatalf("a waiter: %+v, %v; want the held request's failure", r.d, r.err)
			}
		}
		if calls != 1 {
			t.Fatalf("%d script calls, want the held one only", calls)
		}
	})
	t.Run("own deadline", func(t *testing.T) {
		start := t0.Add(3 * time.Hour)
		ctx, cancel := context.WithDeadline(context.Background(), time.Now())
		defer cancel()
		_, rest, _, _ := flood("late", start, start.Add(every), every, waiters, nil, ctx)
		for _, r := range rest {
			if !errors.Is(r.err, context.DeadlineExceeded) || errors.Is(r.err, ErrUnavailable) {
				t.Fatalf("a waiter past its own deadline: %+v, %v; want its deadline's error", r.d, r.err)
			}
		}
	})
}

// arrival is a context value: arrive calls it once, at the first of the points a request of
// the context may reach: a call sent to Redis, a wait for another's, or its answer.
type arrival struct{}

func arrive(ctx context.Context) {
	if once, ok := ctx.Value(arrival{}).(func()); ok {
		once()
	}
}

// A result is what one Decide returned, and the instant it was asked at.
type result struct {
	d   retryafter.Decision
	err error
	at  time.Time
}

// TestRefusalBytes checks that what the memory counts for a refusal besides its key's bytes is at
// least what an entry takes of the heap, its share of the map included, for maps of sizes that
// fall at each point of the map's growth.
func TestRefusalBytes(t *testing.T) {
	for n := 500; n <= 9000; n += 500 {
		keys := make([]string, n)
		for i := range keys {
			keys[i] = fmt.Sprintf("k%019d", i)
		}
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		m := map[string]refusal{}
		for _, k := range keys {
			m[k] = refusal{}
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		if per := float64(after.HeapAlloc-before.HeapAlloc) / float64(len(m)); per > refusalBytes {
			t.Errorf("%d refusals take %.0f bytes each besides their keys; refusalBytes is %d", n, per, refusalBytes)
		}
		runtime.KeepAlive(m)
	}
}

// TestRefusalMemoryChargeInFlight checks, on a real Redis and an injected clock, that a refusal
// whose answer was in flight while the Store charged the key is not remembered: Redis gave it
// before the charge, and it would tell too short a wait, or too long a one, refusing what Redis
// admits, after a charge that gives quota back. The charge is sent, or held back
// (WithDeferredCharges), while Redis's refusal is on its way back (another replica spent the
// key's token). The next request goes to Redis, and gets its answer.
func TestRefusalMemoryChargeInFlight(t *testing.T) {
	addr := sharedAddr(t)
	const every, burst = time.Second, 3
	for _, tc := range []struct {
		held bool
		cost int
	}{{false, 2}, {true, 2}, {false, -2}} {
		held := tc.held
		t.Run(fmt.Sprintf("cost %d, held back %v", tc.cost, held), func(t *testing.T) {
			prefix := testPrefix(t)
			opts := []Option{WithPrefix(prefix), WithTimeout(testTimeout), withInjectedClock()}
			if held {
				opts = append(opts, WithDeferredCharges(time.Hour))
			}
			s := New(newClient(t, addr), rate.Every(every), burst, opts...)
			h := &heldSends{Scripter: s.client, held: make(chan struct{}), release: make(chan struct{}), answered: true}
			s.client = h
			other := New(newClient(t, addr), rate.Every(every), burst, WithPrefix(prefix), WithTimeout(testTimeout), withInjectedClock(), WithRefusalMemory(0))
			start := t0
			if d := decide(t, s, "k", burst, start); !d.Allowed {
				t.Fatalf("the burst: %+v", d)
			}
			if d := decide(t, s, "k", 1, start); d.Allowed {
				t.Fatalf("after the burst: %+v, want refused", d)
			}
			at := start.Add(every) // a token
			if d := decide(t, other, "k", 1, at); !d.Allowed {
				t.Fatalf("the other replica at the token: %+v, want admitted", d)
			}
			h.hold.Store(true)
			done := make(chan result)
			go func() {
				d, err := s.Decide(context.Background(), "k", 1, at)
				done <- result{d, err, at}
			}()
			<-h.held // Redis refused it
			charge(t, s, "k", tc.cost, at)
			close(h.release)
			if r := <-done; r.err != nil || r.d.Allowed {
				t.Fatalf("the request in flight: %+v, %v; want refused", r.d, r.err)
			}
			calls, local := h.calls.Load(), s.LocalAnswers()
			got := decide(t, s, "k", 1, at)
			if h.calls.Load() == calls || s.LocalAnswers() != local {
				t.Fatalf("the next request was answered from memory: %+v", got)
			}
			switch {
			case tc.cost < 0 && !got.Allowed:
				t.Fatalf("the next request, after quota given back: %+v, want admitted", got)
			case tc.cost > 0:
				if want := decide(t, other, "k", 1, at); got != want {
					t.Fatalf("the next request: %+v, Redis says %+v", got, want)
				}
			}
		})
	}
}

// TestRefusalMemoryWaitOutOfTime checks, on a real Redis, that a request that waits for another's
// round trip at the key's last token and runs out of time meanwhile is answered as one whose own
// round trip timed out: decided locally with WithLocalFallback, and else failed, wrapping
// ErrUnavailable. Its wait is no evidence against Redis either way.
func TestRefusalMemoryWaitOutOfTime(t *testing.T) {
	const every, burst, timeout = time.Hour, 2, 20 * time.Millisecond
	for _, local := range []bool{false, true} {
		t.Run(fmt.Sprint("local fallback ", local), func(t *testing.T) {
			opts := []Option{WithTimeout(timeout), WithProbeInterval(time.Hour)}
			if local {
				opts = append(opts, WithLocalFallback(3))
			}
			s, h, at, boarded := atLastToken(t, every, burst, opts...)
			h.hold.Store(true)
			done := make(chan error)
			go func() {
				_, err := s.Decide(context.Background(), "k", 1, at)
				done <- err
			}()
			<-h.held
			calls := h.calls.Load()
			d, err := s.Decide(context.Background(), "k", 1, at) // waits out its budget
			if boarded.Load() != 1 || h.calls.Load() != calls {
				t.Fatalf("%d waits, %d calls: want the request to wait for the one in flight", boarded.Load(), h.calls.Load()-calls)
			}
			switch {
			case local && (err != nil || d.Limit != 1):
				t.Fatalf("with a local fallback: %+v, %v; want decided locally, on its share of the burst", d, err)
			case !local && !errors.Is(err, ErrUnavailable):
				t.Fatalf("%+v, %v; want ErrUnavailable", d, err)
			}
			close(h.release)
			<-done
		})
	}
}

// atLastToken returns a Store of every, burst on a real Redis and an injected clock, whose client
// holds calls (heldSends), with a refusal of "k" remembered at t0, and the instant of the key's
// next token; boarded counts the requests that wait for another's round trip.
func atLastToken(t *testing.T, every time.Duration, burst int, opts ...Option) (s *Store, h *heldSends, at time.Time, boarded *atomic.Int64) {
	t.Helper()
	s = New(newClient(t, sharedAddr(t)), rate.Every(every), burst, append([]Option{WithPrefix(testPrefix(t)), withInjectedClock()}, opts...)...)
	h = &heldSends{Scripter: s.client, held: make(chan struct{}), release: make(chan struct{})}
	s.client = h
	// The burst and the refusal with the tests' long timeout: the short one of a test may run
	// out on a loaded machine before its subject begins.
	timeout := s.timeout
	s.timeout = testTimeout
	if d := decide(t, s, "k", burst, t0); !d.Allowed {
		t.Fatalf("the burst: %+v", d)
	}
	if d := decide(t, s, "k", 1, t0); d.Allowed {
		t.Fatalf("after the burst: %+v, want refused", d)
	}
	s.timeout = timeout
	boarded = new(atomic.Int64)
	testHookBoarded = func(context.Context) { boarded.Add(1) }
	t.Cleanup(func() { testHookBoarded = nil })
	return s, h, t0.Add(every), boarded
}

// TestRefusalMemoryShortRoundTripNoEvidence checks, on a real Redis, that a request that waited
// for another's round trip at the key's last token, and then asks Redis itself with what is left
// of its timeout, does not count that round trip's timing out against Redis's health: it had
// less than the store's timeout. The one waited for fails on its caller's deadline here, so that
// the request asks for itself; Redis then stalls.
func TestRefusalMemoryShortRoundTripNoEvidence(t *testing.T) {
	const every, burst, timeout = time.Hour, 2, 50 * time.Millisecond
	s, h, at, boarded := atLastToken(t, every, burst, WithTimeout(timeout), WithProbeInterval(time.Hour))
	h.hold.Store(true)
	done := make(chan error)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), timeout/5)
		defer cancel()
		_, err := s.Decide(ctx, "k", 1, at)
		done <- err
	}()
	<-h.held
	h.stall.Store(true)
	_, err := s.Decide(context.Background(), "k", 1, at)
	if lead := <-done; !errors.Is(lead, context.DeadlineExceeded) || errors.Is(lead, ErrUnavailable) {
		t.Fatalf("the request waited for: %v, want its own deadline's error", lead)
	}
	if boarded.Load() != 1 || !errors.Is(err, ErrUnavailable) {
		t.Fatalf("%d waits, %v: want a wait, then a round trip of its own that timed out", boarded.Load(), err)
	}
	s.health.mu.Lock()
	failures := s.health.failures
	s.health.mu.Unlock()
	if failures != 0 {
		t.Fatalf("%d failures counted against Redis, want none", failures)
	}
}

// TestRefusalMemoryChangeInFlight checks, on a real Redis and an injected clock, that while a
// charge is on its way to Redis, sent by Charge, the refusals that Redis gives the key meanwhile
// are not remembered: Redis may have given them before the charge, and they would tell too short
// a wait once it lands; and that while a decision carries it (held back by WithDeferredCharges),
// the key's other decisions wait for it.
func TestRefusalMemoryChangeInFlight(t *testing.T) {
	addr := sharedAddr(t)
	const every, burst = time.Second, 3
	for _, carried := range []bool{true, false} {
		t.Run(fmt.Sprint("carried by a decision ", carried), func(t *testing.T) {
			prefix := testPrefix(t)
			opts := []Option{WithPrefix(prefix), WithTimeout(testTimeout), withInjectedClock()}
			if carried {
				opts = append(opts, WithDeferredCharges(time.Hour))
			}
			s := New(newClient(t, addr), rate.Every(every), burst, opts...)
			h := &heldSends{Scripter: s.client, held: make(chan struct{}), release: make(chan struct{})}
			s.client = h
			other := New(newClient(t, addr), rate.Every(every), burst, WithPrefix(prefix), WithTimeout(testTimeout), withInjectedClock(), WithRefusalMemory(0))
			if d := decide(t, other, "k", burst, t0); !d.Allowed {
				t.Fatalf("the burst: %+v", d)
			}
			at := t0.Add(every / 2)
			inFlight := func() error { return s.Charge(context.Background(), "k", 2, at) }
			if carried {
				charge(t, s, "k", 2, t0) // held back, for the next decision to carry
				inFlight = func() error {
					if d, err := s.Decide(context.Background(), "k", 1, at); err != nil || d.Allowed {
						return fmt.Errorf("the decision that carried the charge: %+v, %v; want refused", d, err)
					}
					return nil
				}
			}
			h.hold.Store(true)
			done := make(chan error)
			go func() { done <- inFlight() }()
			<-h.held // the charge, not yet sent
			if carried {
				// A decision of the key waits for the charge its round trip carries (see
				// takeCharges), and is answered after it.
				waited := make(chan result, 1)
				go func() {
					d, err := s.Decide(context.Background(), "k", 1, at)
					waited <- result{d: d, err: err}
				}()
				close(h.release)
				if err := <-done; err != nil {
					t.Fatal(err)
				}
				if r := <-waited; r.err != nil || r.d.Allowed {
					t.Fatalf("a request while the charge was in flight: %+v, %v; want refused", r.d, r.err)
				}
			} else {
				if d := decide(t, s, "k", 1, at); d.Allowed {
					t.Fatalf("a request while the charge is in flight: %+v, want refused", d)
				}
				calls, local := h.calls.Load(), s.LocalAnswers()
				if d := decide(t, s, "k", 1, at); h.calls.Load() == calls || s.LocalAnswers() != local {
					t.Fatalf("a refusal Redis gave while a charge was in flight was remembered: %+v", d)
				}
				close(h.release)
				if err := <-done; err != nil {
					t.Fatal(err)
				}
			}
			got := decide(t, s, "k", 1, at)
			if want := decide(t, other, "k", 1, at); got != want {
				t.Fatalf("after the charge: %+v, Redis says %+v", got, want)
			}
		})
	}
}

// TestRefusalMemoryBudget fills a memory of 1 MiB with the refusals of 20,000 keys whose
// policies have names of 600 bytes, built anew for each (as a policy function may), some of them
// a group's with two layers: the heap the memory holds stays within its budget.
func TestRefusalMemoryBudget(t *testing.T) {
	const budget = 1 << 20
	name := func(i int) string { return strings.Repeat("p", 600) + strconv.Itoa(i) }
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	r := newRefusals(budget)
	for i := range 20000 {
		key := fmt.Sprintf("k%019d", i)
		d := retryafter.Decision{Policy: retryafter.Policy{Name: name(i), Limit: 1, Burst: 1}}
		if i%2 == 1 {
			d = edge.Binding(d, retryafter.Decision{Policy: retryafter.Policy{Name: name(i), Limit: 2, Burst: 1}})
		}
		r.remember(key, refusal{d: int64(time.Hour), interval: int64(time.Second), horizon: int64(time.Second), burst: 1, dec: d}, r.ticket(key, false))
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if held := int64(after.HeapAlloc) - int64(before.HeapAlloc); held > budget*11/10 {
		t.Errorf("the memory holds %d KiB of heap against a budget of %d KiB", held>>10, budget>>10)
	}
	runtime.KeepAlive(r)
}

// rememberKey has r remember a refusal of the i-th key, for an hour from the instant 0.
func rememberKey(r *refusals, i int) string {
	key := fmt.Sprintf("k%019d", i)
	r.remember(key, refusal{d: int64(time.Hour), interval: int64(time.Second), horizon: int64(time.Second), burst: 1}, r.ticket(key, false))
	return key
}

// fullRefusals returns a memory of budget bytes filled past its bound, and the count of keys
// it was given.
func fullRefusals(budget int) (*refusals, int) {
	r := newRefusals(budget)
	n := budget / (20 + refusalBytes) * 5 / 4
	for i := range n {
		rememberKey(r, i)
	}
	return r, n
}

// TestRefusalMemoryRoomCost times new refusals in a memory at its bound, of 64 KiB and of
// 32 MiB: making room costs about the same per refusal whatever the budget (at most 10 times as
// much in the larger, where the scans of whole shards made it hundreds of times).
func TestRefusalMemoryRoomCost(t *testing.T) {
	const n = 20000
	per := func(budget int) time.Duration {
		best := time.Duration(1 << 62)
		for range 3 {
			r, next := fullRefusals(budget)
			start := time.Now()
			for i := range n {
				rememberKey(r, next+i)
			}
			best = min(best, time.Since(start)/n)
		}
		return best
	}
	small, large := per(64<<10), per(32<<20)
	t.Logf("a refusal at the bound: %v in 64 KiB, %v in 32 MiB", small, large)
	if large > 10*small {
		t.Errorf("a refusal at the bound costs %v in 32 MiB, %v in 64 KiB", large, small)
	}
}

// BenchmarkRefusalMemory is the cost of remembering a refusal of a new key in a memory of
// 32 MiB, empty (each forgotten at once) and at its bound (each making room).
func BenchmarkRefusalMemory(b *testing.B) {
	b.Run("empty", func(b *testing.B) {
		r := newRefusals(32 << 20)
		i := 0
		for b.Loop() {
			r.forget(rememberKey(r, i))
			i++
		}
	})
	b.Run("full", func(b *testing.B) {
		r, i := fullRefusals(32 << 20)
		for b.Loop() {
			rememberKey(r, i)
			i++
		}
	})
}

// rideFailed sends, at the instant at of atLastToken's Store s, a request of "k" whose call h
// holds, then one that waits for it, and lets the first fail with h.fail once the second waits.
// It returns the second's result and the first's error.
func rideFailed(s *Store, h *heldSends, at time.Time, boarded *atomic.Int64) (result, error) {
	h.hold.Store(true)
	lead := make(chan error, 1)
	go func() {
		_, err := s.Decide(context.Background(), "k", 1, at)
		lead <- err
	}()
	<-h.held
	ride := make(chan result, 1)
	go func() {
		d, err := s.Decide(context.Background(), "k", 1, at)
		ride <- result{d: d, err: err}
	}()
	for boarded.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	close(h.release)
	err := <-lead
	return <-ride, err
}

// TestRefusalMemoryRideFailed checks, on a real Redis, that a request that waited for another's
// round trip at the key's last token, which failed with an error that is not Redis's (here the
// key's), then asks Redis itself within what is left of the store's timeout, and takes the token,
// rather than fail as if its time were over.
func TestRefusalMemoryRideFailed(t *testing.T) {
	s, h, at, boarded := atLastToken(t, time.Hour, 2, WithTimeout(testTimeout))
	// A key's error, as Redis tells it, for the round trip waited for.
	other := newClient(t, sharedAddr(t))
	wrong := testPrefix(t) + "a string"
	if err := other.Set(context.Background(), wrong, "x", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	h.fail = other.HGet(context.Background(), wrong, "f").Err()
	if !isKeyState(h.fail) {
		t.Fatalf("HGET of a string: %v, want WRONGTYPE", h.fail)
	}
	r, lead := rideFailed(s, h, at, boarded)
	if !errors.Is(lead, ErrKeyState) {
		t.Fatalf("the request waited for: %v, want the key's error", lead)
	}
	if r.err != nil || !r.d.Allowed {
		t.Fatalf("the request that waited: %+v, %v; want the last token, from Redis", r.d, r.err)
	}
}

// TestBoardEdges checks at the edges which requests board a round trip on a remembered refusal
// (a bucket of 4 tokens, one a second, to be full 3 s after the refusal arrived): one at the
// instant it arrived does, one before does not; one at the instant the bucket is full does not,
// whatever its cost; one of the whole burst does, one above it does not; and a peek (a cost of
// 0), which admits nothing, never does, even of a bucket in debt.
func TestBoardEdges(t *testing.T) {
	const sec = int64(time.Second)
	const learned = 100 * sec
	for i, c := range []struct {
		cost  int
		d     int64 // the bucket full in, at learned
		at    int64
		board bool
	}{
		{1, 3 * sec, learned, true},
		{1, 3 * sec, learned - 1, false},
		{3, 3 * sec, learned + 3*sec - 1, true}, // 2 × 3 tokens would not fit
		{3, 3 * sec, learned + 3*sec, false},
		{4, 3 * sec, learned, true},
		{5, 3 * sec, learned, false},
		{1, 5 * sec, learned, true},
		{0, 5 * sec, learned, false},
	} {
		r := newRefusals(1 << 20)
		key := fmt.Sprint(i)
		r.remember(key, refusal{cost: 1, learned: learned, until: learned + sec, d: c.d, interval: sec, horizon: 4 * sec, burst: 4}, r.ticket(key, false))
		f, lead := r.board(key, c.cost, c.at, 0)
		if got := f != nil && lead; got != c.board {
			t.Errorf("a cost of %d, %v after the refusal, full %v after it: boards %v, want %v", c.cost, time.Duration(c.at-learned), time.Duration(c.d), got, c.board)
		}
	}
}

// TestAnswerAtExpiry checks that a remembered refusal answers no request from the instant its
// bucket is full, not even one above the burst, and is forgotten then.
func TestAnswerAtExpiry(t *testing.T) {
	const sec = int64(time.Second)
	const learned, d = 100 * sec, 3 * sec
	r := newRefusals(1 << 20)
	r.remember("k", refusal{cost: 1, learned: learned, until: learned + sec, d: d, interval: sec, horizon: 4 * sec, burst: 4}, r.ticket("k", false))
	if got, ok := r.answer("k", 5, learned+d-1, 0, 0); !ok || got.RetryAfter != rate.InfDuration {
		t.Fatalf("above the burst, a nanosecond before the bucket is full: %+v, %v; want refused for ever", got, ok)
	}
	if got, ok := r.answer("k", 5, learned+d, 0, 0); ok {
		t.Fatalf("above the burst, as the bucket is full: %+v, want no answer", got)
	}
	if n := r.shard("k").n.Load(); n != 0 {
		t.Fatalf("%d refusals remembered after the expiry, want none", n)
	}
}

// TestRefusalMemoryRideSharesFailure checks, on a real Redis, that the requests that waited for
// another's round trip at the key's last token share the failure of Redis it met (here a refused
// connection): each fails with it, without a round trip of its own.
func TestRefusalMemoryRideSharesFailure(t *testing.T) {
	s, h, at, boarded := atLastToken(t, time.Hour, 2, WithTimeout(testTimeout))
	h.fail = syscall.ECONNREFUSED
	calls := h.calls.Load()
	r, lead := rideFailed(s, h, at, boarded)
	if !errors.Is(lead, ErrUnavailable) || !errors.Is(lead, syscall.ECONNREFUSED) {
		t.Fatalf("the request waited for: %v, want Redis's failure", lead)
	}
	if !errors.Is(r.err, ErrUnavailable) || !errors.Is(r.err, syscall.ECONNREFUSED) || h.calls.Load() != calls+1 {
		t.Fatalf("the request that waited: %+v, %v after %d calls; want Redis's failure, with no call of its own", r.d, r.err, h.calls.Load()-calls)
	}
}

// TestRefusalLayersBytes checks that what the memory counts for a group's refusal besides its key
// and its entry, the list of its Decision's layers, is at least what that list takes of the heap,
// and not half as much again, for groups of 2 layers to the most a group has.
func TestRefusalLayersBytes(t *testing.T) {
	const n = 2000
	for layers := 2; layers <= maxLayers; layers++ {
		ds := make([]retryafter.Decision, layers)
		for i := range ds {
			ds[i] = retryafter.Decision{Allowed: i > 0, Limit: i + 1}
		}
		kept := make([]retryafter.Decision, n)
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		for i := range kept {
			kept[i] = edge.Binding(ds...)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		per := float64(after.HeapAlloc-before.HeapAlloc) / n
		e := refusal{dec: kept[0]}
		if counted := e.size("") - refusalBytes; per > float64(counted) || float64(counted) > 1.5*per {
			t.Errorf("the layers of a group of %d take %.0f bytes each; the memory counts %d, want no less, nor half again as many", layers, per, counted)
		}
		runtime.KeepAlive(kept)
	}
}

// TestRefusalMemoryMakesRoom checks how a shard of the memory makes room, with a budget of
// exactly 16 refusals: 16 fit, with none dropped; a 17th drops an eighth of the budget more than
// it needs (3 refusals), so that the next few fit at once; and those whose bucket is full by the
// new refusal's instant go first, all of them and only them. A refusal refreshed in place
// costs what it did.
func TestRefusalMemoryMakesRoom(t *testing.T) {
	const live, gone = int64(1e12), int64(1e3) // buckets full in, from learned 0
	size := (&refusal{}).size("k0000")
	fill := func(expiring int) (*refusals, *refusalShard, []string) {
		r := newRefusals(refusalShards * 16 * size)
		var keys []string
		for i := 0; len(keys) < 17; i++ {
			if k := fmt.Sprintf("k%04d", i); r.shard(k) == r.shard("k0000") {
				keys = append(keys, k)
			}
		}
		for i, k := range keys[:16] {
			d := live
			if i < expiring {
				d = gone
			}
			r.remember(k, refusal{cost: 1, d: d, interval: 1, horizon: 1, burst: 1}, r.ticket(k, false))
		}
		return r, r.shard("k0000"), keys
	}

	r, sh, keys := fill(0)
	if n := sh.n.Load(); n != 16 || sh.bytes != 16*size {
		t.Fatalf("16 refusals in a budget of 16: %d kept, %d bytes of %d", n, sh.bytes, 16*size)
	}
	bytes := sh.bytes
	r.refresh(keys[0], refusal{cost: 1, d: live, interval: 1, horizon: 1, burst: 1}, r.ticket(keys[0], false))
	if sh.bytes != bytes {
		t.Fatalf("a refusal refreshed in place: %d bytes, were %d", sh.bytes, bytes)
	}
	r.remember(keys[16], refusal{cost: 1, d: live, interval: 1, horizon: 1, burst: 1}, r.ticket(keys[16], false))
	if n := sh.n.Load(); n != 14 {
		t.Fatalf("a 17th refusal in a budget of 16: %d kept, want 13 and the new one", n)
	}

	r, sh, keys = fill(8)
	r.remember(keys[16], refusal{cost: 1, learned: gone, d: live, interval: 1, horizon: 1, burst: 1}, r.ticket(keys[16], false))
	if n := sh.n.Load(); n != 9 {
		t.Fatalf("a 17th refusal, with 8 full by then: %d kept, want the 8 others and the new one", n)
	}
	for k, e := range sh.m {
		if e.d != live {
			t.Fatalf("%s, full by the new refusal's instant, kept", k)
		}
	}
}
