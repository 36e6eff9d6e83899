package redisstore

import (
	"context"
	"sync/atomic"
	"time"
)

// A callCtx is the context of one round trip: the caller's values, and a deadline of the
// store's own, which the caller's cancellation does not shorten (see [Store.Decide]). It is
// context.WithDeadline(context.WithoutCancel(parent), deadline) without a timer of its own: its
// Done channel is shared with the calls whose deadlines fall within the same step (see
// [deadlines]), and closes at most one step after the deadline. The client's reads and writes
// are bounded by the exact deadline (go-redis sets it on the connection); only the waits that
// watch Done (for a pooled connection, between retries) may run up to a step longer.
type callCtx struct {
	parent   context.Context
	deadline time.Time
	done     <-chan struct{}
}

func (c *callCtx) Deadline() (time.Time, bool) { return c.deadline, true }
func (c *callCtx) Done() <-chan struct{}       { return c.done }
func (c *callCtx) Value(key any) any           { return c.parent.Value(key) }

func (c *callCtx) Err() error {
	select {
	case <-c.done:
		return context.DeadlineExceeded
	default:
		return nil
	}
}

// deadlines hands out channels that close at or after a given deadline, at most step after it,
// one per step of deadlines, so that a timeout costs a decision no timer or channel of its own:
// at a thousand decisions a second and a step of 10 ms, ten share one.
type deadlines struct {
	step time.Duration
	cur  atomic.Pointer[tick]
}

// A tick is a channel that a timer closes at its instant.
type tick struct {
	at   time.Time // on the monotonic clock
	done chan struct{}
}

// stepFor returns the step of the deadlines of a timeout: a sixteenth of it, within [1 ms, 10 ms].
func stepFor(timeout time.Duration) time.Duration {
	return min(max(timeout/16, time.Millisecond), 10*time.Millisecond)
}

// doneBy returns a channel that closes at or after deadline, within d.step of it.
func (d *deadlines) doneBy(deadline time.Time) <-chan struct{} {
	cur := d.cur.Load()
	if cur != nil && !cur.at.Before(deadline) && cur.at.Sub(deadline) <= d.step {
		return cur.done
	}
	t := &tick{at: deadline.Add(d.step), done: make(chan struct{})}
	time.AfterFunc(time.Until(t.at), func() { close(t.done) })
	// Deadlines mostly grow with time: the newest tick serves the calls that follow. One made for
	// an earlier deadline (a caller's own, sooner than the timeout) serves only its call.
	if cur == nil || t.at.After(cur.at) {
		d.cur.CompareAndSwap(cur, t)
	}
	return t.done
}
