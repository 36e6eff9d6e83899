package clock

import (
	"sync"
	"sync/atomic"
	"time"
)

// Steps holds the steps back of a clock without monotonic readings that the tables of a
// TokenBucket have taken: a shift added to every reading, and a step proposed but not yet taken.
//
// A reading more than MaxLag behind the latest instant of its table is either stale (a request
// that read the clock long before it was decided) or the first of a clock stepped back. It
// proposes a step by as much as makes it the latest instant, and is decided there. While the
// step is proposed, the readings of the clock's new line are read with it, as far after the
// latest instant as they are after the line's first reading: neither frozen nor credited for
// the step, their waits measured from them. A reading of the old line drops the proposal (a
// stale reading is followed by current ones at once), and is read as before; so a one-off stale
// reading credits nothing. The step is taken once the new line has run on for ConfirmStep with
// no reading of the old line in between. A reading behind the new line too proposes afresh,
// keeping the new line: a reading of it next shows the one behind was a stale reading of it, and
// brings it back, its confirmation not restarted, whatever number of stale readings came between.
//
// Tables see the clock apart: the one that proposes may be behind others (idle since). A table
// that sees the proposal with a latest instant past the newest the new line has given (its last
// reading, with the step) grows the step by the difference, so that its readings are read after
// that instant, not frozen there; the keys a table behind decided before the step grew were
// decided that much early, and are credited the difference (a known limit: the latest instant
// of every table is not known without their locks).
//
// The shift is read with an atomic load; a table goes through mu only for a reading more than
// MaxLag behind or while a step is proposed, and with its own lock held, never the other way.
type Steps struct {
	shift   atomic.Int64 // added to every reading of the clock; only grows
	pending atomic.Bool  // a step is proposed: the fields below hold it

	mu   sync.Mutex
	old  time.Time // the latest instant the tables that saw the proposal had seen, shifted
	line           // the new line of the step proposed
	kept []line    // the lines of the proposals this one replaced, first first (see restore)
}

// maxKept is how many replaced lines Steps keeps: the line of a real step back, and of a few
// more within its confirmation, against any number of stale readings that replace them.
const maxKept = 4

// A line is the clock's line of readings that a proposed step reads from.
type line struct {
	first time.Time     // the first reading of the line, shifted
	last  time.Time     // the latest reading of the line, shifted
	step  time.Duration // the step proposed: how far the line's readings are read later
}

// ConfirmStep is how long a clock's new line of readings must run on, with no reading of the old
// line in between, before a step back to it is taken: longer than requests read the clock apart
// and are still decided before any other, even on a machine that stalls for seconds.
const ConfirmStep = 5 * time.Second

// maxShift bounds all the steps back taken together, short of the 292 years a Duration holds: a
// reading further behind than that (the zero time.Time) is decided at the latest instant and
// proposes nothing. Any step within it is taken, once confirmed, however long.
const maxShift = 250 * 365 * 24 * time.Hour

// see tells s of the reading at, shifted by shift, of a clock without monotonic readings, in a
// table whose latest instant is latest, when a step is proposed or at is more than MaxLag behind
// latest. It proposes a step, confirms it or drops it, and returns what at's reading is to be
// read with: the shift, as a step taken since may have grown it, and for a reading of the new
// line the step proposed, not yet confirmed.
func (s *Steps) see(at time.Time, shift int64, latest time.Time) (int64, int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if now := s.shift.Load(); now != shift {
		at, shift = at.Add(time.Duration(now-shift)), now // a step was taken since at was shifted
	}
	if s.pending.Load() {
		if newest := s.last.Add(s.step); latest.After(newest) {
			// A table further ahead than any reading of the new line has taken it: the clock
			// stepped back from there, so the new line's readings are read from there too.
			s.step += latest.Sub(newest)
		}
		if latest.After(s.old) {
			s.old = latest
		}
		s.reread(at)
		switch {
		case !at.Before(s.old.Add(-MaxLag)):
			s.pending.Store(false) // a reading of the old line: the proposal was a stale reading
			s.kept = s.kept[:0]
			return shift, 0
		case !at.Before(s.last.Add(-MaxLag)):
			if at.After(s.last) {
				s.last = at
			}
			if s.last.Sub(s.first) < ConfirmStep {
				return shift, int64(s.step)
			}
			shift += int64(s.step)
			s.shift.Store(shift)
			s.pending.Store(false)
			s.kept = s.kept[:0]
			return shift, 0
		}
		// Behind the new line too: proposed afresh, the new line kept in case this reading
		// was a stale one of it (see restore); past maxKept, it is replaced without being kept.
	}
	if lag := latest.Sub(at); lag > MaxLag && time.Duration(shift) <= maxShift-lag {
		if s.pending.Load() && len(s.kept) < maxKept {
			s.kept = append(s.kept, s.line)
		}
		s.old, s.line = latest, line{first: at, last: at, step: lag}
		s.pending.Store(true)
		return shift, int64(lag)
	}
	return shift, 0
}

// reread brings back the line a proposal replaced that at is one of (see restore), when at is
// of neither the old line nor the proposed one: a reading of the proposed line, run on from its
// latest, stays on it, though it climbs within MaxLag of a replaced line.
func (s *Steps) reread(at time.Time) {
	onLine := !at.Before(s.last.Add(-MaxLag)) && !at.After(s.last.Add(MaxLag))
	if at.Before(s.old.Add(-MaxLag)) && !onLine {
		s.restore(at)
	}
}

// restore makes the proposal's line the first kept line that at, a reading not of the old line,
// is one of, if any: the proposals made after it were of readings stale on it, and are dropped
// with their lines, whatever their number. The lines kept are each behind the one before, so the
// first that at is on is the one it was read from.
func (s *Steps) restore(at time.Time) {
	for i, l := range s.kept {
		if !at.Before(l.last.Add(-MaxLag)) {
			s.line, s.kept = l, s.kept[:i]
			return
		}
	}
}

// Shift returns the steps back taken so far, added to every reading.
func (s *Steps) Shift() time.Duration { return time.Duration(s.shift.Load()) }
