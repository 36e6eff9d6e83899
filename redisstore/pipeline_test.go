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
