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
// that is clockResync old. Its readings carry the monotonic reading time.Now would have given,
// and the limiter measures with that alone, so it decides exactly as with time.Now. Their wall
// time is the wall clock's as well, since the kernel slews both clocks alike: the two part only
// when the wall clock is set (a step) or the machine resumes from suspend, and then for at most
// clockResync, which only the Date field sees, written to the second.
//
// Each constructor has a clock of its own, so that one built in a testing/synctest bubble keeps
// to the bubble's time (there, time.Since reads it).
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
