package clock

import (
	"math"
	"sync"
	"time"

	"github.com/retryafter/retryafter/internal/header"
)

// returnHorizon is how many seconds ahead a returns schedule books: an hour.
const returnHorizon = 3600

// Returns is a schedule of the seconds that refused clients are told to come back in, so that
// many clients refused for the same reason at the same time come back at the rate the service
// can take rather than in the same second. A second is one of the schedule's line (Unix seconds
// of the clock's first reading, run on by the time its readings have seen pass, which follows a
// clock stepped back or forward as a TokenBucket does: see Line); a client refused at now
// and told to wait s whole seconds comes back at now+s, in second floor(now)+s of the line, at
// the fraction of a second it was refused at. The zero value is ready to use; it is safe for
// concurrent use.
type Returns struct {
	mu     sync.Mutex
	line   Line      // its instants: a reading behind them is booked as at the latest
	steps  Steps     // the steps back of the clock, for line
	origin time.Time // the first reading: the line's seconds count from it

	n     []uint32 // n[b%returnHorizon]: clients told to come back in second b, for low <= b < low+returnHorizon
	low   int64    // the first second the schedule holds: the one after the present
	epoch int64    // the first low, from which each second's share of the rate is counted
	hint  int64    // no second in [low, hint) had room when last looked, at hintRate and hintBurst
	// The rate and burst hint was found at: at a rate more than a quarter higher, or another
	// burst, those seconds may have room again, and are looked at afresh.
	hintRate  float64
	hintBurst int
}

// Book books a client of cost refused at now that can be admitted no earlier than earliest,
// after now, at perSecond of cost a second and at most burst (when above 0) in one second, and
// returns the second it is told to come back in. With date false it is told a wait in delay-seconds, and
// comes back at now plus a whole number of seconds; with date true an HTTP-date, the start of
// that second.
//
// The second returned is one of now's clock: the schedule books on its line, by whole seconds
// as far from the line's present as first is from now's, so that a reading behind the line (a
// clock stepped back, or stale) is told as long a wait as one on it.
func (s *Returns) Book(now, earliest time.Time, perSecond float64, burst, cost int, date bool) int64 {
	sec := now.Unix()
	var first int64
	if date {
		first = header.RoundUpDate(earliest).Unix()
	} else {
		first = sec + header.DelaySeconds(earliest.Sub(now))
	}
	if !(perSecond < maxShare) {
		return first
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	k := s.second(now) - sec // from now's seconds to the line's
	return s.takeLocked(sec+k, first+k, perSecond, burst, cost) - k
}

// second returns the second of the line that now is read at. The mutex is held.
func (s *Returns) second(now time.Time) int64 {
	if s.line.Steps == nil {
		s.line.Steps, s.origin = &s.steps, now
	}
	at, _ := s.line.At(now)
	// Monotonic readings run on by the time that passed, whatever the wall clock does.
	since := at.Sub(s.origin)
	if since <= math.MinInt64/2 || since >= math.MaxInt64/2 {
		return at.Unix() // beyond what a Duration holds
	}
	ns := int64(since) + int64(s.origin.Nanosecond())
	sec := ns / int64(time.Second)
	if ns%int64(time.Second) < 0 {
		sec--
	}
	return s.origin.Unix() + sec
}

// take books one client of cost 1 refused in second now that may not come back before second first:
// the earliest second at or after first where fewer than its share of rate clients a second
// (and fewer than burst, when burst > 0) are booked. It returns that second, which is never
// before first. When the next hour is booked out, it returns first: the spread then no longer
// holds, but the wait stays honest.
func (s *Returns) take(now, first int64, perSecond float64, burst int) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.takeLocked(now, first, perSecond, burst, 1)
}

// takeLocked is take with the mutex held, for a client of cost (see takeCost).
func (s *Returns) takeLocked(now, first int64, perSecond float64, burst, cost int) int64 {
	low := now + 1 // the first second after the present
	if s.n == nil {
		s.n = make([]uint32, returnHorizon)
		s.low, s.epoch, s.hint = low, low, low
	}
	s.advance(low)
	first = max(first, s.low)
	end := s.low + returnHorizon
	if first >= end {
		return first
	}
	if cost > 1 {
		return s.takeCost(first, end, perSecond, burst, cost)
	}
	b := first
	if perSecond > s.hintRate*1.25 || burst != s.hintBurst { // not for every wobble of a measured rate
		s.hint, s.hintRate, s.hintBurst = s.low, perSecond, burst
	}
	fromHint := first <= s.hint
	if fromHint {
		b = s.hint
	}
	for ; b < end; b++ {
		i := returnSlot(b)
		if s.n[i] < s.share(b, perSecond, burst) {
			s.n[i]++
			if fromHint {
				s.hint, s.hintRate = b, min(s.hintRate, perSecond)
			}
			return b
		}
	}
	if fromHint {
		s.hint, s.hintRate = end, min(s.hintRate, perSecond)
	}
	return first
}

// takeCost books a client of cost above 1 in the first second b from first, before end, such
// that the seconds its cost takes to accrue at perSecond (at most burst a second), up to b and
// none before the schedule's first, have room for it: it takes that room from b back. So the
// seconds up to any one hold no more cost than their shares, and a cost above a second's share
// comes back once the seconds before it have accrued it. When there is no such second, it
// returns first.
func (s *Returns) takeCost(first, end int64, perSecond float64, burst, cost int) int64 {
	each := perSecond
	if burst > 0 {
		each = min(each, float64(burst))
	}
	w := math.Ceil(float64(cost) / each) // the seconds that accrue it
	if !(w < returnHorizon) {
		return first
	}
	span := int64(max(w, 1))
	from := max(s.low, first-span+1)
	room := func(b int64) int64 {
		return max(int64(s.share(b, perSecond, burst))-int64(s.n[returnSlot(b)]), 0)
	}
	var free int64 // the room of the seconds from max(from, b-span+1) to b
	for b := from; b < first; b++ {
		free += room(b)
	}
	for b := first; b < end; b++ {
		free += room(b)
		if out := b - span; out >= from {
			free -= room(out)
		}
		if free < int64(cost) {
			continue
		}
		left := int64(cost)
		for x := b; left > 0; x-- {
			take := min(room(x), left)
			s.n[returnSlot(x)] += uint32(take)
			left -= take
		}
		return b
	}
	return first
}

// advance moves the schedule's first second to low, if later, forgetting the seconds before it
// (the whole ring at most).
func (s *Returns) advance(low int64) {
	for b := s.low; b < min(low, s.low+returnHorizon); b++ {
		s.n[returnSlot(b)] = 0
	}
	s.low = max(s.low, low)
	s.hint = max(s.hint, s.low)
}

// returnSlot returns the index of second b in the schedule's ring.
func returnSlot(b int64) int {
	i := b % returnHorizon
	if i < 0 {
		i += returnHorizon
	}
	return int(i)
}

// maxShare bounds a second's share, so that a rate too high to count is taken as no bound.
const maxShare = 1 << 30

// share returns how many clients second b may take at a perSecond below maxShare (book takes
// any other as no bound): the clients of a stream at perSecond a second that fall in it (so
// that a rate of 2.5 gives seconds of 2 and 3, and one of 0.2 a client every fifth second), at
// most burst when burst > 0.
func (s *Returns) share(b int64, perSecond float64, burst int) uint32 {
	x := float64(b - s.epoch)
	n := uint32(math.Floor((x+1)*perSecond) - math.Floor(x*perSecond))
	if burst > 0 {
		n = min(n, uint32(min(burst, maxShare)))
	}
	return n
}

// SpreadWait books a client of cost refused at now that must wait at least wait, and returns
// its wait in whole seconds: at least wait rounded up, and at least one second. A wait beyond
// the schedule's hour is returned as it is.
func (s *Returns) SpreadWait(now time.Time, wait time.Duration, perSecond float64, burst, cost int) time.Duration {
	if wait >= returnHorizon*time.Second {
		return wait
	}
	sec := now.Unix()
	return time.Duration(s.Book(now, now.Add(wait), perSecond, burst, cost, false)-sec) * time.Second
}
