package retryafter

import (
	"context"
	"fmt"
	"hash/maphash"
	"math"
	"time"

	"github.com/retryafter/retryafter/edge"
	"github.com/retryafter/retryafter/internal/clock"
	"golang.org/x/time/rate"
)

// A Limiter decides, for one request, whether the client named by key may proceed at the instant
// now, and if not, how long it must wait: [edge.Limiter], which says the contract that every
// Limiter of this repository keeps and package limitertest checks. [TokenBucket] counts in
// memory, package httpratestore on any counter of go-chi/httprate, package redisstore in Redis,
// and the middleware treats them alike.
type Limiter = edge.Limiter

// A Decision is a [Limiter]'s answer for one request: [edge.Decision].
type Decision = edge.Decision

// A Policy is a named token-bucket limit: [edge.Policy].
type Policy = edge.Policy

// ErrNegativeCost is the error, wrapped, that a [Limiter] returns for a cost below 0.
var ErrNegativeCost = edge.ErrNegativeCost

// A TokenBucket is a [Limiter] that gives every key its own golang.org/x/time/rate token
// bucket, held in memory: of the same rate and burst, or of the key's own policy (see
// [WithPolicyFunc]).
//
// It keeps every key until it needs the room, so that a client that comes back finds its
// bucket; the bytes it holds are bounded (see [WithMaxMemory]), and at the bound the keys whose
// bucket has refilled, which are the same as keys never seen, make room for new ones, without a
// goroutine. A TokenBucket is safe for concurrent use.
type TokenBucket struct {
	policy   Policy
	policyOf func(key string) Policy // nil: every key has policy
	seed     maphash.Seed
	steps    clock.Steps // the steps back of the clock (see clock.Line.At)
	parts    [partCount]table
}

// partCount is the number of independently locked parts of a TokenBucket's keys.
const partCount = 64

// defaultMaxMemory is the bound on the bytes a TokenBucket holds when no WithMaxMemory is given.
const defaultMaxMemory = 192 << 20

// A TokenBucketOption configures [NewTokenBucket].
type TokenBucketOption func(*bucketConfig)

type bucketConfig struct {
	maxMemory int
	policyOf  func(string) Policy
}

// NewTokenBucket returns a [TokenBucket] that lets each key make requests at limit per second
// with bursts of up to burst. A limit of [rate.Inf] admits everything, and so does +Inf (from
// rate.Limit(n / d) with d = 0), which is taken for rate.Inf; a limit of 0 (or -0) admits each
// key's first burst requests and refuses the rest with no Retry-After. It panics if limit is not
// a number at least 0 (a NaN, from rate.Limit(n / d) with n = d = 0, would admit everything) or
// burst is below 1. A burst above 2^53, which x/time/rate cannot count exactly, is 2^53.
func NewTokenBucket(limit rate.Limit, burst int, opts ...TokenBucketOption) *TokenBucket {
	checkPolicy(Policy{Limit: limit, Burst: burst})
	limit, burst = unlimited(limit), min(burst, maxBurst)
	c := bucketConfig{maxMemory: defaultMaxMemory}
	for _, o := range opts {
		if o == nil {
			panic("retryafter: nil TokenBucketOption")
		}
		o(&c)
	}
	b := &TokenBucket{
		policy:   Policy{Limit: limit, Burst: burst},
		policyOf: c.policyOf,
		seed:     maphash.MakeSeed(),
	}
	for i := range b.parts {
		b.parts[i].init(c.maxMemory/partCount, &b.steps)
	}
	return b
}

// unlimited returns limit, rate.Inf for a limit above it, or 0 for -0. x/time/rate takes only
// rate.Inf for no limit: at +Inf it counts 0·Inf tokens for no time, a NaN, which admits
// everything for good while the bucket reports no tokens left. A limit of -0 (from
// rate.Limit(0 / -d)) is 0 to x/time/rate but turns this package's divisions by it to -Inf.
func unlimited(limit rate.Limit) rate.Limit {
	if limit == 0 {
		return 0 // not -0
	}
	return min(limit, rate.Inf)
}

// checkPolicy panics if p's limit is not a number at least 0 or its burst is below 1.
func checkPolicy(p Policy) {
	if !(p.Limit >= 0) {
		panic("retryafter: rate limit is not a number at least 0")
	}
	if p.Burst < 1 {
		panic("retryafter: burst below 1")
	}
}

// WithMaxMemory bounds the bytes a [TokenBucket] holds, whatever its key function returns, in
// upper estimates of what the allocator hands out: a key of up to 16 bytes (an IPv4 address)
// with its bucket, its share of the map and its place in the heap counts as 195 bytes, a longer
// key its length more, rounded up. The default is 192 MiB, about a million IPv4 clients.
//
// The bucket keeps every key until a new one does not fit. Then keys whose bucket has refilled
// make room; when none has, the new key is refused with 429 and a Retry-After of when the first
// may have, so that no client over its limit is ever admitted to make room for another. That
// Retry-After is the one answer of the package that is an estimate rather than exact: the held
// key it counts on may spend again meanwhile, or another new key may take its place first. A
// held key given tokens back (Release, a negative Charge) or put on a faster policy makes room
// only from the instant it would have refilled without that. The keys are split in 64
// independently locked parts of bytes/64 each, so a new key can meet a full part a little
// before the whole is full. It panics if bytes is below 16 KiB.
func WithMaxMemory(bytes int) TokenBucketOption {
	if bytes < 16<<10 {
		panic("retryafter: WithMaxMemory below 16 KiB")
	}
	return func(c *bucketConfig) { c.maxMemory = bytes }
}

// WithPolicyFunc makes a TokenBucket ask fn for the policy of each key, at each decision, so
// that a key's plan (free, pro, a customer's contract) can change while the server runs.
//
// A key's new policy applies from the decision that finds it on, at its rate, keeping the tokens
// the key holds, capped at the new burst: an upgrade gives no fresh burst for what was spent,
// and a downgrade keeps at most the new burst. A zero Policy (or a Limit or Burst of 0) means
// the bucket's own limit or burst, and so does a limit that is negative or not a number, or a
// negative burst; a limit above [rate.Inf] (+Inf) is rate.Inf, and time spent on it counts at
// the key's rate before it. A debt (see [TokenBucket.Charge]) that would take the new rate more
// than 100 years to repay is forgiven down to that. fn runs under no lock, on the request's
// goroutine, and must be safe for concurrent use and cheap (a map lookup): it is called on every
// decision.
func WithPolicyFunc(fn func(key string) Policy) TokenBucketOption {
	if fn == nil {
		panic("retryafter: WithPolicyFunc(nil)")
	}
	return func(c *bucketConfig) { c.policyOf = fn }
}

// policyFor returns the policy of key.
func (b *TokenBucket) policyFor(key string) Policy {
	if b.policyOf == nil {
		return b.policy
	}
	return b.askPolicy(key)
}

// askPolicy returns the policy that b's policy function gives key, with b's own for what it
// leaves out.
func (b *TokenBucket) askPolicy(key string) Policy {
	p := b.policyOf(key)
	if !(p.Limit > 0) {
		p.Limit = b.policy.Limit
	}
	p.Limit = unlimited(p.Limit)
	if p.Burst <= 0 {
		p.Burst = b.policy.Burst
	}
	p.Burst = min(p.Burst, maxBurst)
	return p
}

// maxBurst is the largest burst a TokenBucket counts exactly: x/time/rate keeps tokens in a
// float64, which holds every integer up to 2^53 but not all above, so that a larger burst could
// admit a request more than it holds. A larger burst is taken as 2^53, more than any key spends.
const maxBurst = min(1<<53, math.MaxInt)

// slack is how far past an instant a reservation may land and still count as due at that
// instant. x/time/rate keeps tokens as a float64 and converts durations with truncation, so a
// true wait of exactly 60 s at rate.Every(time.Minute) can come back as 59.999999999 s, and the
// bucket at that instant as 0.99999999 tokens: without this slack a client that waited the
// whole-second Retry-After would be refused by a nanosecond. One microsecond is orders of
// magnitude above that error and orders below anything a client can observe.
const slack = time.Microsecond

// settle applies the slack rule to the delay of a reservation: due within the slack, it is
// admitted; otherwise the wait is the delay less the slack, which a request that comes back
// then finds due within the slack, but for the float arithmetic (see enough).
func settle(delay time.Duration) (admitted bool, wait time.Duration) {
	switch {
	case delay <= slack:
		return true, 0
	case delay >= rate.InfDuration:
		return false, rate.InfDuration
	}
	return false, delay - slack
}

// enough returns wait, a refusal's of cost from a bucket of pol that holds tokens at the
// instant it last counted, or longer if x/time/rate would still refuse cost wait later. Its
// float arithmetic, done here as it does it (advance, then reserveN), can leave the reservation
// then due a little after the slack: by a nanosecond, or, for a bucket that counts or owes many
// tokens, by more than the smallest step its tokens can take (tens of nanoseconds for one
// decades in debt); so the wait grows by what is missing, or by a step that doubles. So a
// request that comes back after the wait it was told is admitted.
func enough(pol Policy, cost int, tokens float64, wait time.Duration) time.Duration {
	for step := time.Duration(1); wait < rate.InfDuration; step *= 2 {
		then := min(tokens+wait.Seconds()*float64(pol.Limit), float64(pol.Burst))
		late := reserveWait(pol, cost, then)
		if late <= slack {
			break
		}
		wait = min(wait+max(late-slack, step), rate.InfDuration)
	}
	return wait
}

// Decide implements [Limiter]: it reserves cost tokens from key's bucket at now, and if the
// reservation is not due within now (plus a microsecond that absorbs the float arithmetic of
// x/time/rate), cancels it at now, so that the refusal costs nothing, and reports its delay:
// the wait after which the key's next decision, of the same cost, is admitted, checked with
// x/time/rate's own arithmetic. (A refusal of the key in between counts the bucket again from
// its own instant, which can move that instant by nanoseconds: a Retry-After's whole seconds,
// rounded up, hold them.)
//
// Instants may arrive out of order (concurrent requests read the clock before Decide takes its
// lock); a now earlier than one already decided for a key of the same part is decided at that
// later instant, and the waits reported are still measured from now. So a bucket's clock never
// runs backwards, which would credit the same time twice (golang/go#65508).
//
// A clock without monotonic readings (see [WithClock]) may step back, by any step: a now more
// than a second behind is decided at the latest instant, crediting nothing, and once the
// readings of the clock's new line have run on for 5 s, every bucket counts on from them,
// neither frozen nor refilled for the step (package internal/clock says how a stale reading is told apart).
//
// The Decision also carries the key's quota after this request and its Policy:
//   - Limit is the burst, Remaining the whole tokens left (the largest cost Decide would admit
//     at now, never negative: a refusal reports what it found), and Reset how long until the
//     bucket is full again, such that a request for the whole burst at now + Reset is
//     admitted; 0 when it is full, rate.InfDuration when the rate is 0 and it is not. Reset is
//     never shorter than RetryAfter, except that a cost above the burst has a RetryAfter of
//     rate.InfDuration and the bucket's own Reset.
//   - A new key refused because the bucket is full (see [WithMaxMemory]) has Remaining 0 and a
//     Reset equal to its RetryAfter, after which it starts with a full bucket.
//   - With a limit of [rate.Inf], Remaining is always the burst and Reset 0.
func (b *TokenBucket) Decide(_ context.Context, key string, cost int, now time.Time) (d Decision, err error) {
	if cost < 0 {
		return Decision{}, fmt.Errorf("%w: %d", ErrNegativeCost, cost)
	}
	b.decide(key, cost, now, 0, &d)
	return d, nil
}

// Reserve implements [edge.Reserver]: it decides as Decide does, but a request whose wait is at
// most maxWait is admitted at its place, as x/time/rate's ReserveN reserves it, with RetryAfter
// the wait until that place.
func (b *TokenBucket) Reserve(_ context.Context, key string, cost int, now time.Time, maxWait time.Duration) (d Decision, err error) {
	if cost < 0 {
		return Decision{}, fmt.Errorf("%w: %d", ErrNegativeCost, cost)
	}
	b.decide(key, cost, now, max(maxWait, 0), &d)
	return d, nil
}

// Release implements [edge.Reserver]: it gives cost back to key's bucket at now, as Charge of
// -cost does.
func (b *TokenBucket) Release(ctx context.Context, key string, cost int, now time.Time) error {
	return b.Charge(ctx, key, -cost, now)
}

// Allow implements [edge.Allower]: it decides as Decide does, and returns the Decision's
// RetryAfter and Policy, leaving out Remaining and Reset, which cost about as much again as the
// decision to fill.
func (b *TokenBucket) Allow(_ context.Context, key string, cost int, now time.Time) (wait time.Duration, p Policy, err error) {
	if cost < 0 {
		return 0, Policy{}, fmt.Errorf("%w: %d", ErrNegativeCost, cost)
	}
	var d Decision
	b.decide(key, cost, now, noQuota, &d)
	return d.RetryAfter, d.Policy, nil
}

// noQuota is decide's maxWait for Allow: no later place, and no quota.
const noQuota time.Duration = -1

// decide is Decide for a cost of 0 or more: the one decision of a single bucket, under one
// lock, giving a request whose wait is at most maxWait its later place, with the quota unless
// maxWait is noQuota (one argument for both, so that Allow's path carries no more).
func (b *TokenBucket) decide(key string, cost int, now time.Time, maxWait time.Duration, d *Decision) {
	withQuota := maxWait != noQuota
	pol := b.policyFor(key)
	d.Policy, d.Limit = pol, pol.Burst
	if pol.Limit == rate.Inf {
		d.Allowed, d.Remaining = true, pol.Burst
		return
	}
	t := b.part(key)
	t.mu.Lock() // no code of a user's runs under it: only the table's and x/time/rate's
	at, late := t.At(now)
	// bucket's steps, here in line: a call would carry pol and at again.
	lim, full := t.keys[key], time.Duration(0)
	switch {
	case lim == nil:
		lim, full = t.add(key, at, pol.Limit, pol.Burst, nil)
	case b.policyOf != nil:
		replan(lim, pol, at)
	}
	switch {
	case lim == nil:
		// Once a key makes room, the key starts with a full bucket, which a cost above its
		// burst never fits.
		d.RetryAfter, d.Reset = full, full
		if cost > pol.Burst {
			d.RetryAfter = rate.InfDuration
		}
	case lim.AllowN(at, cost):
		d.Allowed = true
		if withQuota {
			quota(d, pol, lim.TokensAt(at))
		}
	default:
		// A refusal is counted from the instant decided, as an admission is, rather than in one
		// step from the last (float64 steps differ in the last bits): its quota, and the wait
		// that enough checks with x/time/rate's own arithmetic from there.
		lim.SetLimitAt(at, pol.Limit)
		var tokens float64
		d.Allowed, d.RetryAfter, tokens = notAtOnce(lim, pol, cost, at, maxWait-late.Lag)
		if withQuota {
			quota(d, pol, tokens)
		}
	}
	t.mu.Unlock()
	lateBy(d, late)
}

// notAtOnce decides a request of cost that lim, a bucket of pol, did not admit at once at at:
// by the wait a reservation would have, which within the slack, or within maxWait, admits and
// spends it (wait is then 0, or the wait until its place). A refusal reserves nothing, so there
// is nothing to cancel, and leaves lim as a refused AllowN does. It returns the tokens left.
func notAtOnce(lim *rate.Limiter, pol Policy, cost int, at time.Time, maxWait time.Duration) (admitted bool, wait time.Duration, tokens float64) {
	tokens = lim.TokensAt(at)
	if admitted, wait = settle(reserveWait(pol, cost, tokens)); !admitted {
		wait = enough(pol, cost, tokens, wait) // the wait Decide tells, which maxWait is held to
	}
	if admitted || wait <= maxWait {
		lim.ReserveN(at, cost)
		tokens = lim.TokensAt(at)
		admitted = true
	}
	return admitted, wait, tokens
}

// part returns the part of b that holds key.
func (b *TokenBucket) part(key string) *table { return &b.parts[b.partOf(key)] }

// partOf returns the index of the part of b that holds key.
func (b *TokenBucket) partOf(key string) uint64 { return maphash.String(b.seed, key) % partCount }

// bucket returns the bucket of key in t, locked, on the policy pol: a new one, made on it, or nil
// when there is no room for it and how long until there may be (see table.add).
func (b *TokenBucket) bucket(t *table, key string, pol Policy, at time.Time, keep []*rate.Limiter) (*rate.Limiter, time.Duration) {
	lim := t.keys[key]
	if lim == nil {
		return t.add(key, at, pol.Limit, pol.Burst, keep)
	}
	if b.policyOf != nil {
		replan(lim, pol, at)
	}
	return lim, 0
}

// replan puts lim on the policy pol from at, if it is not on it: its tokens stay, at the new
// rate, capped at the new burst, and a debt forgiven down to what the new rate repays in
// maxDebt (see forgive).
func replan(lim *rate.Limiter, pol Policy, at time.Time) {
	if lim.Limit() != pol.Limit || lim.Burst() != pol.Burst {
		lim.SetLimitAt(at, pol.Limit)
		lim.SetBurstAt(at, pol.Burst)
		forgive(lim, pol, at)
	}
}

// forgive forgives what of lim's debt at at would take pol's rate longer than maxDebt to repay,
// as charge does when it is charged: a debt run up at another rate (or at a rate of 0, which
// never repays) could take 2^63 ns, which x/time/rate's wait wraps into a negative one, which
// admits. The debt is given back in steps that an int holds.
func forgive(lim *rate.Limiter, pol Policy, at time.Time) {
	if !(pol.Limit > 0) || pol.Limit == rate.Inf {
		return
	}
	for {
		excess := -(lim.TokensAt(at) + float64(pol.Limit)*maxDebt.Seconds())
		if excess <= 0 {
			return
		}
		lim.ReserveN(at, -int(min(math.Ceil(excess), math.MaxInt/2))) // a negative cost gives back
	}
}

// lateBy tells d's waits, measured from the instant d was decided at, from the caller's now, as
// late says (see clock.Late). An admitted request's RetryAfter is its place, which the server
// waits out on its own timer: the lag alone.
func lateBy(d *Decision, late clock.Late) {
	if late == (clock.Late{}) {
		return
	}
	if d.Allowed {
		d.RetryAfter = clock.Late{Lag: late.Lag}.Wait(d.RetryAfter)
	} else {
		d.RetryAfter = late.Wait(d.RetryAfter)
	}
	d.Reset = late.Wait(d.Reset)
}

// quota sets d's Limit, Remaining, Reset and Policy from the tokens left in a bucket of pol.
func quota(d *Decision, pol Policy, tokens float64) {
	d.Policy, d.Limit = pol, pol.Burst
	d.Remaining = remaining(pol, tokens)
	d.Reset = refill(pol.Limit, float64(pol.Burst)-tokens)
	if d.Reset >= inexact && d.Reset < rate.InfDuration {
		d.Reset = enough(pol, pol.Burst, tokens, d.Reset) // a float64 step of it is over the slack
	}
	if d.RetryAfter != rate.InfDuration {
		d.Reset = max(d.Reset, d.RetryAfter)
	}
}

// inexact is the refill time from which a float64 of it, in nanoseconds, steps by more than
// half the slack: below, refill's single division is within the slack of x/time/rate's count.
const inexact = 1 << 61

// remaining returns exactly the largest cost that decide admits at once from a bucket of pol
// holding tokens, the tokens the slack lends included, or 0 when it admits none: the admission
// rule itself (admits) asked from a first guess in a few steps, whatever the rate and burst.
func remaining(pol Policy, tokens float64) int {
	return largest(pol.Burst, guessRemaining(pol, tokens), func(n int) bool { return admits(pol, n, tokens) })
}

// guessRemaining returns a first guess of remaining: the tokens and what the slack lends (a
// wait truncated to the slack is under one nanosecond more), within a few float64 steps of the
// answer. A guess that reaches the burst is the burst: a float64 of the largest ints is past
// them.
func guessRemaining(pol Policy, tokens float64) int {
	guess := math.Floor(tokens + float64(pol.Limit)*(slack+1).Seconds())
	if guess >= float64(pol.Burst) {
		return pol.Burst
	}
	return int(max(0, guess))
}

// largest returns the largest n from 0 to most for which ok holds, 0 when none does, ok holding
// up to some n and not above it. From guess it takes steps that double until one passes the
// answer, then halve: O(log d) calls of ok, d the distance from guess to the answer.
func largest(most, guess int, ok func(int) bool) int {
	guess = min(max(guess, 0), most)
	lo, hi := guess, most // ok(lo) or lo is 0, and the answer is from lo to hi
	if !ok(guess) {
		lo, hi = 0, guess-1
		for step := 1; hi > 0; step = doubled(step) {
			if n := max(0, hi+1-step); ok(n) {
				lo = n
				break
			} else {
				hi = n - 1
			}
		}
	} else {
		for step := 1; lo < hi; step = doubled(step) {
			if n := lo + min(step, hi-lo); ok(n) {
				lo = n
			} else {
				hi = n - 1
				break
			}
		}
	}
	for lo < hi {
		if mid := hi - (hi-lo)/2; ok(mid) {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return max(lo, 0)
}

// doubled returns step twice, short of overflowing.
func doubled(step int) int { return min(step, math.MaxInt/2) * 2 }

// admits reports whether a bucket of pol holding tokens admits a cost of n: x/time/rate's
// reservation is due at once, or within the slack.
func admits(pol Policy, n int, tokens float64) bool {
	return reserveWait(pol, n, tokens) <= slack
}

// reserveWait returns the delay of x/time/rate's ReserveN(at, n) on a bucket of pol, not of
// rate.Inf, that holds tokens at at, computed as x/time/rate computes it: 0 when it holds n,
// and rate.InfDuration when n is above the burst or the wait does not fit a Duration.
func reserveWait(pol Policy, n int, tokens float64) time.Duration {
	if n > pol.Burst {
		return rate.InfDuration
	}
	left := tokens - float64(n)
	if left >= 0 {
		return 0
	}
	wait := (-left / float64(pol.Limit)) * float64(time.Second) // +Inf at a rate of 0
	if wait >= float64(math.MaxInt64) {                         // 2^63 does not fit
		return rate.InfDuration
	}
	return time.Duration(wait)
}

// maxDebt is the longest a debt may take to repay: far longer than any client waits, and far
// from the 292 years at which a wait no longer fits a Duration.
const maxDebt = 100 * 365 * 24 * time.Hour

// Charge implements [Charger]: it spends cost tokens from key's bucket at now whether or not
// it holds them, so that the bucket may go into debt (one that would take more than 100 years
// to repay is forgiven down to that), or with a negative cost gives tokens back, never beyond
// the burst. It fails only when key is new and there is no room for it (see [WithMaxMemory]).
// Decide then refuses key, whatever its cost, until the debt is repaid, with the exact wait.
func (b *TokenBucket) Charge(_ context.Context, key string, cost int, now time.Time) error {
	pol := b.policyFor(key)
	if cost == 0 || pol.Limit == rate.Inf {
		return nil
	}
	t := b.part(key)
	t.mu.Lock()
	defer t.mu.Unlock()
	at, _ := t.At(now)
	if cost < 0 && t.keys[key] == nil {
		return nil // a key not held has a full bucket: nothing to give back
	}
	lim, _ := b.bucket(t, key, pol, at, nil)
	if lim == nil {
		return fmt.Errorf("retryafter: cannot charge %d to a new key: the bucket is full", cost)
	}
	charge(lim, pol, cost, at)
	return nil
}

// charge spends cost from lim, a bucket of pol, at at, into debt if need be: a debt whose
// repayment does not fit a Duration would wrap x/time/rate's wait into a negative one, which
// admits, so beyond maxDebt it is forgiven down to that (at a rate of 0 a debt is never repaid,
// and never wraps). A negative cost gives tokens back, up to the burst.
func charge(lim *rate.Limiter, pol Policy, cost int, at time.Time) {
	if pol.Limit > 0 && cost > 0 {
		if most := lim.TokensAt(at) + float64(pol.Limit)*maxDebt.Seconds(); float64(cost) > most {
			cost = int(max(0, most))
		}
	}
	// ReserveN takes at most the burst: it is raised for the one reservation, which may go into
	// debt, then set back; the tokens stay as the reservation left them.
	lim.SetBurstAt(at, max(cost, pol.Burst))
	lim.ReserveN(at, cost)
	lim.SetBurstAt(at, pol.Burst)
}

// Len returns the number of keys b holds state for.
func (b *TokenBucket) Len() int {
	n := 0
	for i := range b.parts {
		t := &b.parts[i]
		t.mu.Lock()
		n += len(t.keys)
		t.mu.Unlock()
	}
	return n
}
