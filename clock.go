package retryafter

import (
	"sync/atomic"
	"time"
)

// clockResync is how long the default clock goes on from one reading of the wall clock before
// it reads it again.
const clockResync = 100 * time.Millisecond

// A clock is the default clock of the constructors: the system's, as [time.Now] reads it, for
// less.
//
// time.Now reads two clocks, the wall clock and the monotonic one, and is the largest single
// cost of an admitted request: about 100 ns of 250 on a 2-core virtual machine, where reading
// the monotonic clock alone and adding it to a time takes 65. A clock reads the monotonic clock
// on each call and adds what has elapsed to its last time.Now reading, which it renews once
// that is clockResync old.
//
// Its readings carry the monotonic reading time.Now would have given, so whatever measures with
// that alone (the TokenBucket, a maintenance end set from time.Now) sees no difference. Their
// wall time is what is written in Date and HTTP-dates, and what a SlidingWindow's windows and a
// Limiter of another package may go by. It follows the wall clock, which on Linux the kernel
// slews as it slews the monotonic one, to within the few microseconds between time.Now's two
// reads (a base read across a preemption carries that gap, up to about a millisecond under load,
// for its 100 ms); it departs further only when the wall clock is set (a step) or the machine
// resumes from suspend, and then for at most clockResync.
//
// Each constructor has a clock of its own, so that a testing/synctest bubble and the real
// clock do not keep renewing each other's base. (In a bubble, time.Since reads the bubble's
// time, so a base from outside is renewed rather than used.)
type clock struct {
	base atomic.Pointer[time.Time]
}

func (c *clock) now() time.Time {
	if b := c.base.Load(); b != nil {
		// Since reads only the monotonic clock when b has a reading of it.
		if d := time.Since(*b); 0 <= d && d < clockResync {
			return b.Add(d)
		}
	}
	t := time.Now()
	c.base.Store(&t)
	return t
}
