package retryafter

import (
	"context"
	"fmt"
	"math"
	"time"

	"golang.org/x/time/rate"
)

// slack is how far past an instant a reservation may land and still count as due at that
// instant. x/time/rate keeps tokens as a float64 and converts durations with truncation, so a
// true wait of exactly 60 s at rate.Every(time.Minute) can come back as 59.999999999 s, and the
// bucket at that instant as 0.99999999 tokens: without this slack a client that waited the
// whole-second Retry-After would be refused by a nanosecond. One microsecond is orders of
// magnitude above that error and orders below anything a client can observe.
const slack = time.Microsecond

// A TokenBucket is a [Limiter] that gives every key its own golang.org/x/time/rate token bucket
// of the same rate and burst, held in memory.
//
// Its table keeps every key until it needs the room, so that a client that comes back finds its
// bucket; the bytes it holds are bounded (see [WithMaxMemory]), and at the bound the keys whose
// bucket has refilled, which are indistinguishable from keys never seen, make room for new ones,
// without any goroutine. A TokenBucket is safe for concurrent use.
type TokenBucket struct {
	limit  rate.Limit
	burst  int
	seed   hashSeed
	budget int // bytes each part holds at most
	// The allocator puts an 8-byte header before an object of this size that holds pointers:
	// this pads the parts to the start of a cache line (TestPartsStartOnACacheLine checks it).
	// A part's lock and its latest instant, the words every decision writes, then share a line,
	// and with one key hot on several cores one line moves between them for each decision, not
	// two: in four sets of interleaved rounds of BenchmarkHotKey (in _benchmarks), the median
	// wall time was 1.02x to 1.06x the baseline's aligned, against 1.03x to 1.18x unaligned.
	_     [8]byte
	parts [shardCount]part
}

// A TokenBucketOption configures [NewTokenBucket].
type TokenBucketOption func(*bucketConfig)

type bucketConfig struct {
	maxMemory int
}

// NewTokenBucket returns a [TokenBucket] that lets each key make requests at limit per second
// with bursts of up to burst. A limit of [rate.Inf] admits everything; a limit of 0 admits each
// key's first burst requests and refuses the rest with no Retry-After. It panics if limit is
// not a number at least 0 (a NaN, from rate.Limit(n / d) with n = d = 0, would admit
// everything) or burst is below 1.
func NewTokenBucket(limit rate.Limit, burst int, opts ...TokenBucketOption) *TokenBucket {
	if !(limit >= 0) {
		panic("retryafter: rate limit is not a number at least 0")
	}
	if burst < 1 {
		panic("retryafter: burst below 1")
	}
	c := bucketConfig{maxMemory: defaultMaxMemory}
	for _, o := range opts {
		if o == nil {
			panic("retryafter: nil TokenBucketOption")
		}
		o(&c)
	}
	b := &TokenBucket{
		limit:  limit,
		burst:  burst,
		seed:   newHashSeed(),
		budget: c.maxMemory / shardCount,
	}
	for i := range b.parts {
		b.parts[i].init()
	}
	return b
}

// Decide implements [Limiter]: it reserves cost tokens from key's bucket at now, and if the
// reservation is not due within now (plus a microsecond that absorbs the float arithmetic of
// x/time/rate), cancels it at now, so that the refusal costs nothing, and reports its delay.
//
// Instants may arrive out of order (concurrent requests read the clock before Decide takes its
// lock); a now earlier than one already decided for a key of the same part of the table is
// decided at that later instant, and the waits reported are still measured from now. So a
// bucket's clock never runs backwards, which would credit the same time twice.
//
// The Decision also carries the key's quota after this request:
//   - Limit is the burst.
//   - Remaining is the whole tokens left: the largest cost Decide would admit at now, never
//     negative. A refused request spends nothing, so it reports what it found.
//   - Reset is how long until the bucket is full again, not rounded to seconds, such that a
//     request for the whole burst at now + Reset is admitted (it is the refill time of the
//     missing tokens, truncated to the nanosecond, which the microsecond of slack covers); 0
//     when the bucket is full, rate.InfDuration when the rate is 0 and it is not. It is never
//     shorter than RetryAfter, except that a cost above the burst has a RetryAfter of
//     rate.InfDuration and the bucket's own Reset.
//   - A new key refused because the table is full (see [WithMaxMemory]) has Remaining 0 and a
//     Reset equal to its RetryAfter, after which it starts with a full bucket.
//   - With a limit of [rate.Inf], Remaining is always the burst and Reset 0.
func (b *TokenBucket) Decide(_ context.Context, key string, cost int, now time.Time) (Decision, error) {
	var d Decision
	if cost < 0 {
		return d, fmt.Errorf("%w: %d", ErrNegativeCost, cost)
	}
	b.decide(key, cost, now, &d, true)
	return d, nil
}

// decide is Decide for a cost of 0 or more, writing its Decision to the zero d, with the quota
// only when asked: it costs one more look at the bucket. The middleware calls it directly: the
// call through the Limiter interface, with the Decision copied out of it, costs an allowed
// request about a tenth of its time.
func (b *TokenBucket) decide(key string, cost int, now time.Time, d *Decision, quota bool) {
	if b.limit == rate.Inf {
		d.Allowed = true
		if quota {
			d.Limit, d.Remaining = b.burst, b.burst
		}
		return
	}
	h := b.seed.sum(key)
	p := &b.parts[h%shardCount]
	// Unlocked by hand rather than deferred, which costs the hot path: no code of a user's runs
	// under the lock, only operations of the table's index and heap and methods of
	// rate.Limiter, which do not panic.
	p.mu.Lock()
	// Concurrent requests read the clock before they take the lock, so they can arrive out of
	// order. A rate.Limiter given an instant before its last one moves its clock back, and
	// then credits the time between twice (golang/go#65508): under load it admits more than
	// its rate. So each part decides at the latest instant it has seen, and the waits it
	// reports are stretched by the lag, to stay exact from the caller's now. This is p.at
	// written out: its call, with the instants it passes, costs an admitted request 15
	// instructions of about a thousand.
	at := now
	if now.Before(p.latest) {
		at = p.behind(now)
	} else {
		p.latest = now
	}
	lim, ok := p.get(h, key)
	if !ok {
		var wait time.Duration
		if lim, wait = b.add(p, h, key, at, nil); lim == nil {
			p.mu.Unlock()
			d.RetryAfter = late(wait, at.Sub(now))
			if quota {
				// Once a slot frees, the key starts with a full bucket.
				d.Limit, d.Reset = b.burst, d.RetryAfter
			}
			return
		}
	}
	if lim.AllowN(at, cost) {
		d.Allowed = true
		if !quota {
			p.mu.Unlock()
			return
		}
	} else {
		r := lim.ReserveN(at, cost)
		wait := r.DelayFrom(at)
		if wait <= slack {
			d.Allowed = true
		} else {
			r.CancelAt(at)
			if wait != rate.InfDuration {
				wait -= slack
			}
			d.RetryAfter = wait
		}
	}
	if quota {
		b.fillQuota(d, lim.TokensAt(at))
		d.Reset = late(d.Reset, at.Sub(now))
	}
	p.mu.Unlock()
	if d.RetryAfter != 0 {
		d.RetryAfter = late(d.RetryAfter, at.Sub(now))
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

// fillQuota sets d's Limit, Remaining and Reset from the tokens left in a bucket.
func (b *TokenBucket) fillQuota(d *Decision, tokens float64) {
	d.Limit = b.burst
	// Remaining is exactly the largest cost that decide admits now, the tokens the slack lends
	// included: a first guess from the float arithmetic, then the admission rule itself.
	n := int(max(0, min(float64(b.burst), math.Floor(tokens+float64(b.limit)*slack.Seconds()))))
	for n < b.burst && b.admits(n+1, tokens) {
		n++
	}
	for n > 0 && !b.admits(n, tokens) {
		n--
	}
	d.Remaining = n
	d.Reset = b.refill(float64(b.burst) - tokens)
	if d.RetryAfter != rate.InfDuration {
		d.Reset = max(d.Reset, d.RetryAfter)
	}
}

// admits reports whether decide admits a cost of n, at most the burst, from a bucket holding
// tokens: x/time/rate's reservation is due at once, or within the slack, computed as
// x/time/rate computes it.
func (b *TokenBucket) admits(n int, tokens float64) bool {
	if n > b.burst {
		return false
	}
	left := tokens - float64(n)
	if left >= 0 {
		return true
	}
	if b.limit <= 0 {
		return false
	}
	wait := (-left / float64(b.limit)) * float64(time.Second)
	return wait < float64(math.MaxInt64) && time.Duration(wait) <= slack // 2^63 does not fit
}

// refill returns how long b's rate takes to add missing tokens: 0 when none are missing,
// rate.InfDuration when the time does not fit a Duration or the rate is 0.
func (b *TokenBucket) refill(missing float64) time.Duration {
	if missing <= 0 {
		return 0
	}
	ns := missing / float64(b.limit) * float64(time.Second)
	if b.limit <= 0 || ns >= float64(rate.InfDuration) {
		return rate.InfDuration
	}
	return time.Duration(ns)
}
