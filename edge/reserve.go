package edge

import (
	"context"
	"errors"
	"time"
)

// A Reserver is a [Limiter] that can promise a request a place later on, as x/time/rate's
// ReserveN does: a [Core] whose Config has a MaxWait asks it instead of Decide, so that a request
// that is only a little early waits for its place and is then served, rather than refused.
//
// Reserve decides as Decide does at now, except that a request Decide would refuse with a
// RetryAfter of at most maxWait is admitted at its place: its cost is spent now, as of
// now + RetryAfter, so that no other request can take that place, and the Decision is Allowed
// with RetryAfter the wait until it. A request whose wait is longer is refused as Decide refuses
// it, spending nothing. A maxWait of 0 or less makes Reserve Decide.
//
// Release gives back, at now, the cost of a request that Reserve admitted with a wait, when its
// client leaves before its place: as if it had not been made, for the requests that come after
// it (those that hold a place keep it).
type Reserver interface {
	Limiter
	Reserve(ctx context.Context, key string, cost int, now time.Time, maxWait time.Duration) (Decision, error)
	Release(ctx context.Context, key string, cost int, now time.Time) error
}

// DefaultMaxWaiting is the most requests that wait for their place at once in one [Core] when
// its Config's MaxWaiting is 0.
const DefaultMaxWaiting = 1024

// A waiter is the Limiter a Core asks when requests may wait for their place: its Reserver's
// Reserve, within MaxWait, the request's deadline and the cap on waiting requests, then the wait.
// What it returns for a request that waited, or would have in a dry run, is one of the errors
// below, which Core.failed answers: so that the path of a request decided at once is the same
// with waiting on or off.
type waiter[R any] struct{ c *Core[R] }

var (
	errWaited    = errors.New("edge: waited for its place")
	errWouldWait = errors.New("edge: would have waited for its place")
)

// A releaseError is the error of a Reserver's Release, for a request whose client left while it
// waited.
type releaseError struct{ err error }

func (e releaseError) Error() string { return e.err.Error() }

// Decide implements [Limiter]: it decides as the Reserver does, making a request whose place is
// within reach wait for it on ctx; a client that leaves meanwhile gives it back.
func (w *waiter[R]) Decide(ctx context.Context, key string, cost int, now time.Time) (Decision, error) {
	c := w.c
	most := c.c.MaxWait
	if dl, ok := ctx.Deadline(); ok {
		most = min(most, time.Until(dl)-1) // the context must outlive the wait
	}
	if c.c.DryRun {
		d, err := c.reserver.Decide(ctx, key, cost, now)
		if err == nil && !d.Allowed && d.RetryAfter <= most {
			err = errWouldWait
		}
		return d, err
	}
	if c.waiting.Add(1) > c.maxWaiting {
		most = 0 // as many wait as may: refused as without MaxWait
	}
	defer c.waiting.Add(-1)
	d, err := c.reserver.Reserve(ctx, key, cost, now, most)
	if err != nil || !d.Allowed || d.RetryAfter <= 0 {
		return d, err
	}
	t := time.NewTimer(d.RetryAfter)
	select {
	case <-t.C:
		return d, errWaited
	case <-ctx.Done():
		t.Stop()
		// The client left: its place goes to the requests that come after it.
		if err := c.reserver.Release(context.WithoutCancel(ctx), key, cost, c.c.Now()); err != nil {
			return Decision{}, releaseError{err}
		}
		return Decision{}, ctx.Err()
	}
}

// served passes v, which waited for its place, as Waited, with the quota as of now when the
// edge reads it, and the time it waited as its RetryAfter.
func (c *Core[R]) served(ctx context.Context, v *Verdict) {
	wait := v.Decision.RetryAfter
	v.Now, v.Outcome = c.c.Now(), Waited
	if c.c.Quota || c.c.OnDecided != nil {
		// A peek, which spends nothing.
		if d, err := c.reserver.Decide(ctx, v.Key, 0, v.Now); err == nil {
			v.Decision = d
		}
	}
	v.Decision.Allowed, v.Decision.RetryAfter = true, wait
}
