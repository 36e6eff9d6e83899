package edge

import (
	"context"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

// A Config is how an edge reads its requests, of type R, and what it is told of them: one per
// edge, filled by the edge's own options. Key is required; the rest may be left zero.
type Config[R any] struct {
	// Now is the clock, read once a request, after Key and Cost: the one reading that the
	// Limiter decides at and that the edge's Date and wait are measured from. Nil means
	// time.Now.
	Now func() time.Time

	// Key names the client a request is counted against. A request whose key function fails
	// is not counted: it fails open or closed, and the error goes to OnError.
	Key func(R) (string, error)

	// Cost says how many tokens a request costs; nil means 1, and a cost below 1 counts as 1,
	// so that no request is free by mistake.
	Cost func(R) int

	// Exempt names requests passed on uncounted, before the key function is called.
	Exempt func(R) bool

	// FailOpen admits, uncounted, a request whose key function or Limiter fails; otherwise it
	// is refused. A request whose own context ended while the Limiter decided is never
	// admitted for the Limiter's error.
	FailOpen bool

	// Quota says the edge reads the quota of each Decision (Remaining and Reset: the RateLimit
	// fields), so that the Limiter must report it even when no hook reads it.
	Quota bool

	// DryRun decides and reports every request as usual but refuses none: a request that
	// would have been refused is passed on as DryRunRefused, having spent nothing, and one
	// whose key function or Limiter fails is passed on as FailedOpen, whatever FailOpen says.
	// What a DryRunRefused request costs afterwards is not charged (see Verdict.Counted).
	DryRun bool

	// MaxWait, when above 0 and the Limiter is a [Reserver], makes a request that would be
	// refused with a wait of at most MaxWait, and whose context would outlive that wait, wait
	// for its place and then pass, as Waited; a longer wait is refused as without it. A dry run
	// passes such a request at once, as DryRunWaited, having spent nothing. Its client leaving
	// while it waits gives the place back (the request fails closed, as Canceled).
	MaxWait time.Duration

	// MaxWaiting is the most requests that wait at once, across keys, counting those being
	// decided by the Reserver, which may give them a place (with a store, for its round
	// trip); beyond it a request is decided as without MaxWait. 0 means DefaultMaxWaiting.
	MaxWaiting int

	// OnError is told of every error of the key function or the Limiter; OnLimited of every
	// request the Limiter refused (in a dry run too), with its key; OnDecided of every
	// request, with what became of it and the Limiter's Decision (zero when it was not asked;
	// a refusal's RetryAfter at least 1 ns, the least wait, when the Limiter told none).
	// Each runs on the request's goroutine before the edge answers, in the order given.
	OnError   []func(req R, err error)
	OnLimited []func(req R, key string, d Decision)
	OnDecided []func(req R, o Outcome, d Decision)
}

// A Core decides the requests of one edge: by one Limiter and one [Config]. It is safe for
// concurrent use.
type Core[R any] struct {
	l          Limiter
	quick      Allower      // l, when nothing reads the quota and it can leave it out
	reserver   Reserver     // the Limiter, when requests may wait for their place: l is a waiter over it
	waiting    atomic.Int64 // the requests that wait, or are being decided by the waiter
	maxWaiting int64
	c          Config[R]
}

// New returns the Core of an edge that asks l, as c says. It panics if l or c.Key is nil, or
// c.MaxWait or c.MaxWaiting is negative.
func New[R any](l Limiter, c Config[R]) *Core[R] {
	if l == nil {
		panic("retryafter: edge.New: nil Limiter")
	}
	if c.Key == nil {
		panic("retryafter: edge.New: Config without a Key function")
	}
	if c.MaxWait < 0 || c.MaxWaiting < 0 {
		panic("retryafter: edge.New: negative MaxWait or MaxWaiting")
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	c.MaxWait = min(c.MaxWait, rate.InfDuration-1)
	core := &Core[R]{l: l, c: c, maxWaiting: int64(c.MaxWaiting)}
	if core.maxWaiting == 0 {
		core.maxWaiting = DefaultMaxWaiting
	}
	if r, ok := l.(Reserver); ok && c.MaxWait > 0 {
		core.reserver = r
		core.l = &waiter[R]{core}
	} else if a, ok := l.(Allower); ok && !c.Quota && c.OnLimited == nil && c.OnDecided == nil {
		core.quick = a
	}
	return core
}

// A Verdict is what became of one request, and all the edge needs to answer it.
type Verdict struct {
	Outcome  Outcome
	Decision Decision  // the Limiter's; zero when it was not asked or failed
	Key      string    // the client's key; "" for an exempt request or a failed key function
	Now      time.Time // the clock's reading for the request (once served, if it waited); 0 if exempt
	Failure  Failure   // why a FailedOpen or FailedClosed request failed
}

// A Failure is why the key function or the Limiter could not decide a request.
type Failure uint8

const (
	KeyFailed     Failure = iota + 1 // the key function failed: refused with no wait (HTTP 500)
	LimiterFailed                    // the Limiter failed: refused with FailWait (HTTP 503)
	Canceled                         // the request's own context ended: refused, not reported as an error
)

// FailWait is the wait told to a client refused because the Limiter failed or its request's
// context ended: short, since a store that is down is usually back soon.
const FailWait = time.Second

// Pass reports whether the request goes on to the handler.
func (v Verdict) Pass() bool { return v.Outcome != Refused && v.Outcome != FailedClosed }

// Counted reports whether the request that passes is counted under v.Key, and served as it
// would be were the limit enforced, so that what the edge learns it costs afterwards (a
// handler's charge, a stream's messages) is charged under v.Key: an admitted request (at once or
// after its wait, or one that would have waited in a dry run) and one that failed open because
// the Limiter failed. An exempt request, one whose key function failed, and a dry run's
// would-be refusal, which enforcing would not have served, are not.
func (v Verdict) Counted() bool {
	switch v.Outcome {
	case Admitted, Waited, DryRunWaited:
		return true
	case FailedOpen:
		return v.Failure != KeyFailed
	}
	return false
}

// Wait returns the wait to tell a refused client, not rounded: the Limiter's for a refusal
// (rate.InfDuration when it can never be admitted: tell no wait; at least 1 ns, as the core
// takes a refusal with no wait), FailWait when the Limiter failed or the request's context
// ended, and 0 otherwise.
func (v Verdict) Wait() time.Duration {
	switch {
	case v.Outcome == Refused:
		return v.Decision.RetryAfter
	case v.Outcome == FailedClosed && v.Failure != KeyFailed:
		return FailWait
	}
	return 0
}

// Decide decides req: the exemption, the key function, then as [Core.DecideKey].
func (c *Core[R]) Decide(ctx context.Context, req R) (v Verdict) {
	if c.c.Exempt != nil && c.c.Exempt(req) {
		c.decided(req, Exempt, &Decision{})
		v.Outcome = Exempt
		return v
	}
	key, err := c.c.Key(req)
	if err != nil {
		v.Now, v.Failure = c.c.Now(), KeyFailed
		c.fail(req, &v, err)
		return v
	}
	c.decideKey(ctx, req, key, &v)
	return v
}

// DecideKey decides req under key, rather than the key function's (the exemption is not asked):
// its cost, one reading of the clock, the Limiter, then the hooks. ctx is the request's own.
func (c *Core[R]) DecideKey(ctx context.Context, req R, key string) (v Verdict) {
	c.decideKey(ctx, req, key, &v)
	return v
}

// decideKey is DecideKey, filling v.
func (c *Core[R]) decideKey(ctx context.Context, req R, key string, v *Verdict) {
	cost := 1
	if c.c.Cost != nil {
		cost = max(1, c.c.Cost(req))
	}
	v.Key, v.Now = key, c.c.Now()
	var err error
	if c.quick != nil {
		var wait time.Duration
		wait, v.Decision.Policy, err = c.quick.Allow(ctx, key, cost, v.Now)
		v.Decision.Allowed, v.Decision.RetryAfter, v.Decision.Limit = wait == 0, wait, v.Decision.Policy.Burst
	} else {
		v.Decision, err = c.l.Decide(ctx, key, cost, v.Now)
	}
	switch {
	case err != nil:
		c.failed(ctx, req, v, err)
		return
	case v.Decision.Allowed:
		v.Outcome = Admitted
	default:
		// A refusal with no wait (a Limiter that truncates it) is one of the least wait there
		// is, told as each edge tells it (Retry-After: 1): only rate.InfDuration means never.
		v.Decision.RetryAfter = max(v.Decision.RetryAfter, 1)
		for _, fn := range c.c.OnLimited {
			fn(req, key, v.Decision)
		}
		v.Outcome = Refused
		if c.c.DryRun {
			v.Outcome = DryRunRefused
		}
	}
	c.decided(req, v.Outcome, &v.Decision)
}

// failed answers v, whose Limiter returned err: a request that waited for its place, or would
// have in a dry run (see waiter); one whose own context ended (the client hung up, a deadline
// passed), which the Limiter did not fail, and which, not counted, is not admitted for it; or
// the Limiter's failure.
func (c *Core[R]) failed(ctx context.Context, req R, v *Verdict, err error) {
	switch {
	case err == errWaited:
		c.served(ctx, v)
	case err == errWouldWait:
		v.Outcome = DryRunWaited
	case ctx.Err() != nil:
		if r, ok := err.(releaseError); ok {
			c.Errored(req, r.err)
		}
		v.Decision, v.Outcome, v.Failure = Decision{}, FailedClosed, Canceled
	default:
		v.Decision, v.Failure = Decision{}, LimiterFailed
		c.fail(req, v, err)
		return
	}
	c.decided(req, v.Outcome, &v.Decision)
}

// fail reports err and fails v open or closed.
func (c *Core[R]) fail(req R, v *Verdict, err error) {
	c.Errored(req, err)
	v.Outcome = FailedClosed
	if c.c.FailOpen || c.c.DryRun {
		v.Outcome = FailedOpen
	}
	c.decided(req, v.Outcome, &Decision{})
}

// Errored tells the error hooks of err: for what the edge does after deciding (a charge that
// fails once the handler returns).
func (c *Core[R]) Errored(req R, err error) {
	for _, fn := range c.c.OnError {
		fn(req, err)
	}
}

// Now reads the edge's clock.
func (c *Core[R]) Now() time.Time { return c.c.Now() }

// decided tells the hooks of OnDecided what became of req.
func (c *Core[R]) decided(req R, o Outcome, d *Decision) {
	for _, fn := range c.c.OnDecided {
		fn(req, o, *d)
	}
}
