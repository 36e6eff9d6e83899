package redisstore

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/time/rate"

	"github.com/retryafter/retryafter"
	"github.com/retryafter/retryafter/internal/testkit"
)

// scriptCalls is a redis.Scripter that counts the script calls it passes on.
type scriptCalls struct {
	redis.Scripter
	n atomic.Int64
}

func (s *scriptCalls) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	s.n.Add(1)
	return s.Scripter.EvalSha(ctx, sha, keys, args...)
}

func (s *scriptCalls) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	s.n.Add(1)
	return s.Scripter.Eval(ctx, script, keys, args...)
}

// TestDeferredChargesAgree decides random requests, each followed by a charge of what it used,
// as ChargedAfter does, on a real Redis and an injected clock, by a Store whose charges are held
// back and by one that sends them at once, alone and last in an All of two or three: every
// Decision is the same, over gaps short and long (a debt repaid, a bucket refilled), with a
// Flush now and then; and the Store that holds charges back makes one script call a request.
func TestDeferredChargesAgree(t *testing.T) {
	client := newClient(t, sharedAddr(t))
	for _, layers := range []int{1, 2, 3} {
		t.Run(fmt.Sprintf("layers=%d", layers), func(t *testing.T) {
			ctx := context.Background()
			prefix := testPrefix(t)
			calls := &scriptCalls{Scripter: keptKeys{client}}
			opts := func(name string, o ...Option) []Option {
				return append([]Option{WithPrefix("{p}" + prefix + name), WithTimeout(testTimeout), withCallerClock()}, o...)
			}
			held := New(calls, rate.Every(10*time.Millisecond), 50, opts("held:", WithDeferredCharges(time.Hour))...)
			sent := New(keptKeys{client}, rate.Every(10*time.Millisecond), 50, opts("sent:")...)
			var a, b retryafter.Limiter = held, sent
			perKey := func(name string, c redis.Scripter) *Store { return New(c, rate.Every(time.Second), 20, opts(name)...) }
			switch layers { // the held Store last, at the group's index 1 or 2
			case 2:
				a = retryafter.All(perKey("held-key:", calls), retryafter.ChargedAfter(held))
				b = retryafter.All(perKey("sent-key:", keptKeys{client}), retryafter.ChargedAfter(sent))
			case 3:
				a = retryafter.All(perKey("held-key:", calls), perKey("held-more:", calls), retryafter.ChargedAfter(held))
				b = retryafter.All(perKey("sent-key:", keptKeys{client}), perKey("sent-more:", keptKeys{client}), retryafter.ChargedAfter(sent))
			}
			rng := rand.New(rand.NewPCG(11, 12))
			now := t0
			requests := 0
			for i := range 300 {
				now = now.Add(time.Duration(rng.Int64N(int64([]time.Duration{time.Millisecond, 100 * time.Millisecond, 2 * time.Second}[rng.IntN(3)]))) / time.Microsecond * time.Microsecond)
				key := fmt.Sprint("k", rng.IntN(2))
				cost := 1
				if layers == 1 {
					cost = rng.IntN(3)
				}
				before := calls.n.Load()
				da, err := a.Decide(ctx, key, cost, now)
				if err != nil {
					t.Fatal(err)
				}
				db, err := b.Decide(ctx, key, cost, now)
				if err != nil {
					t.Fatal(err)
				}
				if !agrees(quota(da), quota(db)) {
					t.Fatalf("request %d (%s, cost %d, at %v): held back %+v, sent %+v", i, key, cost, now.Sub(t0), quota(da), quota(db))
				}
				if n := calls.n.Load() - before; n > 1 && i > 0 { // the first loads the script
					t.Fatalf("request %d: %d script calls", i, n)
				}
				requests++
				if da.Allowed {
					used := rng.IntN(40)
					if err := held.Charge(ctx, key, used, now); err != nil {
						t.Fatal(err)
					}
					if err := sent.Charge(ctx, key, used, now); err != nil {
						t.Fatal(err)
					}
				}
				if rng.IntN(20) == 0 {
					if err := held.Flush(ctx); err != nil {
						t.Fatal(err)
					}
				}
			}
			if requests == 0 {
				t.Fatal("no request")
			}
		})
	}
}

// TestDeferredChargesFlush holds a charge back and flushes it, as on a graceful shutdown: another
// Store on the same keys, which holds nothing back, then sees the debt, exactly as if the charge
// had been sent at once; and a second Flush sends nothing.
func TestDeferredChargesFlush(t *testing.T) {
	client := newClient(t, sharedAddr(t))
	ctx := context.Background()
	prefix := testPrefix(t)
	calls := &scriptCalls{Scripter: keptKeys{client}}
	held := New(calls, rate.Every(time.Second), 5, WithPrefix(prefix), WithTimeout(testTimeout), withCallerClock(), WithDeferredCharges(time.Hour))
	other := New(keptKeys{client}, rate.Every(time.Second), 5, WithPrefix(prefix), WithTimeout(testTimeout), withCallerClock())
	if err := held.Charge(ctx, "k", 8, t0); err != nil {
		t.Fatal(err)
	}
	if calls.n.Load() != 0 {
		t.Fatalf("%d script calls for a charge held back", calls.n.Load())
	}
	if d := decide(t, other, "k", 0, t0); !d.Allowed {
		t.Fatalf("another replica before the flush: %+v, want the charge unseen", d)
	}
	if err := held.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	// 8 tokens of a full 5: 3 owed at t0, so a peek 2 s later owes 1 s.
	if d := decide(t, other, "k", 0, t0.Add(2*time.Second)); d.Allowed || d.RetryAfter != time.Second {
		t.Fatalf("another replica after the flush: %+v, want refused for 1s", d)
	}
	n := calls.n.Load()
	if err := held.Flush(ctx); err != nil || calls.n.Load() != n {
		t.Fatalf("a second Flush: %v, %d script calls", err, calls.n.Load()-n)
	}
}

// TestDeferredChargesNotSent takes Redis down while a charge is held back: a decision that cannot
// be sent keeps it, and the first one once Redis is back carries it.
func TestDeferredChargesNotSent(t *testing.T) {
	client := newClient(t, sharedAddr(t))
	ctx := context.Background()
	o := &outages{Scripter: keptKeys{client}}
	s := New(o, rate.Every(time.Second), 5, WithPrefix(testPrefix(t)), WithTimeout(testTimeout), withCallerClock(),
		WithDeferredCharges(time.Hour), WithProbeInterval(time.Nanosecond))
	if err := s.Charge(ctx, "k", 9, t0); err != nil {
		t.Fatal(err)
	}
	o.down.Store(true)
	for range 4 {
		if _, err := s.Decide(ctx, "k", 1, t0); err == nil {
			t.Fatal("decided with Redis down")
		}
	}
	o.down.Store(false)
	var d retryafter.Decision
	var err error
	for range 10 { // the probe interval over, Redis is asked again
		if d, err = s.Decide(ctx, "k", 0, t0); err == nil {
			break
		}
	}
	if err != nil || d.Allowed || d.RetryAfter != 4*time.Second {
		t.Fatalf("once Redis is back: %+v, %v, want refused for the 4 tokens owed", d, err)
	}
}

// TestDeferredChargesTimer checks, in a bubble of synthetic time with an in-memory script
// runner, that a charge held back and never carried by a decision is sent once its delay is over,
// and not before.
func TestDeferredChargesTimer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var sent atomic.Int64
		s := New(recorder{&sent}, rate.Every(time.Second), 5, WithDeferredCharges(50*time.Millisecond))
		if err := s.Charge(context.Background(), "k", 3, time.Now()); err != nil {
			t.Fatal(err)
		}
		if err := s.Charge(context.Background(), "k", 2, time.Now()); err != nil {
			t.Fatal(err)
		}
		time.Sleep(49 * time.Millisecond)
		synctest.Wait()
		if sent.Load() != 0 {
			t.Fatalf("%d script calls before the delay", sent.Load())
		}
		time.Sleep(2 * time.Millisecond)
		synctest.Wait()
		if sent.Load() != 1 {
			t.Fatalf("%d script calls after the delay, want one for both charges", sent.Load())
		}
	})
}

// recorder is a redis.Scripter that answers every script call with 0, counting them.
type recorder struct{ n *atomic.Int64 }

func (r recorder) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return r.EvalSha(ctx, "", keys, args...)
}
func (r recorder) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	r.n.Add(1)
	return redis.NewCmdResult(int64(0), nil)
}
func (r recorder) EvalRO(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return r.EvalSha(ctx, "", keys, args...)
}
func (r recorder) EvalShaRO(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	return r.EvalSha(ctx, "", keys, args...)
}
func (r recorder) ScriptExists(ctx context.Context, hashes ...string) *redis.BoolSliceCmd {
	return redis.NewBoolSliceResult(make([]bool, len(hashes)), nil)
}
func (r recorder) ScriptLoad(ctx context.Context, script string) *redis.StringCmd {
	return redis.NewStringResult("", nil)
}

// TestDeferredChargesMiddleware puts an All of a per-client Store and a Store charged afterwards
// behind the middleware, on an injected clock: with the charges held back each request costs one
// script call, and a client that waits out its Retry-After is admitted.
func TestDeferredChargesMiddleware(t *testing.T) {
	client := newClient(t, sharedAddr(t))
	calls := &scriptCalls{Scripter: keptKeys{client}}
	clk := testkit.NewClock(t0)
	prefix := testPrefix(t)
	opts := func(name string, o ...Option) []Option {
		return append([]Option{WithPrefix("{p}" + prefix + name), WithTimeout(testTimeout), withCallerClock()}, o...)
	}
	perClient := New(calls, rate.Every(time.Second), 5, opts("req:")...)
	tokens := New(calls, rate.Every(10*time.Millisecond), 100, opts("tok:", WithDeferredCharges(time.Hour))...)
	h := retryafter.LimitWith(retryafter.All(perClient, retryafter.ChargedAfter(tokens)), retryafter.WithClock(clk.Now))(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { retryafter.Charge(r, 60) }))
	rng := rand.New(rand.NewPCG(13, 14))
	before := calls.n.Load()
	n := 0
	refusals := testkit.RoundTrip(t, h, clk, 60, func() time.Duration {
		n++
		return time.Duration(rng.Int64N(int64(800 * time.Millisecond)))
	})
	if refusals == 0 {
		t.Fatal("nothing refused")
	}
	// RoundTrip sends two more requests for each refusal.
	if got, requests := calls.n.Load()-before, int64(n+2*refusals); got > requests {
		t.Fatalf("%d script calls for %d requests", got, requests)
	}
}

// gate is a go-redis hook that, once shut, holds the next command or pipeline the client sends
// until released, and counts the script calls sent alone and the pipelines of script calls.
type gate struct {
	shut      atomic.Bool
	held      chan struct{} // closed when a call is held
	release   chan struct{}
	commands  atomic.Int64
	pipelines atomic.Int64
}

func newGate() *gate { return &gate{held: make(chan struct{}), release: make(chan struct{})} }

func (g *gate) hold() {
	if g.shut.CompareAndSwap(true, false) {
		close(g.held)
		<-g.release
	}
}

func (g *gate) DialHook(next redis.DialHook) redis.DialHook { return next }

func (g *gate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if isScript(cmd) {
			g.commands.Add(1)
		}
		g.hold()
		return next(ctx, cmd)
	}
}

func (g *gate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if slices.ContainsFunc(cmds, isScript) {
			g.pipelines.Add(1)
		}
		g.hold()
		return next(ctx, cmds)
	}
}

// gatedClient returns a client of the tests' Redis, which has loaded the charge script, and the
// gate it goes through.
func gatedClient(t *testing.T) (*redis.Client, *gate) {
	client := newClient(t, sharedAddr(t))
	if err := chargeScript.Load(context.Background(), client).Err(); err != nil {
		t.Fatal(err)
	}
	g := newGate()
	client.AddHook(g)
	return client, g
}

// isScript reports whether cmd runs a script.
func isScript(cmd redis.Cmder) bool { return cmd.Name() == "evalsha" || cmd.Name() == "eval" }

// TestDeferredChargeInFlight holds back a charge that puts a key deep into debt, and holds its
// round trip in the air, sent by a flush, carried by a decision of the key, or by the decision of
// an All: a decision of the key made meanwhile, on a real Redis and its clock, is refused, as it
// is once the charge has landed.
func TestDeferredChargeInFlight(t *testing.T) {
	addr := sharedAddr(t)
	for _, how := range []string{"flush", "decision", "all"} {
		t.Run(how, func(t *testing.T) {
			ctx := context.Background()
			client := newClient(t, addr)
			g := newGate()
			client.AddHook(g)
			prefix := testPrefix(t)
			s := New(client, rate.Every(time.Second), 10, WithPrefix(prefix), WithTimeout(testTimeout), WithDeferredCharges(time.Hour))
			perKey := New(client, rate.Every(time.Second), 10, WithPrefix(prefix+"per-key:"), WithTimeout(testTimeout))
			all := retryafter.All(perKey, retryafter.ChargedAfter(s))
			if err := s.Charge(ctx, "k", 1000, time.Now()); err != nil {
				t.Fatal(err)
			}
			g.shut.Store(true)
			sent := make(chan error, 1)
			go func() {
				var err error
				switch how {
				case "flush":
					err = s.Flush(ctx)
				case "decision":
					_, err = s.Decide(ctx, "k", 0, time.Now())
				case "all":
					_, err = all.Decide(ctx, "k", 1, time.Now())
				}
				sent <- err
			}()
			<-g.held
			done := make(chan result, 1)
			go func() {
				d, err := s.Decide(ctx, "k", 1, time.Now())
				done <- result{d: d, err: err}
			}()
			var r result
			select {
			case r = <-done: // it did not wait for the charge in the air
				close(g.release)
			case <-time.After(200 * time.Millisecond): // waiting, as it should
				close(g.release)
				r = <-done
			}
			if err := <-sent; err != nil {
				t.Fatalf("the round trip that carried the charge: %v", err)
			}
			if r.err != nil || r.d.Allowed {
				t.Fatalf("a decision while the charge was in the air: %+v, %v; want refused", r.d, r.err)
			}
			if d := decide(t, s, "k", 1, time.Now()); d.Allowed {
				t.Fatalf("after the charge landed: %+v, want refused", d)
			}
		})
	}
}

// TestFlushPipelines holds back the charges of 2,500 keys and flushes them: they go to Redis in
// three pipelined round trips (1,000 keys each at most), not one round trip per key, and each
// is made.
func TestFlushPipelines(t *testing.T) {
	ctx := context.Background()
	client, g := gatedClient(t)
	prefix := testPrefix(t)
	s := New(client, rate.Every(time.Second), 10, WithPrefix(prefix), WithTimeout(testTimeout), WithDeferredCharges(time.Hour))
	const n = 2500
	keys := make([]string, n)
	for i := range keys {
		keys[i] = prefix + fmt.Sprint(i)
		if err := s.Charge(ctx, fmt.Sprint(i), 5, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if c, p := g.commands.Load(), g.pipelines.Load(); c != 0 || p != 3 {
		t.Errorf("a flush of %d keys: %d script calls alone and %d pipelines of them, want 0 and 3", n, c, p)
	}
	if got, err := client.Exists(ctx, keys...).Result(); err != nil || got != n {
		t.Errorf("%d of %d keys charged in Redis (%v)", got, n, err)
	}
}

// TestDeferredChargeAge checks, on a real Redis and its clock, that a held charge is made as of
// the instant it was charged, not of its sending: a charge of a whole burst on a key never seen,
// sent once the burst has refilled since, leaves the key full, as a charge sent at once would
// have. So by a flush that pipelines and by one that sends charge by charge.
func TestDeferredChargeAge(t *testing.T) {
	client := newClient(t, sharedAddr(t))
	ctx := context.Background()
	for name, c := range map[string]redis.Scripter{"pipelined": client, "one by one": &scriptCalls{Scripter: client}} {
		s := New(c, rate.Every(10*time.Millisecond), 20, WithPrefix(testPrefix(t)), WithTimeout(testTimeout),
			WithDeferredCharges(time.Hour))
		if err := s.Charge(ctx, "k", 20, time.Now()); err != nil {
			t.Fatal(err)
		}
		time.Sleep(300 * time.Millisecond) // at least the 200 ms the burst takes to refill
		if err := s.Flush(ctx); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if d, err := s.Decide(ctx, "k", 0, time.Now()); err != nil || d.Remaining != 20 {
			t.Fatalf("%s: a burst charged 300 ms before it was sent: %+v, %v, want the key full", name, d, err)
		}
	}
}

// TestDeferredChargesBound holds back the charges of as many keys as a Store holds at once,
// 65,536: none is sent; a charge of one more key is sent at once, while one more of a key held is
// held.
func TestDeferredChargesBound(t *testing.T) {
	ctx := context.Background()
	client, g := gatedClient(t)
	s := New(client, rate.Every(time.Millisecond), 10, WithPrefix(testPrefix(t)), WithTimeout(testTimeout), WithDeferredCharges(time.Hour))
	sent := func() int64 { return g.commands.Load() + g.pipelines.Load() }
	now := time.Now()
	for i := range 1 << 16 {
		if err := s.Charge(ctx, fmt.Sprint(i), 1, now); err != nil {
			t.Fatal(err)
		}
	}
	if n := sent(); n != 0 {
		t.Fatalf("%d round trips for 65,536 keys' charges held back", n)
	}
	if err := s.Charge(ctx, "0", 1, now); err != nil || sent() != 0 {
		t.Fatalf("a charge of a key held: %v, %d round trips, want held", err, sent())
	}
	if err := s.Charge(ctx, "one more", 1, now); err != nil || g.commands.Load() != 1 {
		t.Fatalf("a charge of one key more: %v, %d script calls, want sent at once", err, g.commands.Load())
	}
}

// TestDeferredFlushArms checks that a flush arms the next one when, and only when, it leaves
// charges held: those of a key whose charge was in flight when it took them. A flush that sent
// every charge leaves none held, so none is armed.
func TestDeferredFlushArms(t *testing.T) {
	ctx := context.Background()
	client := newClient(t, sharedAddr(t))
	g := newGate()
	client.AddHook(g)
	s := New(client, rate.Every(time.Second), 10, WithPrefix(testPrefix(t)), WithTimeout(testTimeout), WithDeferredCharges(time.Hour))
	armed := func() bool {
		s.deferred.mu.Lock()
		defer s.deferred.mu.Unlock()
		return s.deferred.armed
	}
	if err := s.Charge(ctx, "k", 1, time.Now()); err != nil || !armed() {
		t.Fatalf("a charge held: %v, armed %v, want armed", err, armed())
	}
	s.flushDue()
	if armed() {
		t.Fatal("armed after a flush that sent every charge held")
	}
	if err := s.Charge(ctx, "k", 1, time.Now()); err != nil {
		t.Fatal(err)
	}
	g.shut.Store(true)
	done := make(chan error, 1)
	go func() {
		_, err := s.Decide(ctx, "k", 0, time.Now()) // carries the charge, held in the air
		done <- err
	}()
	<-g.held
	if err := s.Charge(ctx, "k", 1, time.Now()); err != nil {
		t.Fatal(err)
	}
	s.flushDue() // the charge of k is in flight: this one stays
	if !armed() {
		t.Error("not armed after a flush that left a charge held")
	}
	close(g.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestDeferredChargesRefusalMemory checks that a Store that holds charges back remembers
// refusals as one that does not: the refusal of a key with nothing held is answered from memory
// next; and so is the refusal Redis gives once a charge of the key held has been sent, carried
// by a decision, by a flush or by an All's decision.
func TestDeferredChargesRefusalMemory(t *testing.T) {
	ctx := context.Background()
	client := newClient(t, sharedAddr(t))
	prefix := testPrefix(t)
	s := New(client, rate.Every(time.Second), 2, WithPrefix(prefix), WithTimeout(testTimeout), withInjectedClock(), WithDeferredCharges(time.Hour))
	if d := decide(t, s, "k", 2, t0); !d.Allowed {
		t.Fatalf("the burst: %+v", d)
	}
	all := retryafter.All(New(client, rate.Every(time.Second), 100, WithPrefix(prefix+"per-key:"), WithTimeout(testTimeout), withInjectedClock()),
		retryafter.ChargedAfter(s))
	for _, step := range []string{"nothing held", "a charge carried", "a charge flushed", "a charge carried by an All"} {
		switch step {
		case "a charge carried by an All":
			if err := s.Charge(ctx, "k", 1, t0); err != nil {
				t.Fatal(err)
			}
			if _, err := all.Decide(ctx, "k", 1, t0); err != nil {
				t.Fatal(err)
			}
		case "a charge carried":
			if err := s.Charge(ctx, "k", 1, t0); err != nil {
				t.Fatal(err)
			}
		case "a charge flushed":
			if err := s.Charge(ctx, "k", 1, t0); err != nil {
				t.Fatal(err)
			}
			if err := s.Flush(ctx); err != nil {
				t.Fatal(err)
			}
		}
		local := s.LocalAnswers()
		if d := decide(t, s, "k", 1, t0); d.Allowed || s.LocalAnswers() != local {
			t.Fatalf("%s: %+v, %d answers from memory, want refused by Redis", step, d, s.LocalAnswers()-local)
		}
		if d := decide(t, s, "k", 1, t0); d.Allowed || s.LocalAnswers() != local+1 {
			t.Fatalf("%s: the next refusal %+v, %d answers from memory, want 1", step, d, s.LocalAnswers()-local)
		}
	}
}

// TestFlushLoadsScript flushes held charges to a redis-server of the test's own that has never
// run the charge script, as after a restart or SCRIPT FLUSH: the pipeline's EVALSHAs fail with
// NOSCRIPT, and the flush sends them again by EVAL, which loads the script. Every charge is
// made: another Store, which holds nothing back, sees each key's debt.
func TestFlushLoadsScript(t *testing.T) {
	ctx := context.Background()
	client := newClient(t, startServer(t).Addr())
	s := New(client, rate.Every(time.Second), 5, WithTimeout(testTimeout), withCallerClock(), WithDeferredCharges(time.Hour))
	other := New(client, rate.Every(time.Second), 5, WithTimeout(testTimeout), withCallerClock(), WithRefusalMemory(0))
	for _, k := range []string{"a", "b", "c"} {
		if err := s.Charge(ctx, k, 8, t0); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Flush(ctx); err != nil {
		t.Fatalf("a flush to a server without the script: %v", err)
	}
	for _, k := range []string{"a", "b", "c"} {
		// 8 tokens of a full 5: 3 owed at t0, so a peek 2 s later owes 1 s.
		if d := decide(t, other, k, 0, t0.Add(2*time.Second)); d.Allowed || d.RetryAfter != time.Second {
			t.Fatalf("%s after the flush: %+v, want refused for 1s", k, d)
		}
	}
}

// TestDeferredChargesSaturate charges a key the largest int twice, held back and sent at once:
// both leave it in debt, refused. The held total once wrapped to a negative number, which the
// next decision skipped and a flush would have sent as tokens given back.
func TestDeferredChargesSaturate(t *testing.T) {
	client := newClient(t, sharedAddr(t))
	ctx := context.Background()
	prefix := testPrefix(t)
	held := New(client, rate.Every(time.Second), 5, WithPrefix(prefix+"held:"), WithTimeout(testTimeout), withCallerClock(), WithDeferredCharges(time.Hour))
	sent := New(client, rate.Every(time.Second), 5, WithPrefix(prefix+"sent:"), WithTimeout(testTimeout), withCallerClock())
	for _, s := range []*Store{held, sent} {
		for range 2 {
			if err := s.Charge(ctx, "k", math.MaxInt, t0); err != nil {
				t.Fatal(err)
			}
		}
		if d, err := s.Decide(ctx, "k", 1, t0); err != nil || d.Allowed {
			t.Fatalf("after two charges of the largest int (held back: %v): %+v, %v; want refused", s == held, d, err)
		}
	}
}
