package retryafter

import (
	"sync"
	"sync/atomic"
	"time"
)

// steps holds the steps back of a clock without monotonic readings that the tables of a
// TokenBucket have taken: a shift added to every reading, and a step proposed but not yet taken.
//
// A reading more than maxLag behind the latest instant of its table is either stale (a request
// that read the clock long before it was decided) or the first of a clock stepped back. It
// is decided at the latest instant either way, and proposes a step. The step is taken only once
// the clock's new line of readings has run on for confirmStep with no reading of the old line in
// between (a stale reading is followed by current ones at once), and then by as much as makes the
// new line's first reading the latest instant: its buckets count on from there, credited neither
// the step nor the stale reading's age. So a one-off stale reading shifts nothing.
//
// The shift is read with an atomic load; a table goes through mu only for a reading more than
// maxLag behind or while a step is proposed, and with its own lock held, never the other way.
type steps struct {
	shift   atomic.Int64 // added to every reading of the clock; only grows
	pending atomic.Bool  // a step is proposed: the fields below hold it

	mu    sync.Mutex
	old   time.Time // the latest instant the tables that saw the proposal had seen, shifted
	first time.Time // the first reading of the new line, shifted
	last  time.Time // the latest reading of the new line, shifted
}

// confirmStep is how long a clock's new line of readings must run on, with no reading of the old
// line in between, before a step back to it is taken: longer than requests read the clock apart
// and are still decided before any other, even on a machine that stalls for seconds.
const confirmStep = 5 * time.Second

// maxShift bounds all the steps back taken together, short of the 292 years a Duration holds: a
// reading further behind than that (the zero time.Time) is decided at the latest instant and
// proposes nothing. Any step within it is taken, once confirmed, however long.
const maxShift = 250 * 365 * 24 * time.Hour

// see tells s of the reading at, shifted by shift, of a clock without monotonic readings, in a
// table whose latest instant is latest, when a step is proposed or at is more than maxLag behind
// latest. It proposes a step, confirms it or drops it, and returns the shift at should be read
// with now: shift unless a step was taken, by this reading or another.
func (s *steps) see(at time.Time, shift int64, latest time.Time) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if now := s.shift.Load(); now != shift {
		return now // a step was taken since at was shifted: read it again
	}
	if !s.pending.Load() {
		if lag := latest.Sub(at); lag > maxLag && time.Duration(shift) <= maxShift-lag {
			s.old, s.first, s.last = latest, at, at
			s.pending.Store(true)
		}
		return shift
	}
	if latest.After(s.old) {
		s.old = latest
	}
	switch {
	case !at.Before(s.old.Add(-maxLag)):
		s.pending.Store(false) // a reading of the old line: the proposal was a stale reading
	case at.Before(s.last.Add(-maxLag)):
		// Behind the new line too (stale on it, or broken): it neither confirms nor drops.
	default:
		if at.After(s.last) {
			s.last = at
		}
		step := s.old.Sub(s.first)
		if s.last.Sub(s.first) >= confirmStep && time.Duration(shift) <= maxShift-step {
			shift += int64(step)
			s.shift.Store(shift)
			s.pending.Store(false)
		}
	}
	return shift
}
