// Package httpratestore is a [retryafter.Limiter] that counts requests the way
// github.com/go-chi/httprate does, on any of its counters, and answers a refusal with the exact
// wait where httprate sends the whole window, truncated:
//
//	// before: Retry-After is always the window (60), or 0 for a window under a second
//	r.Use(httprate.LimitByIP(100, time.Minute))
//
//	// after: the same counting; Retry-After is when httprate's own check next admits, rounded up
//	r.Use(retryafter.LimitWith(httpratestore.New(100, time.Minute, nil)))
//
// Every request is admitted or refused exactly as httprate's middleware would (the tests run
// both side by side), and a refusal costs nothing. With 3 requests per 10 s spent at once, the
// next is told 11 a second later, where httprate says 10 and a client that obeys is refused
// again: the previous window still weighs on the next one.
//
// What else changes, against httprate's middleware: the key is [retryafter.ClientIP] (an IPv6
// client's /64 too, forwarding headers only from proxies you trust); the in-memory counter's
// windows are aligned to the wall clock, as httprate aligns every counter you pass it; a counter
// error is a 503 with Retry-After: 1 (or admission, with retryafter.WithFailOpen) and never the
// error text; the X-RateLimit fields come with retryafter.WithLegacyRateLimitFields and the IETF
// ones with retryafter.WithRateLimitFields; httprate.WithIncrement and WithRequestLimit are not
// read (use retryafter.WithCost).
//
// It is a module of its own, so that the users of package retryafter do not carry httprate.
package httpratestore

import (
	"context"
	"fmt"
	"hash/maphash"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-chi/httprate"
	"golang.org/x/time/rate"

	"github.com/retryafter/retryafter"
)

// shardCount is the number of independently locked parts of a Store's key space.
const shardCount = 64

// maxWindow is the longest window a [Store] accepts (about 36 years): the waits it
// computes reach two windows ahead and must fit a Duration.
const maxWindow = time.Duration(1 << 60)

// A Store is a [retryafter.Limiter] that counts requests the way github.com/go-chi/httprate
// does, on any [httprate.LimitCounter], and answers a refusal with the exact wait.
//
// Time is cut into windows of the window length, aligned to the wall clock
// (now.UTC().Truncate(windowLength)). A key's rate at an instant is httprate's sliding-window
// estimate: the previous window's count weighted by the part of that window still inside the
// sliding window, plus the current window's count,
//
//	rate = prev × (windowLength − elapsed) / windowLength + curr
//
// computed in float64 exactly as httprate computes it. A request of cost n is admitted when
// round(rate) + n ≤ requestLimit, rounding half away from zero ([math.Round]), and its cost is
// then added to the current window's count with IncrementBy; a refused request is not counted.
// These are httprate's own rules, so a Store and httprate's middleware on the same
// counter admit the same requests. Where httprate's sums overflow an int (a cost or a limit
// near the largest int), a Store refuses what does not fit: the current count plus n never
// passes requestLimit.
//
// Where httprate answers every refusal with the window length, a Store reports the
// earliest instant at which that estimate lets the request in, found over the integer
// nanoseconds of the current window, the next, and the one after (when both counts are zero):
// a request of the same cost at now + RetryAfter is admitted unless the key's counts changed
// meanwhile, and one at any earlier instant is not. That wait can be far shorter than the
// window, and it can be longer: the previous window's count still weighs on the next one.
//
// Differences from httprate's own middleware: windows are aligned to the wall clock even with
// httprate's in-memory counter, which httprate aligns instead to the instant its limiter was
// built (it aligns shared counters to the wall clock, as here); the clock is read once per
// request, where httprate reads it twice; the limit and the cost are the Store's and
// Decide's, not httprate.WithRequestLimit's and httprate.WithIncrement's.
//
// Instants may arrive out of order: concurrent requests read the clock before Decide takes
// its lock, so a reading from one window can reach Decide after another key has been counted
// in the next. httprate's in-memory counter keeps one current window for all keys: it reads
// zero counts for an older window, and an increment for a window that is neither its current
// one nor the one after clears every key's counts, after which keys that had spent their
// limit are admitted again. So a Store decides each request at the latest instant it
// has seen for that part of the key space, and never in a window before the latest one it has
// counted in (the present is at least that late); it moves to a new window only once the
// requests in flight in the old one are counted; and it lengthens the waits it reports by the
// lag, so that they stay exact from the caller's now (for a lag of up to two windows; longer
// lags lengthen them by two windows). The guard covers the calls of one Store: two that share
// an in-memory counter can still clear it for each other.
//
// The wall clock can also step back (a time daemon's correction, an operator). Readings then
// arrive behind the latest instant, as late requests do, and are decided at it, for as long as
// the step (time stands still for the Store) unless the Store takes the clock's new windows.
// It does when a run of readings behind, the first more than two windows behind, goes on for
// a window without a single reading decided at itself: requests late to the lock come between
// requests on time, while behind a step every reading is behind. So after a step of any size,
// requests are counted as usual again within two windows; a step of more than two windows
// makes httprate's in-memory counter clear every key once, as httprate's own middleware would,
// and two requests stalled for more than a window with none on time between them can too.
//
// A Store is safe for concurrent use. It serialises the read and the increment of a
// key within the process, with one lock per part of the key space where httprate holds one
// lock over all keys; it takes them all once per window, to move to the next. A counter
// shared between processes is read and incremented in two calls, as httprate does too, so
// concurrent replicas may together overshoot the limit slightly.
type Store struct {
	limit   int
	window  time.Duration
	policy  retryafter.Policy // limit per window, as a rate and a burst
	counter httprate.LimitCounter
	seed    maphash.Seed
	// curr is the start of the latest window Decide has counted in. It changes only with
	// every part locked, so it holds still for as long as any one part is locked.
	curr time.Time

	// A run of readings behind the instants they were decided at, the first more than two
	// windows behind, with none since that was not behind, is how a backward step of the clock
	// shows. stepped says whether one is on, and since is its first reading.
	stepMu  sync.Mutex
	since   time.Time
	stepped atomic.Bool

	parts [shardCount]part
}

// part is one independently locked part of a Store's key space, alone on its
// cache line.
type part struct {
	mu     sync.Mutex
	latest time.Time // the latest instant a Decide in this part was made at
	_      [64 - 32]byte
}

// New returns a [Store] that admits up to requestLimit requests per key
// in any window of windowLength, as httprate's sliding window estimates them, counting on
// counter: httprate's in-memory counter (httprate.NewLocalLimitCounter) when counter is nil,
// or any other [httprate.LimitCounter], such as one shared by several processes. It calls
// counter.Config(requestLimit, windowLength), as httprate does for the counters it is given.
//
// It panics if requestLimit is below 1 or windowLength is not positive or longer than 2^60 ns
// (about 36 years).
func New(requestLimit int, windowLength time.Duration, counter httprate.LimitCounter) *Store {
	if requestLimit < 1 {
		panic("httpratestore: request limit below 1")
	}
	if windowLength <= 0 {
		panic("httpratestore: window length not positive")
	}
	if windowLength > maxWindow {
		panic("httpratestore: window length longer than 2^60 ns")
	}
	if counter == nil {
		counter = httprate.NewLocalLimitCounter(windowLength)
	}
	counter.Config(requestLimit, windowLength)
	return &Store{
		limit:   requestLimit,
		window:  windowLength,
		policy:  retryafter.Policy{Limit: rate.Limit(float64(requestLimit) / windowLength.Seconds()), Burst: requestLimit},
		counter: counter,
		seed:    maphash.MakeSeed(),
	}
}

// Decide implements [retryafter.Limiter]. It reads key's counts for the window containing now and the one
// before, admits the request if httprate would, and then adds cost to the current window's
// count. A refused request is not counted; its RetryAfter is the exact wait until a request of
// the same cost would be admitted, or rate.InfDuration when cost exceeds the request limit.
// A now earlier than an instant already decided at (see [Store]) is decided at that
// later instant, and RetryAfter and Reset are still measured from now, lengthened by at most
// two windows.
//
// Limit is the request limit, Remaining the largest cost that
// would be admitted at now after this request (a request of cost n ≥ 1 is admitted exactly
// when n ≤ Remaining), and Reset the wait until Remaining is back to Limit if nothing more is
// counted. Policy is the request limit per window: a Burst of requestLimit and a Limit of
// requestLimit / windowLength per second, so that its window, Burst / Limit, is windowLength.
//
// An error from the counter is returned as is, with a zero Decision; the request has then not
// been counted. ctx is not used: [httprate.LimitCounter] takes none, so a shared counter
// bounds its own calls.
func (s *Store) Decide(_ context.Context, key string, cost int, now time.Time) (retryafter.Decision, error) {
	if cost < 0 {
		return retryafter.Decision{}, fmt.Errorf("%w: %d", retryafter.ErrNegativeCost, cost)
	}
	now = now.UTC()
	c, err := s.count(key, cost, now)
	if err != nil {
		return retryafter.Decision{}, err
	}
	// A request decided later than its reading is told waits from its reading, lengthened by
	// the lag, which is exact for a request that was late to the lock. Lengthen by two windows
	// at most: a reading later still is behind a step of the clock (see [Store.lock]), after
	// which the Store counts on the clock's new windows within a window, or it is a request
	// stalled that long, told to come back too soon rather than too late.
	elapsed, lag := c.at.Sub(c.window), min(c.at.Sub(now), 2*s.window)
	if !c.allowed {
		d := retryafter.Decision{RetryAfter: late(s.wait(c.prev, c.curr, cost, elapsed), lag)}
		s.fill(&d, c.prev, c.curr, elapsed, lag)
		return d, nil
	}
	d := retryafter.Decision{Allowed: true}
	s.fill(&d, c.prev, c.curr, elapsed, lag)
	return d, nil
}

// counts is what Store.count read of a key and did with a request.
type counts struct {
	at      time.Time // the instant the request was decided at
	window  time.Time // the start of the window containing at
	prev    int       // the count of the window before
	curr    int       // the count of the window, the request's cost included if it was allowed
	allowed bool
}

// count reads key's counts at the instant now is decided at and, if they admit cost, adds cost
// to the current window's. It holds key's part of the key space locked from the read to the
// increment, and unlocks it however the counter returns: the counter is code of the user's,
// and a panic of its own must reach the caller without leaving the part locked.
func (s *Store) count(key string, cost int, now time.Time) (counts, error) {
	p := &s.parts[maphash.String(s.seed, key)%shardCount]
	at, window := s.lock(p, now)
	defer p.mu.Unlock()
	curr, prev, err := s.counter.Get(key, window, window.Add(-s.window))
	if err != nil {
		return counts{}, err
	}
	c := counts{at: at, window: window, prev: prev, curr: curr}
	if !s.admits(prev, curr, cost, at.Sub(window)) {
		return c, nil
	}
	if cost > 0 { // a cost of 0 is a peek: nothing to count
		if err := s.counter.IncrementBy(key, window, cost); err != nil {
			return counts{}, err
		}
	}
	c.curr += cost
	c.allowed = true
	return c, nil
}

// lock locks part p and returns, with it held, the instant a request read at now is decided at
// and the start of its window.
//
// Concurrent requests read the clock before they take the lock, so they can arrive out of
// order. httprate's in-memory counter keeps one window for all keys and clears them all when
// given an older one, so a request is decided at the latest instant its part has seen and
// never in a window before the latest one counted in. Moving to a later window waits for the
// requests in flight in the current one (it locks every part), so that no call for an older
// window reaches the counter after one for a newer window.
//
// A clock that steps back looks at first like a request late to the lock, and freezes the
// instants decided at until it has caught up. Once readings behind have gone on for a window
// (see [Store.behind]), the Store takes the clock's new windows (see [Store.rebase]).
// It calls no code of the user's.
func (s *Store) lock(p *part, now time.Time) (at, window time.Time) {
	p.mu.Lock()
	for {
		at = now
		if at.Before(p.latest) {
			at = p.latest
		}
		window = at.Truncate(s.window)
		if window.After(s.curr) {
			p.mu.Unlock()
			s.advance(window)
			p.mu.Lock()
			continue
		}
		if window.Before(s.curr) {
			at, window = s.curr, s.curr
		}
		if at.Equal(now) {
			if s.stepped.Load() {
				s.endStep()
			}
			break
		}
		since, ok := s.behind(now, at.Sub(now))
		if !ok {
			break
		}
		p.mu.Unlock()
		s.rebase(now.Truncate(s.window), since)
		p.mu.Lock()
	}
	p.latest = at
	return at, window
}

// behind records a reading now, decided lag later than itself, and reports whether it shows
// that the clock has stepped back: it comes a window or more after the first reading of a run
// that began more than two windows behind, it is itself more than a window behind, and no
// reading since the run began was decided at itself. If so, it returns the run's first
// reading.
//
// Behind a step of the clock every reading is behind until the clock has caught up: a step of
// two windows or less is caught up within them, and a longer one is taken within a window of
// readings. A request stalled for more than two windows starts a run too, but the next request
// on time ends it.
func (s *Store) behind(now time.Time, lag time.Duration) (time.Time, bool) {
	s.stepMu.Lock()
	defer s.stepMu.Unlock()
	if !s.stepped.Load() {
		if lag > 2*s.window {
			s.since = now
			s.stepped.Store(true)
		}
		return time.Time{}, false
	}
	return s.since, lag > s.window && now.Sub(s.since) >= s.window
}

// endStep ends a run of readings behind: one was decided at itself.
func (s *Store) endStep() {
	s.stepMu.Lock()
	defer s.stepMu.Unlock()
	s.stepped.Store(false)
}

// rebase makes window, older than the current one, the current one, after the clock has
// stepped back, if the run of readings behind that began at since is still on: it locks every
// part, in order, and forgets the latest instant each has seen. httprate's in-memory counter
// then clears every key once, as it would under httprate's own middleware.
func (s *Store) rebase(window, since time.Time) {
	for i := range s.parts {
		s.parts[i].mu.Lock()
	}
	s.stepMu.Lock()
	if s.stepped.Load() && s.since.Equal(since) {
		s.curr = window
		for i := range s.parts {
			s.parts[i].latest = time.Time{}
		}
		s.stepped.Store(false)
	}
	s.stepMu.Unlock()
	for i := range s.parts {
		s.parts[i].mu.Unlock()
	}
}

// advance makes window the current one, if it is later than the current one, once no Decide
// is between its read and its increment: it locks every part, in order.
func (s *Store) advance(window time.Time) {
	for i := range s.parts {
		s.parts[i].mu.Lock()
	}
	if window.After(s.curr) {
		s.curr = window
	}
	for i := range s.parts {
		s.parts[i].mu.Unlock()
	}
}

// estimate returns httprate's sliding-window rate, rounded as httprate rounds it, for counts
// prev and curr at elapsed into the current window, held to 0 to math.MaxInt: counts near the
// largest int add up to more than it. The expression is httprate's own, term for term, so that
// it rounds the same way; the conversion to float64 keeps any compiler from fusing its
// operations.
func (s *Store) estimate(prev, curr int, elapsed time.Duration) int {
	rate := float64(float64(prev)*(float64(s.window)-float64(elapsed))/float64(s.window)) + float64(curr)
	switch r := math.Round(rate); {
	case r >= math.MaxInt: // the constant rounds to 2^63 on 64-bit platforms, which does not fit
		return math.MaxInt
	case r > 0:
		return int(r)
	}
	return 0
}

// room returns the largest cost httprate admits at elapsed into the current window of counts
// prev and curr, below 0 if none. It is httprate's limit − estimate, computed without
// overflow, and never more than the current count leaves: a float64 holds counts above 2^53
// only to a few hundred, and the count plus the cost must fit the limit, and so an int.
func (s *Store) room(prev, curr int, elapsed time.Duration) int {
	return min(s.limit-s.estimate(prev, curr, elapsed), s.limit-max(curr, 0))
}

// admits reports whether httprate admits a request of cost at elapsed into the current window
// of counts prev and curr.
func (s *Store) admits(prev, curr, cost int, elapsed time.Duration) bool {
	return cost <= s.room(prev, curr, elapsed)
}

// firstAdmit returns the least elapsed time in [from, window) at which a request of cost is
// admitted on counts prev and curr, or the window length when there is none.
//
// The estimate does not grow with elapsed time (every float64 operation in it is monotone), so
// the instants that admit follow those that do not, and a search over the nanoseconds finds the
// first exactly. The search starts where the estimate, taken as a real number, crosses the
// threshold: float64 rounding moves the crossing by a few nanoseconds at most, so it takes a
// handful of evaluations, not the forty or so of a plain bisection of a minute.
func (s *Store) firstAdmit(prev, curr, cost int, from time.Duration) time.Duration {
	lo, hi := from, s.window-1
	if !s.admits(prev, curr, cost, hi) {
		return s.window
	}
	if s.admits(prev, curr, cost, lo) || prev <= 0 {
		return lo // with no previous count the estimate is the same all window long
	}
	// The real estimate is below limit − cost + 0.5 once
	// elapsed > window − (limit − cost + 0.5 − curr) × window / prev.
	w := float64(s.window)
	guess := w - (float64(s.limit-cost-curr)+0.5)*w/float64(prev)
	g := hi
	if guess <= float64(lo+1) {
		g = lo + 1
	} else if guess < float64(hi) {
		g = time.Duration(guess)
	}
	return s.search(prev, curr, cost, lo, hi, g)
}

// search returns the least elapsed time in (lo, hi] at which a request of cost is admitted on
// counts prev and curr, given that it is not at lo and is at hi. It gallops from guess, in
// (lo, hi], to a bracket that it then halves; the answer does not depend on the guess, only
// the number of steps does.
func (s *Store) search(prev, curr, cost int, lo, hi, guess time.Duration) time.Duration {
	g := guess
	if s.admits(prev, curr, cost, g) {
		hi = g
		for step := time.Duration(1); g-step > lo; step *= 2 {
			if !s.admits(prev, curr, cost, g-step) {
				lo = g - step
				break
			}
			hi = g - step
		}
	} else {
		lo = g
		for step := time.Duration(1); g+step < hi; step *= 2 {
			if s.admits(prev, curr, cost, g+step) {
				hi = g + step
				break
			}
			lo = g + step
		}
	}
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if s.admits(prev, curr, cost, mid) {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi
}

// wait returns how long after elapsed into the current window, of counts prev and curr, a
// request of cost is first admitted, if nothing more is counted: within this window as the
// previous one's weight decays, in the next window (where curr becomes the previous count), or
// at the start of the one after (where both counts are zero); rate.InfDuration if never.
func (s *Store) wait(prev, curr, cost int, elapsed time.Duration) time.Duration {
	if x := s.firstAdmit(prev, curr, cost, elapsed); x < s.window {
		return x - elapsed
	}
	if x := s.firstAdmit(curr, 0, cost, 0); x < s.window {
		return s.window - elapsed + x
	}
	if s.admits(0, 0, cost, 0) {
		return 2*s.window - elapsed
	}
	return rate.InfDuration
}

// fill sets d's Limit, Remaining and Reset for counts prev and curr at elapsed into the
// current window, for a caller whose clock reading is lag before that instant.
func (s *Store) fill(d *retryafter.Decision, prev, curr int, elapsed, lag time.Duration) {
	d.Limit = s.limit
	d.Policy = s.policy
	d.Remaining = max(0, s.room(prev, curr, elapsed))
	if d.Remaining < s.limit {
		d.Reset = late(s.wait(prev, curr, s.limit, elapsed), lag)
	}
}

// late returns wait lengthened by lag, keeping 0 and rate.InfDuration and saturating below the
// latter.
func late(wait, lag time.Duration) time.Duration {
	if lag == 0 || wait <= 0 || wait >= rate.InfDuration {
		return wait
	}
	return min(wait+lag, rate.InfDuration-1)
}
