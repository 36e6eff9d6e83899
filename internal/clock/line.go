// Package clock holds the line of instants that the tables and schedules of retryafter decide
// on: the readings of a clock, following it back and forward by any step, never behind the
// latest instant they have seen.
package clock

import "time"

// A Line is the line of instants a table of buckets, or a schedule of returns, decides on: the
// readings of its clock, shifted by the steps back the clock has taken, and never behind the
// latest instant it has seen. It is not safe for concurrent use: its owner locks it.
type Line struct {
	Steps  *Steps    // the clock's steps back (see At), shared by the tables of a TokenBucket
	Latest time.Time // the latest instant a decision on the line was made at
}

// At returns the instant a decision of the caller's now is made at, the latest the line has
// seen, and how far that is after now; it records it.
//
// A clock without monotonic readings (an injected one, or a wall clock that was set back) can
// step back, and a reading can be stale. A now more than MaxLag behind proposes a step to the
// line's Steps, shared by every table of its TokenBucket, and is decided at the latest instant;
// the readings after it on the clock's new line count on from there, and the step is taken once
// they confirm it (see Steps): so the buckets count on from the new readings, in every part,
// neither frozen nor credited for the step. Instants on the line never step back, so that what
// a table knows of when buckets refill stays true. time.Now's readings are monotonic and never
// step back.
func (l *Line) At(now time.Time) (at time.Time, lag time.Duration) {
	at = now
	shift := l.Steps.shift.Load()
	if shift != 0 {
		at = now.Add(time.Duration(shift))
	}
	if !at.Before(l.Latest) && !l.Steps.pending.Load() {
		l.Latest = at // the usual reading, at or after the latest: nothing to see
		return at, 0
	}
	lag = l.Latest.Sub(at)
	if (lag > MaxLag || l.Steps.pending.Load()) && now == now.Round(0) {
		at = now.Add(time.Duration(l.Steps.see(at, shift, l.Latest)))
		lag = l.Latest.Sub(at)
	}
	if lag <= 0 {
		l.Latest = at
		return at, 0
	}
	return l.Latest, lag
}

// MaxLag is how far behind the latest instant a table has seen a reading can be and still be
// taken for a request that read the clock before another took the lock, rather than a step of
// the clock.
const MaxLag = time.Second
