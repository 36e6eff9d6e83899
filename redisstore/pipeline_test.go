package redisstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/time/rate"
)

// tripCount is a hook that counts a client's round trips, a command or a pipeline each, and the
// script calls they carry.
type tripCount struct {
	trips, scripts atomic.Int64
	shared         atomic.Int64  // round trips of several script calls
	sent           chan struct{} // if not nil, told of every script call as it goes out
}

func (h *tripCount) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *tripCount) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.count(cmd)
		return next(ctx, cmd)
	}
}

func (h *tripCount) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.trips.Add(1)
		if len(cmds) > 1 && isScript(cmds[0]) {
			h.shared.Add(1)
		}
		for _, c := range cmds {
			if isScript(c) {
				h.scripts.Add(1)
			}
		}
		return next(ctx, cmds)
	}
}

func (h *tripCount) count(cmd redis.Cmder) {
	h.trips.Add(1)
	if isScript(cmd) {
		h.scripts.Add(1)
		if h.sent != nil {
			h.sent <- struct{}{}
		}
	}
}

// A batchTarget is a Redis of the tests of shared round trips, and a client of it with hook.
type batchTarget struct {
	name      string
	newClient func(t *testing.T, hook redis.Hook) redis.Scripter
}

// newStore returns a Store of a limit of one token an hour, bursts of 10, that asks Redis every
// decision (no refusal memory), on a client of the target with hook.
func (b batchTarget) newStore(t *testing.T, hook redis.Hook) *Store {
	return New(b.newClient(t, hook), rate.Every(time.Hour), 10, WithPrefix(testPrefix(t)),
		WithTimeout(10*time.Second), WithRefusalMemory(0))
}

func batchTargets() []batchTarget {
	return []batchTarget{
		{"server", func(t *testing.T, hook redis.Hook) redis.Scripter {
			c := newClient(t, sharedAddr(t))
			c.AddHook(hook)
			return c
		}},
		{"cluster", func(t *testing.T, hook redis.Hook) redis.Scripter {
			c := newClusterClient(t, clusterAddrs(t))
			c.AddHook(hook)
			return c
		}},
	}
}

// decideAgainstModel sends, from 64 goroutines at once, 16 decisions each of a random cost from 0
// to 3 on one of the goroutine's own 4 keys (of a limit of one token an hour, bursts of 10), and
// checks each answer against the bucket a sequential run would leave: admitted if the key holds
// the cost, Remaining what it holds after. It returns how many decisions it sent.
func decideAgainstModel(t *testing.T, s *Store) int {
	t.Helper()
	const goroutines, decisions, keys, burst = 64, 16, 4, 10
	var wg sync.WaitGroup
	start := make(chan struct{})
	for g := range goroutines {
		wg.Go(func() {
			rnd := rand.New(rand.NewPCG(uint64(g), 46))
			tokens := [keys]int{burst, burst, burst, burst}
			<-start
			for range decisions {
				k, cost := rnd.IntN(keys), rnd.IntN(4)
				d, err := s.Decide(context.Background(), fmt.Sprintf("%d-%d", g, k), cost, time.Time{})
				if err != nil {
					t.Error(err)
					return
				}
				allowed := cost <= tokens[k]
				if allowed {
					tokens[k] -= cost
				}
				if d.Allowed != allowed || d.Remaining != tokens[k] {
					t.Errorf("key %d-%d, cost %d: admitted %v with %d remaining, want %v with %d", g, k, cost, d.Allowed, d.Remaining, allowed, tokens[k])
					return
				}
			}
		})
	}
	close(start)
	wg.Wait()
	return goroutines * decisions
}

// TestSharedAnswers checks that each of many concurrent callers over many keys gets the answer to
// its own call, as a sequential run would give it, on a server and on a cluster.
func TestSharedAnswers(t *testing.T) {
	for _, target := range batchTargets() {
		t.Run(target.name, func(t *testing.T) {
			var hook tripCount
			n := decideAgainstModel(t, target.newStore(t, &hook))
			t.Logf("%d decisions in %d round trips", n, hook.trips.Load())
		})
	}
}

// TestSharedRoundTrips checks that concurrent decisions share round trips: 64 callers at once send
// at most half as many round trips as decisions, on a server and on a cluster.
func TestSharedRoundTrips(t *testing.T) {
	for _, target := range batchTargets() {
		t.Run(target.name, func(t *testing.T) {
			var hook tripCount
			s := target.newStore(t, &hook)
			decide(t, s, "warm", 0, time.Time{}) // the script loaded: EVALSHA from then on
			before, scripts := hook.trips.Load(), hook.scripts.Load()
			n := decideAgainstModel(t, s)
			trips := hook.trips.Load() - before
			if got := hook.scripts.Load() - scripts; got != int64(n) {
				t.Fatalf("%d script calls for %d decisions", got, n)
			}
			t.Logf("%d decisions in %d round trips", n, trips)
			if trips*2 > int64(n) {
				t.Fatalf("%d decisions in %d round trips, want at most %d", n, trips, n/2)
			}
		})
	}
}

// TestSharedFrozen freezes a real redis-server (SIGSTOP) while a decision is in flight to it, and
// checks that the decisions queued behind it each fail at their own deadline, and that one whose
// deadline passed while queued is not sent once the server answers again, while one still in
// time is.
func TestSharedFrozen(t *testing.T) {
	srv := startServer(t)
	hook := tripCount{sent: make(chan struct{}, 100)}
	c := newClient(t, srv.Addr())
	c.AddHook(&hook)
	prefix := testPrefix(t)
	s := New(c, rate.Every(time.Hour), 10, WithPrefix(prefix), WithTimeout(5*time.Second), WithRefusalMemory(0))
	decide(t, s, "warm", 0, time.Time{}) // the script loaded: EVALSHA and EVAL
	for len(hook.sent) > 0 {
		<-hook.sent
	}

	srv.Signal(syscall.SIGSTOP)
	stopped := true
	defer func() {
		if stopped {
			srv.Signal(syscall.SIGCONT)
		}
	}()
	first := make(chan error, 1)
	go func() {
		_, err := s.Decide(context.Background(), "first", 1, time.Time{})
		first <- err
	}()
	<-hook.sent // in flight, to a frozen server

	late := make(chan error, 1)
	go func() { // queued, with the store's timeout: sent once the server answers again
		_, err := s.Decide(context.Background(), "late", 1, time.Time{})
		late <- err
	}()
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			wait := time.Duration(100+100*i) * time.Millisecond
			ctx, cancel := context.WithTimeout(context.Background(), wait)
			defer cancel()
			start := time.Now()
			_, err := s.Decide(ctx, fmt.Sprint("short-", i), 1, time.Time{})
			took := time.Since(start)
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("a queued decision with a deadline in %v: %v, want the deadline's error", wait, err)
			}
			// Its deadline, and not the 5 s of the round trip it queued behind.
			if took < wait || took > wait+2*time.Second {
				t.Errorf("a queued decision with a deadline in %v failed after %v", wait, took)
			}
		})
	}
	returned := make(chan struct{})
	go func() { wg.Wait(); close(returned) }()
	select {
	case <-returned:
	case <-time.After(30 * time.Second): // a bound far above the 5 s of the round trip in flight
		t.Fatal("the queued decisions did not return")
	}
	srv.Signal(syscall.SIGCONT)
	stopped = false
	if err := <-first; err != nil {
		t.Fatalf("the decision in flight while the server was frozen for less than its timeout: %v", err)
	}
	if err := <-late; err != nil {
		t.Fatalf("the decision queued with time left: %v", err)
	}
	admin := newClient(t, srv.Addr())
	for i := range 4 {
		if n := admin.Exists(context.Background(), fmt.Sprint(prefix, "short-", i)).Val(); n != 0 {
			t.Errorf("short-%d, whose deadline passed while it was queued, was sent", i)
		}
	}
	if n := admin.Exists(context.Background(), prefix+"late").Val(); n != 1 {
		t.Errorf("late, queued with time left, was not sent")
	}
}

// flushOnce is a hook that has the server forget its scripts (SCRIPT FLUSH) right before the
// first pipeline of script calls of the client goes out, as a restart of Redis between two round trips would.
type flushOnce struct {
	admin   *redis.Client
	flushed atomic.Bool
}

func (h *flushOnce) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *flushOnce) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (h *flushOnce) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if isScript(cmds[0]) && !h.flushed.Swap(true) {
			if err := h.admin.ScriptFlush(ctx).Err(); err != nil {
				return err
			}
		}
		return next(ctx, cmds)
	}
}

// TestSharedNoScript checks that a shared round trip that finds the server without the script
// (NOSCRIPT) is sent again with the script itself, as a call of its own is: every decision is
// answered.
func TestSharedNoScript(t *testing.T) {
	srv := startServer(t)
	hook := &flushOnce{admin: newClient(t, srv.Addr())}
	c := newClient(t, srv.Addr())
	c.AddHook(hook)
	s := New(c, rate.Every(time.Hour), 10, WithPrefix(testPrefix(t)), WithTimeout(10*time.Second), WithRefusalMemory(0))
	decideAgainstModel(t, s)
	if !hook.flushed.Load() {
		t.Fatal("no round trip was shared")
	}
}

// TestSharedFailover kills a master of a Redis Cluster of the test's own while 32 callers of one
// Store decide requests at once on keys of every master, all admitted, so that their round trips
// are shared through the failover: every decision is answered within the timeout and a margin,
// every failure is Redis unavailable, and the keys of the killed master are decided again once
// its replica serves them.
func TestSharedFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a cluster of its own and a failover take seconds")
	}
	const (
		callers = 32
		timeout = 100 * time.Millisecond
		margin  = time.Second // scheduling on a loaded machine
	)
	c := startCluster(t)
	prefix := testPrefix(t)
	keys := make([]string, 30)
	for k := range keys {
		keys[k] = fmt.Sprint(prefix, "client-", k)
	}
	masters := mastersOf(t, newClusterClient(t, c.Addrs()), keys)
	var victim *server
	for _, n := range c.Nodes {
		if n.Addr() == masters[0] {
			victim = n
		}
	}
	var hook tripCount
	client := newClusterClient(t, c.Addrs())
	client.AddHook(&hook)
	s := New(client, 1000, 1000, WithPrefix(prefix), WithTimeout(timeout), WithProbeInterval(200*time.Millisecond))

	var killedAt, lastFail atomic.Int64 // ns since start
	var back sync.Map                   // keys of the killed master admitted after the last failure
	var stop atomic.Bool
	start := time.Now()
	var wg sync.WaitGroup
	for g := range callers {
		wg.Go(func() {
			for i := g; !stop.Load(); i += callers {
				k := i % len(keys)
				at := time.Since(start)
				d, err := s.Decide(context.Background(), fmt.Sprint("client-", k), 1, time.Time{})
				if took := time.Since(start) - at; took > timeout+margin {
					t.Errorf("a decision took %v", took)
				}
				switch {
				case err != nil && !errors.Is(err, ErrUnavailable):
					t.Errorf("%v, want Redis unavailable", err)
				case err != nil:
					lastFail.Store(int64(time.Since(start)))
				case !d.Allowed:
					t.Errorf("key %d refused: %+v", k, d)
				case masters[k] == masters[0] && killedAt.Load() > 0 && int64(at) > lastFail.Load() && lastFail.Load() > killedAt.Load():
					back.Store(k, true)
				}
				time.Sleep(time.Millisecond)
			}
		})
	}
	defer func() { stop.Store(true); wg.Wait() }()
	time.Sleep(time.Second)
	shared := hook.shared.Load()
	killedAt.Store(int64(time.Since(start)))
	victim.Stop(syscall.SIGKILL)
	onVictim := 0
	for _, m := range masters {
		if m == masters[0] {
			onVictim++
		}
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		n := 0
		back.Range(func(any, any) bool { n++; return true })
		if n == onVictim {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of the %d keys of the killed master decided again within 20 s", n, onVictim)
		}
	}
	stop.Store(true)
	wg.Wait()
	if shared == 0 || hook.shared.Load() == shared {
		t.Fatalf("%d round trips shared before the kill and %d after, want some of each", shared, hook.shared.Load()-shared)
	}
	t.Logf("the killed master's keys failed for %v; %d round trips shared before the kill, %d after",
		time.Duration(lastFail.Load()-killedAt.Load()), shared, hook.shared.Load()-shared)
}

// TestSharedQueuePerMaster checks that on a cluster each master's calls queue apart, so that a
// slow round trip to one master holds up none of another's: decisions of keys held by several
// masters make one queue per master.
func TestSharedQueuePerMaster(t *testing.T) {
	c := newClusterClient(t, clusterAddrs(t))
	s := New(c, rate.Every(time.Hour), 10, WithPrefix(testPrefix(t)), WithTimeout(testTimeout), WithRefusalMemory(0))
	var keys []string
	for i := range 64 {
		keys = append(keys, fmt.Sprint(i))
	}
	full := make([]string, len(keys))
	for i, k := range keys {
		full[i] = s.prefix + k
	}
	masters := map[string]bool{}
	for _, m := range mastersOf(t, c, full) {
		masters[m] = true
	}
	if len(masters) < 2 {
		t.Fatalf("64 keys on %d masters: the test wants keys on several", len(masters))
	}
	for _, k := range keys {
		decide(t, s, k, 1, time.Time{})
	}
	queues := 0
	s.batch.masters.Range(func(node, q any) bool {
		queues++
		return true
	})
	if queues != len(masters) {
		t.Fatalf("keys of %d masters queued in %d queues, want one each", len(masters), queues)
	}
}

// TestSharedBehindTheFirstRoundTrip sends a second call while the store's first round trip (a
// dial, the script loaded: several round trips of 200 ms) is in flight, with a timeout that
// leaves it one round trip more: sent alone, and queued behind the first, it succeeds. Queued, it
// was judged by the first round trip's time, which it could not wait again, and never sent.
func TestSharedBehindTheFirstRoundTrip(t *testing.T) {
	for _, shared := range []bool{false, true} {
		t.Run(fmt.Sprint("shared=", shared), func(t *testing.T) {
			p := startProxy(t, startServer(t).Addr())
			p.setLatency(200 * time.Millisecond)
			c := newClient(t, p.Addr())
			var sc redis.Scripter = c
			if !shared {
				sc = unpiped{c}
			}
			s := New(sc, rate.Every(time.Second), 5, WithPrefix(testPrefix(t)), WithTimeout(1500*time.Millisecond))
			var wg sync.WaitGroup
			errs := make([]error, 2)
			for i := range errs {
				wg.Go(func() { _, errs[i] = s.Decide(context.Background(), fmt.Sprint("k", i), 1, time.Now()) })
				time.Sleep(5 * time.Millisecond) // the second call arrives with the first in flight
			}
			wg.Wait()
			for i, err := range errs {
				if err != nil {
					t.Errorf("call %d failed on a healthy Redis: %v", i, err)
				}
			}
		})
	}
}
