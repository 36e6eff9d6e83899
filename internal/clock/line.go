// Package clock holds the line of instants that the tables and schedules of retryafter decide
// on: the readings of a clock, following it back and forward by any step, never behind the
// latest instant they have seen.
package clock

import (
	"time"

	"golang.org/x/time/rate"
)

// A Line is the line of instants a table of buckets, or a schedule of returns, decides on: the
// readings of its clock, shifted by the steps back the clock has taken, and never behind the
// latest instant it has seen. It is not safe for concurrent use: its owner locks it.
type Line struct {
	Steps  *Steps    // the clock's steps back (see At), shared by the tables of a TokenBucket
	Latest time.Time // the latest instant a decision on the line was made at
}

// At returns the instant a decision of the caller's now is made at, the latest the line has
// seen, and how late that is for now (see Late); it records it.
//
// A clock without monotonic readings (an injected one, or a wall clock that was set back) can
// step back, and a reading can be stale. A now more than MaxLag behind proposes a step to the
// line's Steps, shared by every table of its TokenBucket, and is decided at the latest instant;
// the readings after it on the clock's new line count on from there, and the step is taken once
// they confirm it (see Steps): so the buckets count on from the new readings, in every part,
// neither frozen nor credited for the step. Instants on the line never step back, so that what
// a table knows of when buckets refill stays true. time.Now's readings are monotonic and never
// step back.
func (l *Line) At(now time.Time) (time.Time, Late) {
	at := now
	shift := l.Steps.shift.Load()
	if shift != 0 {
		at = now.Add(time.Duration(shift))
	}
	if !at.Before(l.Latest) && !l.Steps.pending.Load() {
		l.Latest = at // the usual reading, at or after the latest: nothing to see
		return at, Late{}
	}
	var late Late
	lag := l.Latest.Sub(at)
	if (lag > MaxLag || l.Steps.pending.Load()) && now == now.Round(0) {
		shift, step := l.Steps.see(at, shift, l.Latest)
		at, late.Step = now.Add(time.Duration(shift+step)), time.Duration(step)
		lag = l.Latest.Sub(at)
		if step == 0 && lag > MaxLag && time.Duration(shift) > maxShift-lag {
			// Further behind than any step the line follows (maxShift: the zero time of a
			// clock that failed once): decided at the latest instant, its waits told from
			// there, as the bucket counts them, not lengthened by centuries.
			return l.Latest, Late{}
		}
	}
	if lag <= 0 {
		l.Latest = at
		return at, late
	}
	late.Lag = lag
	return l.Latest, late
}

// A Late is how far after a caller's reading the instant At decided it at is: the lag behind
// the latest instant, and, for a reading of the new line of a step back not yet confirmed, the
// step. Its zero value is the usual reading's. The step concerns a wait a client is told, which
// it measures on the clock when it comes back; a wait the server itself sits out, on its own
// timer (a request's place), is lengthened by the lag alone.
type Late struct {
	Lag  time.Duration
	Step time.Duration
}

// Wait returns wait, measured from the instant decided, as it is told from the caller's
// reading: lengthened by the lag, and by the step when a client back after it, told it rounded
// up to whole seconds, may read within MaxLag of the latest instant, where its reading is taken
// for one of the clock's old line and the step for a stale reading (Steps cannot tell them
// apart), so that it holds either way. A client told a shorter wait comes back on the new line,
// behind the old one. A wait of 0, or of rate.InfDuration or more, is kept; the others saturate
// below rate.InfDuration.
func (l Late) Wait(wait time.Duration) time.Duration {
	if wait <= 0 || wait >= rate.InfDuration || l == (Late{}) {
		return wait
	}
	told := later(wait, l.Lag)
	if l.Step > 0 && wait+time.Second+MaxLag >= l.Step {
		told = later(told, l.Step)
	}
	return told
}

// later returns wait + by, both at or above 0, saturating below rate.InfDuration.
func later(wait, by time.Duration) time.Duration {
	if by >= rate.InfDuration-1-wait {
		return rate.InfDuration - 1
	}
	return wait + by
}

// MaxLag is how far behind the latest instant a table has seen a reading can be and still be
// taken for a request that read the clock before another took the lock, rather than a step of
// the clock.
const MaxLag = time.Second
