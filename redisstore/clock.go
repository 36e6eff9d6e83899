package redisstore

import "time"

// A clock tells the instants a Store decides at and its memory of refusals reckons with.
type clock struct {
	caller    bool      // decide at the now passed to Decide instead of Redis's TIME (tests)
	tolerance any       // with caller: how far back instants may arrive before a repair, ns (state.lua)
	epoch     time.Time // origin of the instants of refusals on the local clock
}

// instant is Store.instant.
func (c *clock) instant(now time.Time) int64 {
	if c.caller {
		return now.UnixMicro() * 1000
	}
	return int64(time.Since(c.epoch))
}

// heldAt returns the instant to send the held charge o at, and how long before it o's last
// charge was made: now, or with the caller's clock (tests) the instant of that last charge.
func (c *clock) heldAt(o owed) (time.Time, int64) {
	now := time.Now()
	if c.caller {
		now = time.UnixMicro(o.at / 1000)
	}
	return now, max(c.instant(now)-o.at, 0)
}

// withCallerClock makes the Store decide at the now given to Decide, to the microsecond,
// instead of Redis's TIME: for tests, which need an injected clock. Replicas using it agree
// only if their clocks do. Instants may arrive out of order by up to one refill of the burst
// before the script takes the clock to have stepped back (see state.lua).
func withCallerClock() Option {
	return func(s *Store) {
		s.clock.caller = true
		s.clock.tolerance = s.own.horizon()
	}
}

// withStepTolerance sets how far back the caller's instants may arrive before the script takes
// the clock to have stepped back, for the tests of that repair: 0 is what Redis's TIME gets.
func withStepTolerance(d time.Duration) Option {
	return func(s *Store) { s.clock.tolerance = int64(d) }
}

// instant returns the instant of now (a request's send, an answer's arrival), for the memory of
// refusals: on the local monotonic clock, in nanoseconds since the Store was made; with the caller's clock,
// the caller's now truncated to the microsecond, the instant the script decides at.
func (s *Store) instant(now time.Time) int64 { return s.clock.instant(now) }
