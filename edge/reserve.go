package edge

import (
	"context"
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

// waitKey decides req under key when c may make it wait (its Limiter is a Reserver and MaxWait
// is on), and reports true when it has decided it wholly: it waited and passes, its client
// left while it waited, or a dry run found it would wait. Otherwise v holds the Limiter's
// Decision, or *err its error, for decideKey to go on with.
func (c *Core[R]) waitKey(ctx context.Context, req R, key string, cost int, v *Verdict, err *error) (done bool) {
	most := c.c.MaxWait
	if dl, ok := ctx.Deadline(); ok {
		most = min(most, time.Until(dl)-1) // the context must outlive the wait
	}
	if c.c.DryRun {
		v.Decision, *err = c.l.Decide(ctx, key, cost, v.Now)
		if *err != nil || v.Decision.Allowed || v.Decision.RetryAfter > most {
			return false
		}
		v.Outcome = DryRunWaited
		c.decided(req, v.Outcome, v.Decision)
		return true
	}
	if c.waiting.Add(1) > c.maxWaiting {
		most = 0 // as many wait as may: refused as without MaxWait
	}
	defer c.waiting.Add(-1)
	v.Decision, *err = c.reserver.Reserve(ctx, key, cost, v.Now, most)
	if *err != nil || !v.Decision.Allowed || v.Decision.RetryAfter <= 0 {
		return false
	}
	c.sleep(ctx, req, key, cost, v)
	return true
}

// sleep waits for the place that v's Decision promised, then passes req as Waited; when req's
// context ends first, it gives the place back and fails req closed as Canceled.
func (c *Core[R]) sleep(ctx context.Context, req R, key string, cost int, v *Verdict) {
	wait := v.Decision.RetryAfter
	t := time.NewTimer(wait)
	select {
	case <-t.C:
	case <-ctx.Done():
		t.Stop()
		// The client left: its place goes to the requests that come after it.
		if err := c.reserver.Release(context.WithoutCancel(ctx), key, cost, c.c.Now()); err != nil {
			c.Errored(req, err)
		}
		v.Decision, v.Outcome, v.Failure = Decision{}, FailedClosed, Canceled
		c.decided(req, v.Outcome, v.Decision)
		return
	}
	v.Now, v.Outcome = c.c.Now(), Waited
	if c.c.Quota || c.c.OnDecided != nil {
		// The quota as of when it is served: a peek, which spends nothing.
		if d, err := c.l.Decide(ctx, key, 0, v.Now); err == nil {
			v.Decision = d
		}
	}
	v.Decision.Allowed, v.Decision.RetryAfter = true, wait
	c.decided(req, v.Outcome, v.Decision)
}
