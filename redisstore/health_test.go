package redisstore

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"
	"unsafe"

	"github.com/redis/go-redis/v9"
	"golang.org/x/time/rate"

	"github.com/retryafter/retryafter"
	"github.com/retryafter/retryafter/edge"
)

// fakeRedis is a redis.Scripter whose every script call does what answer says: the tests of
// the timeout and of failing fast need a Redis that fails on cue and a clock they control,
// which testing/synctest gives them only without a network.
type fakeRedis struct {
	mu     sync.Mutex
	answer func(ctx context.Context) *redis.Cmd
	calls  atomic.Int64
}

func (f *fakeRedis) set(answer func(ctx context.Context) *redis.Cmd) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.answer = answer
}

// run answers a script call; an answer of four values (one layer's, as admits gives) is given
// once per key, as the script of several layers answers.
func (f *fakeRedis) run(ctx context.Context, keys []string) *redis.Cmd {
	f.calls.Add(1)
	f.mu.Lock()
	answer := f.answer
	f.mu.Unlock()
	cmd := answer(ctx)
	if vals, ok := cmd.Val().([]any); ok && len(vals) == 4 && len(keys) > 1 && cmd.Err() == nil {
		cmd = redis.NewCmdResult(slices.Repeat(vals, len(keys)), nil)
	}
	return cmd
}

func (f *fakeRedis) Eval(ctx context.Context, _ string, keys []string, _ ...any) *redis.Cmd {
	return f.run(ctx, keys)
}
func (f *fakeRedis) EvalSha(ctx context.Context, _ string, keys []string, _ ...any) *redis.Cmd {
	return f.run(ctx, keys)
}
func (f *fakeRedis) EvalRO(ctx context.Context, _ string, keys []string, _ ...any) *redis.Cmd {
	return f.run(ctx, keys)
}
func (f *fakeRedis) EvalShaRO(ctx context.Context, _ string, keys []string, _ ...any) *redis.Cmd {
	return f.run(ctx, keys)
}
func (f *fakeRedis) ScriptExists(context.Context, ...string) *redis.BoolSliceCmd {
	return redis.NewBoolSliceResult([]bool{true}, nil)
}
func (f *fakeRedis) ScriptLoad(context.Context, string) *redis.StringCmd {
	return redis.NewStringResult("", nil)
}

// admits answers as the script does for an admitted request with 9 tokens left.
func admits(context.Context) *redis.Cmd {
	return redis.NewCmdResult([]any{int64(1), int64(0), int64(9), int64(1000)}, nil)
}

// refusesConnections answers as a client does when nothing listens on the server's port.
func refusesConnections(context.Context) *redis.Cmd {
	return redis.NewCmdResult(nil, syscall.ECONNREFUSED)
}

// frozen answers as a client honouring deadlines does when the server has stopped: nothing
// until the context is done.
func frozen(ctx context.Context) *redis.Cmd {
	<-ctx.Done()
	return redis.NewCmdResult(nil, ctx.Err())
}

// TestTimeout checks, on testing/synctest's clock, that a decision against a server that never
// answers returns an error wrapping ErrUnavailable at the store's timeout, exactly, whatever the
// caller's context: none, one cancelled while the call waits, one cancelled before it. A
// caller's deadline sooner than the timeout ends the call at that deadline instead, and is the
// caller's own end, not Redis's failure.
func TestTimeout(t *testing.T) {
	for _, timeout := range []time.Duration{time.Millisecond, 150 * time.Millisecond, 10 * time.Second} {
		synctest.Test(t, func(t *testing.T) {
			fake := &fakeRedis{answer: frozen}
			s := New(fake, 1, 10, WithTimeout(timeout), WithProbeInterval(time.Nanosecond))
			within := func(ctx context.Context, from, to time.Duration) error {
				t.Helper()
				start := time.Now()
				_, err := s.Decide(ctx, "k", 1, start)
				if took := time.Since(start); err == nil || took < from || took > to {
					t.Fatalf("timeout %v: err=%v after %v, want an error within [%v, %v]", timeout, err, took, from, to)
				}
				time.Sleep(time.Nanosecond) // the next call is a probe
				return err
			}
			if err := within(context.Background(), timeout, timeout); !errors.Is(err, ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("error %v, want one wrapping ErrUnavailable and the deadline", err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(timeout/2, cancel)
			within(ctx, timeout, timeout)
			within(ctx, timeout, timeout) // cancelled before the call

			// A caller's deadline of a third of the timeout.
			ctx, cancel = context.WithTimeout(context.Background(), timeout/3)
			defer cancel()
			if err := within(ctx, timeout/3, timeout/3); errors.Is(err, ErrUnavailable) {
				t.Fatalf("the caller's deadline reported as Redis's failure: %v", err)
			}
		})
	}
}

// TestCancelDoesNotInterrupt checks that a caller that gives up (a client that hangs up) does
// not cut the round trip short: the request is decided and counted like any other.
func TestCancelDoesNotInterrupt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := &fakeRedis{answer: func(ctx context.Context) *redis.Cmd {
			time.Sleep(20 * time.Millisecond)
			return admits(ctx)
		}}
		s := New(fake, 1, 10)
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(10*time.Millisecond, cancel)
		if d, err := s.Decide(ctx, "k", 1, time.Now()); err != nil || !d.Allowed {
			t.Fatalf("cancelled during the round trip: %+v, %v, want admitted", d, err)
		}
		if d, err := s.Decide(ctx, "k", 1, time.Now()); err != nil || !d.Allowed || fake.calls.Load() != 2 {
			t.Fatalf("cancelled before the round trip: %+v, %v after %d calls, want admitted by Redis", d, err, fake.calls.Load())
		}
	})
}

// TestFailFast checks, on testing/synctest's clock, what a store does once Redis has failed
// downAfter times in a row: every decision fails at once with the error that took it down,
// without asking Redis, except one per probe interval; the first probe after Redis is back
// brings the store back, so that recovery takes at most one interval. Failures of the caller's
// own making (its deadline) do not count.
func TestFailFast(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const interval = time.Second
		fake := &fakeRedis{answer: refusesConnections}
		s := New(fake, 1, 10, WithProbeInterval(interval))
		decideErr := func() error {
			t.Helper()
			_, err := s.Decide(context.Background(), "k", 1, time.Now())
			return err
		}
		var last error
		for i := range downAfter {
			last = decideErr()
			if !errors.Is(last, ErrUnavailable) || !errors.Is(last, syscall.ECONNREFUSED) || fake.calls.Load() != int64(i+1) {
				t.Fatalf("failure %d: %v after %d calls, want an error wrapping ErrUnavailable and the cause, Redis asked", i, last, fake.calls.Load())
			}
		}
		if want := "redisstore: Redis is unavailable: " + syscall.ECONNREFUSED.Error(); last.Error() != want {
			t.Fatalf("the error says %q, want %q", last.Error(), want)
		}
		calls := fake.calls.Load()
		// While down: at once, with the same error, no round trip, until the interval is over.
		for i := range 1000 {
			if err := decideErr(); err != last {
				t.Fatalf("decision %d while down: %v, want %v", i, err, last)
			}
			time.Sleep(interval / 1000)
			if i == 998 && fake.calls.Load() != calls {
				t.Fatalf("%d round trips within the interval, want none", fake.calls.Load()-calls)
			}
		}
		// The interval is over: one probe, concurrent callers still fail at once.
		var wg sync.WaitGroup
		for range 10 {
			wg.Go(func() { decideErr() })
		}
		wg.Wait()
		if n := fake.calls.Load() - calls; n != 1 {
			t.Fatalf("%d round trips after one interval, want 1 (one probe)", n)
		}

		// Redis comes back a third of an interval after the last probe: the decisions fail until
		// the next probe, an interval after the last one, which succeeds.
		time.Sleep(interval / 3)
		fake.set(admits)
		back := time.Now()
		for decideErr() != nil {
			time.Sleep(time.Millisecond)
		}
		if took := time.Since(back); took > interval {
			t.Fatalf("recovered %v after Redis was back, more than one probe interval", took)
		}
		calls = fake.calls.Load()
		for range 10 {
			if err := decideErr(); err != nil {
				t.Fatalf("after recovery: %v", err)
			}
		}
		if n := fake.calls.Load() - calls; n != 10 {
			t.Fatalf("%d round trips for 10 decisions after recovery", n)
		}

		// Callers whose own deadline has passed do not take the store down, however many.
		fake.set(frozen)
		for range 2 * downAfter {
			ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
			if _, err := s.Decide(ctx, "k", 1, time.Now()); err == nil || errors.Is(err, ErrUnavailable) {
				t.Fatalf("caller's deadline: %v, want an error not wrapping ErrUnavailable", err)
			}
			cancel()
		}
		fake.set(admits)
		if err := decideErr(); err != nil {
			t.Fatalf("after a caller's deadline: %v, want Redis asked", err)
		}
	})
}

// TestDefaults checks, on testing/synctest's clock, the timeout and the probe interval of a
// Store built without options: against a server that never answers, a decision fails 100 ms
// later; after downAfter such failures in a row the decisions fail at once for 500 ms from the last, when one asks Redis again.
func TestDefaults(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := &fakeRedis{answer: frozen}
		s := New(fake, 1, 10)
		start := time.Now()
		for range downAfter {
			start = time.Now()
			if _, err := s.Decide(context.Background(), "k", 1, start); !errors.Is(err, ErrUnavailable) || time.Since(start) != 100*time.Millisecond {
				t.Fatalf("a frozen server: %v after %v, want an error after 100ms", err, time.Since(start))
			}
		}
		fake.set(refusesConnections)
		time.Sleep(500*time.Millisecond - time.Nanosecond) // from the failure
		if _, err := s.Decide(context.Background(), "k", 1, start); !errors.Is(err, ErrUnavailable) || fake.calls.Load() != downAfter {
			t.Fatalf("a nanosecond before the probe interval: %v after %d round trips, want an error at once", err, fake.calls.Load())
		}
		time.Sleep(time.Nanosecond)
		if _, err := s.Decide(context.Background(), "k", 1, start); !errors.Is(err, ErrUnavailable) || fake.calls.Load() != downAfter+1 {
			t.Fatalf("at the probe interval: %v after %d round trips, want Redis asked again", err, fake.calls.Load())
		}
	})
}

// TestMalformedAnswer checks that a script's answer of the wrong length (a proxy, a script of
// another version) is an error wrapping ErrUnavailable that says what was wanted, not a panic
// or a Decision read from what is not there, for a Store and for an All of two.
func TestMalformedAnswer(t *testing.T) {
	fake := &fakeRedis{answer: func(context.Context) *redis.Cmd {
		return redis.NewCmdResult([]any{int64(1), int64(0), int64(9)}, nil)
	}}
	a := New(fake, 1, 10, WithPrefix("{x}a:"))
	b := New(fake, 1, 10, WithPrefix("{x}b:"))
	for name, c := range map[string]struct {
		l    retryafter.Limiter
		want string
	}{
		"store": {a, "script answered 3 values, want 4"},
		"All":   {retryafter.All(a, b), "script answered 3 values, want 8"},
	} {
		a.health.ok()
		d, err := c.l.Decide(context.Background(), "k", 1, time.Now())
		if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), c.want) || d != (retryafter.Decision{}) {
			t.Fatalf("%s: %+v, %v, want an error wrapping ErrUnavailable that says %q", name, d, err, c.want)
		}
	}
}

// TestDecideAllocations checks the store's own allocations around the round trip, with a client
// that allocates nothing: at most 2 (one for the call, one for the prefixed key) and the 5 of
// context.WithDeadline's timer context, plus the slice that go-redis's Int64Slice returns, which
// a bare EVALSHA pays too (BenchmarkBareEvalSha). On a path that waits for a round trip they are
// no goal; the bound keeps them from growing unseen.
func TestDecideAllocations(t *testing.T) {
	cmd := admits(context.Background())
	s := New(&fakeRedis{answer: func(context.Context) *redis.Cmd { return cmd }}, 1, 10)
	ctx := context.Background()
	now := time.Now()
	if n := testing.AllocsPerRun(1000, func() { s.Decide(ctx, "k", 1, now) }); n > 2+5+1 {
		t.Fatalf("%v allocations per decision, want at most 2, the deadline's 5 and go-redis's 1", n)
	}
}

// TestOutageLatency stops a real redis-server three ways (frozen by SIGSTOP, paused by CLIENT
// PAUSE, killed and restarted) under a stream of decisions, one every millisecond, and logs
// how long they took: while Redis is down, only the first downAfter decisions (which show it
// down) and one probe per interval wait for the timeout, within a margin; the others fail at once; and once Redis is back, the
// store decides again within a probe interval, a margin, and, after a restart, the second that
// go-redis's pool waits between dials once its dials have failed. Run with -v for the figures.
func TestOutageLatency(t *testing.T) {
	if testing.Short() {
		// It reaches no code that TestFailFast, TestTimeout and TestOutage do not, so the
		// mutation run (TESTING.md) skips its seconds of outages.
		t.Skip("-short: three real outages of 1.5 s each")
	}
	const (
		timeout  = 150 * time.Millisecond
		interval = 500 * time.Millisecond
		outage   = 1500 * time.Millisecond
		margin   = time.Second // scheduling on a loaded machine
	)
	srv := startServer(t)
	store := New(newClient(t, srv.Addr()), 1e6, 1e6, WithPrefix(testPrefix(t)), WithTimeout(timeout), WithProbeInterval(interval))
	admin := newClient(t, srv.Addr())

	type sample struct {
		at, took time.Duration // since the outage began
		err      error
	}
	// run sends decisions until Redis has been back for a while, and returns them.
	run := func(t *testing.T, start func(), back func() time.Time) (samples []sample, backAt time.Duration) {
		t.Helper()
		begin := time.Now()
		start()
		var wg sync.WaitGroup
		var stop atomic.Bool
		wg.Go(func() {
			for !stop.Load() {
				at := time.Now()
				_, err := store.Decide(context.Background(), "k", 1, at)
				samples = append(samples, sample{at.Sub(begin), time.Since(at), err})
				time.Sleep(time.Millisecond)
			}
		})
		backAt = back().Sub(begin)
		deadline := time.Now().Add(interval + 2*margin)
		for time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
			if ok := time.Since(begin) - backAt; ok > interval+margin/2 {
				break
			}
		}
		stop.Store(true)
		wg.Wait()
		return samples, backAt
	}
	check := func(t *testing.T, samples []sample, backAt, extra time.Duration) {
		t.Helper()
		var failed, slow, seenLate int
		var firstErr, lastErr, recovered time.Duration = -1, -1, -1
		var worstFast, worst, worstAt time.Duration
		for _, s := range samples {
			if s.took > worst {
				worst, worstAt = s.took, s.at
			}
			if s.err == nil {
				if s.at >= backAt && recovered < 0 && lastErr >= 0 {
					recovered = s.at + s.took - backAt
				}
				continue
			}
			if !errors.Is(s.err, ErrUnavailable) {
				t.Errorf("error %v, want one wrapping ErrUnavailable", s.err)
			}
			failed++
			if firstErr < 0 {
				firstErr = s.at
			}
			lastErr = s.at + s.took
			if s.took > timeout+starved(timeout) {
				seenLate++ // counts for nothing (see Store.failed)
			}
			if s.took >= timeout/2 {
				slow++
			} else {
				worstFast = max(worstFast, s.took)
			}
		}
		down := lastErr - firstErr
		t.Logf("%d decisions, %d failed from %v to %v; %d waited (the first few and the probes), the others failed within %v; slowest %v at %v; back at %v, decided again %v later",
			len(samples), failed, firstErr.Round(time.Millisecond), lastErr.Round(time.Millisecond), slow, worstFast, worst.Round(time.Millisecond), worstAt.Round(time.Millisecond), backAt.Round(time.Millisecond), recovered.Round(time.Millisecond))
		if failed == 0 {
			t.Fatal("no decision failed: the outage was not seen")
		}
		if worst > timeout+margin {
			t.Errorf("a decision took %v, more than the timeout %v and a margin of %v", worst, timeout, margin)
		}
		if probes := downAfter + 1 + int(down/interval) + seenLate; slow > probes {
			t.Errorf("%d decisions waited in %v of outage, want at most %d: the first %d, one probe per %v and the %d timeouts seen late", slow, down, probes, downAfter, interval, seenLate)
		}
		if recovered < 0 || recovered > interval+extra+margin {
			t.Errorf("decided again %v after Redis was back, want at most the probe interval %v + %v + a margin of %v", recovered, interval, extra, margin)
		}
	}

	t.Run("frozen", func(t *testing.T) {
		samples, backAt := run(t, func() { srv.Signal(syscall.SIGSTOP) }, func() time.Time {
			time.Sleep(outage)
			srv.Signal(syscall.SIGCONT)
			return time.Now()
		})
		check(t, samples, backAt, 0)
	})
	t.Run("paused", func(t *testing.T) {
		var until time.Time
		samples, backAt := run(t, func() {
			until = time.Now().Add(outage)
			if err := admin.Do(context.Background(), "CLIENT", "PAUSE", outage.Milliseconds(), "ALL").Err(); err != nil {
				t.Fatal(err)
			}
		}, func() time.Time {
			time.Sleep(time.Until(until))
			return until
		})
		check(t, samples, backAt, 0)
	})
	t.Run("killed", func(t *testing.T) {
		samples, backAt := run(t, func() { srv.Stop(syscall.SIGKILL) }, func() time.Time {
			time.Sleep(outage)
			srv.Restart()
			return time.Now()
		})
		check(t, samples, backAt, time.Second)
	})
}

// TestAllTimeout checks, on testing/synctest's clock, that an All of Stores decided in one
// script waits for a server that never answers the shortest timeout of its Stores, exactly, and
// that a caller's deadline sooner than that ends it
// without taking Redis for down.
func TestAllTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := &fakeRedis{answer: frozen}
		a := New(fake, 1, 10, WithPrefix("{x}a:"), WithTimeout(time.Second), WithProbeInterval(time.Nanosecond))
		b := New(fake, 1, 10, WithPrefix("{x}b:"), WithTimeout(150*time.Millisecond), WithProbeInterval(time.Nanosecond))
		all := retryafter.All(a, b)
		var start time.Time
		for range downAfter {
			start = time.Now()
			_, err := all.Decide(context.Background(), "k", 1, start)
			if took := time.Since(start); !errors.Is(err, ErrUnavailable) || took != 150*time.Millisecond {
				t.Fatalf("err=%v after %v, want an error wrapping ErrUnavailable at b's timeout of 150ms", err, took)
			}
		}
		if a.Down() == nil || b.Down() == nil {
			t.Fatalf("Down: %v and %v, want both Stores to know", a.Down(), b.Down())
		}
		time.Sleep(time.Nanosecond) // the next call is a probe
		a.health.ok()
		b.health.ok()
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		start = time.Now()
		_, err := all.Decide(ctx, "k", 1, start)
		if took := time.Since(start); err == nil || errors.Is(err, ErrUnavailable) || took != 50*time.Millisecond {
			t.Fatalf("a caller's deadline of 50ms: err=%v after %v, want the caller's own end at 50ms", err, took)
		}
		if a.Down() != nil || b.Down() != nil {
			t.Fatalf("Down after a caller's deadline: %v and %v, want up", a.Down(), b.Down())
		}
	})
}

// TestAllFailFast checks, on testing/synctest's clock, that once an All of Stores decided in one
// script has failed downAfter times in a row, it fails at once without asking Redis, as do the
// single decisions of each of its Stores, except one probe per interval; and that the probe that
// finds Redis back brings every Store back.
func TestAllFailFast(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const interval = time.Second
		fake := &fakeRedis{answer: refusesConnections}
		a := New(fake, 1, 10, WithPrefix("{x}a:"), WithProbeInterval(interval))
		b := New(fake, 1, 10, WithPrefix("{x}b:"), WithProbeInterval(interval))
		all := retryafter.All(a, retryafter.Shared(b, "all"))
		for i := range downAfter {
			first, err := all.Decide(context.Background(), "k", 1, time.Now())
			if !errors.Is(err, ErrUnavailable) || !errors.Is(err, syscall.ECONNREFUSED) || fake.calls.Load() != int64(i+1) || first != (retryafter.Decision{}) {
				t.Fatalf("failure %d: %+v, %v after %d calls, want an error wrapping ErrUnavailable and the cause", i, first, err, fake.calls.Load())
			}
		}
		for i := range 100 {
			if _, err := all.Decide(context.Background(), "k", 1, time.Now()); !errors.Is(err, ErrUnavailable) {
				t.Fatalf("decision %d while down: %v", i, err)
			}
			if _, err := b.Decide(context.Background(), "k", 1, time.Now()); !errors.Is(err, ErrUnavailable) {
				t.Fatalf("b's own decision %d while down: %v", i, err)
			}
			time.Sleep(interval / 200)
		}
		if n := fake.calls.Load(); n != downAfter {
			t.Fatalf("%d round trips within the interval, want %d", n, downAfter)
		}
		fake.set(admits)
		time.Sleep(interval)
		if d, err := all.Decide(context.Background(), "k", 1, time.Now()); err != nil || !d.Allowed {
			t.Fatalf("the probe after Redis came back: %+v, %v", d, err)
		}
		if a.Down() != nil || b.Down() != nil {
			t.Fatalf("Down after the probe: %v and %v, want both up", a.Down(), b.Down())
		}
		calls := fake.calls.Load()
		for range 10 {
			if _, err := b.Decide(context.Background(), "k", 1, time.Now()); err != nil {
				t.Fatalf("b after the All's probe: %v", err)
			}
		}
		if n := fake.calls.Load() - calls; n != 10 {
			t.Fatalf("%d round trips for 10 decisions of b, want 10", n)
		}
	})
}

// TestAllAllocations checks an All of two Stores' own allocations around its one round trip,
// with a client that allocates nothing: one for the call, one per prefixed key, the 5 of the
// deadline's context, go-redis's slice of the answer, and the list of the Decision's layers; and that the call of an All of four layers, the most a small one holds,
// is not one sized for sixteen.
func TestAllAllocations(t *testing.T) {
	cmd := redis.NewCmdResult([]any{int64(1), int64(0), int64(9), int64(1000), int64(1), int64(0), int64(9), int64(1000)}, nil)
	fake := &fakeRedis{answer: func(context.Context) *redis.Cmd { return cmd }}
	all := retryafter.All(New(fake, 1, 10, WithPrefix("{x}a:")), retryafter.Shared(New(fake, 1, 10, WithPrefix("{x}b:")), "all"))
	ctx := context.Background()
	now := time.Now()
	if n := testing.AllocsPerRun(1000, func() { all.Decide(ctx, "k", 1, now) }); n > 3+5+1+1 {
		t.Fatalf("%v allocations per decision, want at most 3, the deadline's 5, go-redis's 1 and the Decision's list of its layers", n)
	}

	answer4 := redis.NewCmdResult(slices.Repeat([]any{int64(1), int64(0), int64(9), int64(1000)}, 4), nil)
	fake4 := &fakeRedis{answer: func(context.Context) *redis.Cmd { return answer4 }}
	var layers []retryafter.Limiter
	for _, p := range []string{"{x}a:", "{x}b:", "{x}c:", "{x}d:"} {
		layers = append(layers, New(fake4, 1, 10, WithPrefix(p)))
	}
	four := retryafter.All(layers...)
	if d, err := four.Decide(ctx, "k", 1, now); err != nil || !d.Allowed {
		t.Fatalf("four layers: %+v, %v", d, err)
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	const n = 1000
	for range n {
		four.Decide(ctx, "k", 1, now)
	}
	runtime.ReadMemStats(&after)
	// Less the list of the Decision's four layers, which Binding allocates whatever the call.
	ds := make([]retryafter.Decision, 4)
	var b1, b2 runtime.MemStats
	runtime.ReadMemStats(&b1)
	for range n {
		edge.Binding(ds...)
	}
	runtime.ReadMemStats(&b2)
	list := (b2.TotalAlloc - b1.TotalAlloc) / n
	if bytes, large := (after.TotalAlloc-before.TotalAlloc)/n-list, uint64(unsafe.Sizeof(largeCall{})); bytes >= large {
		t.Fatalf("%d bytes allocated per decision of four layers, not below the %d of a call sized for %d", bytes, large, maxLayers)
	} else {
		t.Logf("%d bytes allocated per decision of four layers; a call sized for %d takes %d", bytes, maxLayers, large)
	}
}

// TestClusterHealthPerMaster takes one master of a Redis Cluster away from a Store, as far as
// the Store can tell (a hook of the cluster client refuses the scripts on the one key the test
// uses on that master, as a client does when the master does not answer), and checks that the
// Store knows that master down, and only it: its key fails at once after downAfter failures,
// the keys of the other masters are decided meanwhile, and Down reports the outage.
func TestClusterHealthPerMaster(t *testing.T) {
	c := newClusterClient(t, clusterAddrs(t))
	prefix := testPrefix(t)
	keys := map[string]string{} // master's address → a key of its slots
	for i := 0; len(keys) < 3 && i < 1000; i++ {
		k := fmt.Sprint("k", i)
		if m := mastersOf(t, c, []string{prefix + k})[0]; keys[m] == "" {
			keys[m] = k
		}
	}
	if len(keys) != 3 {
		t.Fatalf("keys on %d masters, want 3", len(keys))
	}
	var victim string
	var others []string
	for _, k := range keys {
		if victim == "" {
			victim = k
		} else {
			others = append(others, k)
		}
	}
	var refused atomic.Int64
	c.AddHook(refuseKey{prefix + victim, &refused})
	ctx := context.Background()
	// Down ranges over the masters in an order that each Store draws at random: 20 Stores, so
	// that it starts at one that is up.
	for range 20 {
		s := New(c, rate.Every(time.Minute), 1000, WithPrefix(prefix), WithTimeout(testTimeout), WithProbeInterval(time.Hour))
		if err := s.Down(); err != nil {
			t.Fatalf("Down before any failure: %v", err)
		}
		for _, k := range others {
			decide(t, s, k, 1, time.Time{})
		}
		for range downAfter {
			first, err := s.Decide(ctx, victim, 1, time.Time{})
			if !errors.Is(err, ErrUnavailable) || refused.Load() == 0 {
				t.Fatalf("the key of the master taken away: %+v, %v", first, err)
			}
		}
		n := refused.Load()
		for range 3 {
			if _, err := s.Decide(ctx, victim, 1, time.Time{}); !errors.Is(err, ErrUnavailable) || refused.Load() != n {
				t.Fatalf("the key of the master known down: %v after %d round trips, want an error at once", err, refused.Load()-n)
			}
			for _, k := range others {
				if d := decide(t, s, k, 1, time.Time{}); !d.Allowed {
					t.Fatalf("a key of another master: %+v, want admitted", d)
				}
			}
		}
		if err := s.Down(); !errors.Is(err, ErrUnavailable) {
			t.Fatalf("Down while a master is known down: %v", err)
		}
	}
}

// refuseKey is a hook that refuses, as a client does when nothing listens on the server's
// port, the scripts whose first key is key, and counts them.
type refuseKey struct {
	key   string
	count *atomic.Int64
}

func (h refuseKey) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h refuseKey) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if args := cmd.Args(); len(args) > 3 && fmt.Sprint(args[3]) == h.key {
			h.count.Add(1)
			cmd.SetErr(syscall.ECONNREFUSED)
			return syscall.ECONNREFUSED
		}
		return next(ctx, cmd)
	}
}

func (h refuseKey) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestFailFastOwnDeadline checks, on testing/synctest's clock, that a failure of Redis within a
// caller's deadline sooner than the store's timeout counts as one without: a refused connection
// fails with an error wrapping ErrUnavailable, and downAfter of them take the store down. Only
// the caller's deadline or cancellation ending a round trip is the caller's own failure.
func TestFailFastOwnDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := &fakeRedis{answer: refusesConnections}
		s := New(fake, 1, 10, WithTimeout(time.Second))
		ctx, cancel := context.WithTimeout(context.Background(), time.Second/2)
		defer cancel()
		for i := range downAfter {
			if _, err := s.Decide(ctx, "k", 1, time.Now()); !errors.Is(err, ErrUnavailable) || !errors.Is(err, syscall.ECONNREFUSED) {
				t.Fatalf("failure %d: %v, want an error wrapping ErrUnavailable and the cause", i, err)
			}
		}
		if err := s.Down(); !errors.Is(err, ErrUnavailable) {
			t.Fatalf("Down() = %v after %d refused connections, want down", err, downAfter)
		}
	})
}
