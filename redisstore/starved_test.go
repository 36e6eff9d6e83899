package redisstore

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/retryafter/retryafter"
)

// TestOneLateReplyRefusesNoOne checks, on testing/synctest's clock, what a store does with a
// round trip that runs past its timeout while Redis answers the others, as when the client's
// process is starved of CPU and reads a reply late: the late requests fail, each on its own,
// and no request around them does. Then, five late at once (in flight together, one stall):
// they count as one failure, and the requests after them are decided. Through the middleware,
// none of the requests around the late ones is answered 503.
func TestOneLateReplyRefusesNoOne(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := &fakeRedis{}
		var late atomic.Int64 // how many of the next calls on key "late" never answer
		fake.set(func(ctx context.Context) *redis.Cmd { return admits(ctx) })
		slow := &lateKeys{fakeRedis: fake, late: &late}
		s := New(slow, 1, 10)
		h := retryafter.LimitWith(s)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
		ctx := context.Background()

		for round, n := range []int64{1, 5, 1, 1, 1} {
			late.Store(n)
			var wg sync.WaitGroup
			var failedLate atomic.Int64
			for range n {
				wg.Go(func() {
					if _, err := s.Decide(ctx, "late", 1, time.Now()); errors.Is(err, ErrUnavailable) {
						failedLate.Add(1)
					}
				})
			}
			// Requests around the late ones, while they wait and after they failed.
			for i := range 20 {
				time.Sleep(10 * time.Millisecond)
				if w := get(h, "192.0.2.1:1234"); w.Code != http.StatusOK {
					t.Fatalf("round %d: request %d around %d late replies answered %d, want 200", round, i, n, w.Code)
				}
			}
			wg.Wait()
			if failedLate.Load() != n {
				t.Fatalf("round %d: %d of %d late round trips failed, want all", round, failedLate.Load(), n)
			}
			if err := s.Down(); err != nil {
				t.Fatalf("round %d: Down after %d late replies among answers: %v", round, n, err)
			}
		}
	})
}

// TestDownFromEvidence checks, on testing/synctest's clock, that a store takes Redis for down
// from evidence: three failures in a row, each of a round trip sent after the one before had
// failed. Until then every decision asks Redis (and waits for it); from then on they fail at
// once but for one probe per interval. The round trips in flight together when the first fails
// count once: ten concurrent decisions against a frozen server leave it up.
func TestDownFromEvidence(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := &fakeRedis{answer: frozen}
		s := New(fake, 1, 10, WithTimeout(100*time.Millisecond), WithProbeInterval(time.Second))
		ctx := context.Background()
		var wg sync.WaitGroup
		for range 10 {
			wg.Go(func() { s.Decide(ctx, "k", 1, time.Now()) })
		}
		wg.Wait()
		if err := s.Down(); err != nil {
			t.Fatalf("down after the round trips of one stall: %v", err)
		}
		for i := 2; i <= downAfter; i++ {
			start := time.Now()
			_, err := s.Decide(ctx, "k", 1, start)
			if took := time.Since(start); !errors.Is(err, ErrUnavailable) || took < 100*time.Millisecond {
				t.Fatalf("failure %d: %v after %v, want Redis asked until the timeout", i, err, took)
			}
			if down := s.Down() != nil; down != (i == downAfter) {
				t.Fatalf("after %d failures in a row: down %v", i, down)
			}
		}
		calls := fake.calls.Load()
		start := time.Now()
		for range 100 {
			if _, err := s.Decide(ctx, "k", 1, time.Now()); !errors.Is(err, ErrUnavailable) {
				t.Fatalf("while down: %v", err)
			}
		}
		if time.Since(start) != 0 || fake.calls.Load() != calls {
			t.Fatalf("while down: %v waited, %d round trips, want none", time.Since(start), fake.calls.Load()-calls)
		}
		fake.set(admits)
		time.Sleep(time.Second)
		if d, err := s.Decide(ctx, "k", 1, time.Now()); err != nil || !d.Allowed || s.Down() != nil {
			t.Fatalf("the probe after Redis is back: %+v, %v, down %v", d, err, s.Down())
		}
	})
}

// lateKeys is a fakeRedis whose calls on the key "late" never answer, as many as late says,
// while the others answer at once.
type lateKeys struct {
	*fakeRedis
	late *atomic.Int64
}

func (l *lateKeys) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	if keys[0] == DefaultPrefix+"late" && l.late.Add(-1) >= 0 {
		return frozen(ctx)
	}
	return l.fakeRedis.EvalSha(ctx, sha, keys, args...)
}

// TestStarvedFailuresAreNoEvidence checks, on testing/synctest's clock, that failures seen long
// after their deadline (the process did not run in time to read the answer, as under CPU
// starvation) do not take Redis for down, however many in a row; failures seen on time do; and
// while down, a probe whose failure is seen late is followed by another at once.
func TestStarvedFailuresAreNoEvidence(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const timeout = 100 * time.Millisecond
		readLate := func(ctx context.Context) *redis.Cmd {
			// The answer is read a third of the timeout after the deadline.
			time.Sleep(timeout + timeout/3)
			return redis.NewCmdResult(nil, context.DeadlineExceeded)
		}
		fake := &fakeRedis{answer: readLate}
		s := New(fake, 1, 10, WithTimeout(timeout))
		for i := range 3 * downAfter {
			if _, err := s.Decide(context.Background(), "k", 1, time.Now()); !errors.Is(err, ErrUnavailable) {
				t.Fatalf("late answer %d: %v, want an error wrapping ErrUnavailable", i, err)
			}
			if err := s.Down(); err != nil {
				t.Fatalf("after %d answers read late: down: %v", i+1, err)
			}
		}
		fake.set(frozen)
		for range downAfter {
			s.Decide(context.Background(), "k", 1, time.Now())
		}
		if s.Down() == nil {
			t.Fatalf("after %d timeouts seen on time: up, want down", downAfter)
		}
		// A probe whose failure is seen late told nothing: the next decision probes again.
		fake.set(readLate)
		time.Sleep(DefaultProbeInterval)
		calls := fake.calls.Load()
		s.Decide(context.Background(), "k", 1, time.Now())
		s.Decide(context.Background(), "k", 1, time.Now())
		if n := fake.calls.Load() - calls; n != 2 {
			t.Fatalf("%d round trips for a probe read late and the decision after it, want 2", n)
		}
		fake.set(admits)
		if d, err := s.Decide(context.Background(), "k", 1, time.Now()); err != nil || !d.Allowed || s.Down() != nil {
			t.Fatalf("after a probe read late, Redis answering: %+v, %v, down %v", d, err, s.Down())
		}
	})
}
