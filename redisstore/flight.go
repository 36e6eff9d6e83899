package redisstore

import (
	"context"
	"fmt"
	"time"

	"github.com/retryafter/retryafter"
)

// A flight is one round trip to Redis on a key, which the key's other requests on the replica
// wait for rather than each make their own: a [Leased] key's always, and a [Store]'s when its
// bucket, as last seen, may hold one request but not two (see refusals.board).
type flight struct {
	done chan struct{}
	err  error
	down bool // err is a failure of Redis, which the waiters share
}

// A budget is how long one request may wait for Redis in all, its calls and its waits for
// others' calls: the store's timeout from its arrival, or the caller's deadline if sooner.
type budget struct {
	deadline time.Time
	own      bool // the deadline is the caller's
	waited   bool // the request waited for another's round trip
}

// budget returns the budget of a request of ctx that arrives now.
func (s *Store) budget(ctx context.Context) budget {
	b := budget{deadline: time.Now().Add(s.timeout)}
	if d, ok := ctx.Deadline(); ok && d.Before(b.deadline) {
		b.deadline, b.own = d, true
	}
	return b
}

// wait waits for f to land, until the budget's deadline, and reports whether it did.
func (b *budget) wait(f *flight) bool {
	b.waited = true
	select {
	case <-f.done:
		return true
	default:
	}
	timer := time.NewTimer(time.Until(b.deadline))
	defer timer.Stop()
	select {
	case <-f.done:
		return true
	case <-timer.C:
		return false
	}
}

// outOfTime answers a request r whose budget b ran out as it waited for another's round
// trip, as Decide answers one whose own round trip timed out: the caller's deadline's error, or
// Redis's failure to answer within the timeout, which the local fallback f then decides.
func (b budget) outOfTime(ctx context.Context, f *fallback, r *request) (retryafter.Decision, error) {
	if b.own {
		return retryafter.Decision{}, b.expired()
	}
	return f.decide(ctx, r, b.expired())
}

// expired returns the error of a request whose budget ran out: the caller's own deadline, or
// Redis's failure to answer within the store's timeout.
func (b budget) expired() error {
	if b.own {
		return fmt.Errorf("redisstore: %w", context.DeadlineExceeded)
	}
	return &unavailableError{cause: context.DeadlineExceeded}
}
