package redisstore

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"time"

	"golang.org/x/time/rate"

	"github.com/retryafter/retryafter"
)

//go:embed decide.lua
var decideLua string

// decideScript decides a request on one key. It and the other scripts run by EVALSHA, falling
// back to EVAL when the server does not have them cached (the first call, or after a restart).
var decideScript = newScript(assemble(decideLua))

// Decide implements [retryafter.Limiter] in one round trip to Redis (two the first time a
// server sees the script, which it then caches): at Redis's clock it takes
// cost tokens from key's bucket if it holds them, and otherwise leaves the bucket as it was and
// reports how long until it will. RetryAfter is exact to the microsecond, Redis's resolution: a
// request of the same cost that reaches Redis that much later is admitted, unless other
// requests spent the key's tokens meanwhile, and one a microsecond earlier would not be. It is
// rate.InfDuration for a cost above the burst. Limit, Remaining and Reset are always filled, and
// Policy is the store's rate and burst, with no name, or the key's own ([WithPolicyFunc]).
//
// A cost of 0 spends nothing and writes nothing to Redis: it reports the key's quota, and is
// admitted unless the key owes more than its bucket holds. A negative cost is an error wrapping
// [retryafter.ErrNegativeCost], decided without asking Redis.
//
// A key that [Store.Charge] put into debt is refused every request, even of cost 0, until the
// debt is repaid, with the exact wait.
//
// When Redis's clock steps back (an NTP step, a failover to a host whose clock is behind), a key
// written before the step would owe the whole step; the first decision that finds it so repairs
// it to an empty bucket as of then, even a refused one or a peek. So a step back of any size
// admits nothing that an empty bucket would not, refuses no request for longer than a refill of
// its cost, and normal counting resumes within one refill of the burst. A key in debt keeps the
// debt it had when it was last charged instead (see Charge). A step forward credits each key at
// most the one burst that its bucket holds.
//
// now is not used for the decision (see [Store]). ctx's values reach the client, and its
// deadline bounds the round trip if it is sooner than the store's timeout; its cancellation does
// not: a request whose client hangs up is decided, and counted, like any other, within the
// timeout. Decide returns an error wrapping [ErrUnavailable], never a partial Decision, when
// Redis does not answer within the timeout (see [WithTimeout]) or answers with an error, and at
// once while the store knows Redis to be down (see [WithProbeInterval]), unless it decides
// locally then (see [WithLocalFallback]); one wrapping [ErrKeyState] when key holds another
// program's value in Redis; and one wrapping
// [retryafter.ErrNegativeCost] when cost is negative. A request whose answer was lost to the
// timeout may still have been counted, as with any store reached over a network.
func (s *Store) Decide(ctx context.Context, key string, cost int, now time.Time) (retryafter.Decision, error) {
	if cost < 0 {
		return retryafter.Decision{}, fmt.Errorf("redisstore: %w: %d", retryafter.ErrNegativeCost, cost)
	}
	pl, err := s.planOf(key) // plan
	if err != nil {
		return retryafter.Decision{}, err
	}
	if pl.unlimited() {
		return pl.unlimitedDecision(), nil
	}
	a := ask{request: request{key, cost, now}, plan: pl, at: s.instant(now), timeout: s.timeout}
	if s.refusals != nil { // a refusal remembered may answer (refusals.go)
		if d, done, err := s.recall(ctx, &a); done {
			return d, err
		}
		defer s.refusals.land(&a)
	}
	if s.deferred != nil { // the charges held for key go with the call (deferred.go)
		if a.carried, err = s.takeCharges(ctx, key); err != nil {
			return s.fail(ctx, &a.request, errors.Is(err, ErrUnavailable), err)
		}
		defer s.landed(key, &a.carried)
	}
	res, err := s.call(ctx, &a) // one call
	if err != nil {
		return s.fail(ctx, &a.request, a.failure != nil, err)
	}
	d := decision(res, pl.policy) // decision
	if s.refusals != nil {
		s.learn(&a, res, d)
	}
	return d, nil
}

// A request is what a decision or a charge is asked: a key, a cost, and the caller's now.
type request struct {
	key  string
	cost int
	now  time.Time
}

// An ask is one request of [Store.Decide] on its way to Redis.
type ask struct {
	request
	plan    plan          // the key's
	at      int64         // now's instant (see Store.instant)
	timeout time.Duration // what the round trip may take: the store's, or what a wait left of it
	maxWait time.Duration // how far away a place may be promised (see Store.Reserve); 0: none
	carried carry         // what the key owed, that the call carries (see takeCharges)
	failure error         // the failure of Redis the call met, if any
	// The memory of refusals' (see recall): the fingerprint of the key's plan (see plan.mix), the
	// key's flight that the request leads (see refusals.board), to land, and the call's ticket.
	sig    uint64
	lead   *flight
	ticket ticket
}

// call makes a's one script call, carrying what a's key owed, and returns Redis's answer, or
// the error of a call that failed, recording in a whether it was a failure of Redis and
// whether what it carried is to be held again (see trip.again).
func (s *Store) call(ctx context.Context, a *ask) ([]int64, error) {
	c := s.newCall(a.key, a.cost, a.now, &a.plan)
	if a.carried.f != nil {
		c.extend(a.carried.tokens, max(a.at-a.carried.at, 0))
	}
	if a.maxWait > 0 {
		if c.nargs < 9 {
			c.extend(0, 0) // nothing carried
		}
		c.args[9], c.nargs = a.maxWait.Nanoseconds(), 10
	}
	if s.refusals != nil {
		a.ticket = s.refusals.ticket(a.key, a.carried.f != nil)
	}
	rt, cancel := newRoundTrip(ctx, a.timeout)
	defer cancel()
	rt.short = a.timeout < s.timeout
	tr, err := s.run(ctx, rt, c.of(decideScript, 4))
	if err != nil {
		if tr.down {
			a.failure = err
		}
		a.carried.again = tr.again()
		return nil, err
	}
	return tr.res, nil
}

// A trip is the outcome of one script call (see Store.run).
type trip struct {
	res    []int64
	health *health // of the node the call went to
	at     int64   // the call's instant on health's clock (see health.admit)
	sent   bool    // the call went out: what it carried may have been made
	down   bool    // its error is a failure of Redis (see failed)
	cause  error   // its error as the client returned it
}

// again reports whether the charges that the call carried (see takeCharges) are to be held
// again: it failed before it was sent, or in a way that made none of them (see resend).
func (t *trip) again() bool {
	return t.cause != nil && (!t.sent || resend(t.cause))
}

// run makes sc, the one script call of a decision, a charge or a lease, within rt: it asks the
// health of the node of sc's first key (and fails at once while that is down), runs the script,
// checks that the answer holds sc.want integers, and learns from the outcome: the node is up, or
// the failure is evidence against it, or the key's own (see failed). Every script call of the
// store but a flush's pipeline goes through it, and it sends through send.
func (s *Store) run(ctx context.Context, rt roundTrip, sc scriptCall) (trip, error) {
	t := trip{health: s.health.of(rt.ctx, sc.keys[0])}
	var err error
	if t.at, err = t.health.admit(); err != nil {
		t.down, t.cause = true, err
		return t, err
	}
	cmd, sent := s.send(rt.ctx, sc)
	t.sent = sent
	if sc.want == 0 {
		err = cmd.Err()
	} else if t.res, err = cmd.Int64Slice(); err == nil && len(t.res) != sc.want {
		err = fmt.Errorf("script answered %d values, want %d", len(t.res), sc.want)
	}
	if err != nil {
		t.cause = err
		if !sent { // its time ran out in the queue: no evidence against Redis
			return t, unsent(rt, err)
		}
		err, t.down = s.failed(ctx, rt, t.health, t.at, err)
		return t, err
	}
	t.health.ok()
	return t, nil
}

// A scriptCall is one call of a script: its keys, its arguments, and how many integers its
// answer holds (0: any answer).
type scriptCall struct {
	script *script
	keys   []string
	args   []any
	want   int
}

// of returns the call of script with c's key and arguments, whose answer holds want integers.
func (c *call) of(script *script, want int) scriptCall {
	return scriptCall{script: script, keys: c.keys[:], args: c.args[:c.nargs], want: want}
}

// A call is the key and the script's arguments of one round trip, in one allocation.
type call struct {
	keys  [1]string
	args  [10]any
	nargs int
}

// optional are the values of the optional arguments of decide.lua and charge.lua that mean "not
// given", for a call that gives later ones.
var optional = [7]any{3: "", 4: 0, 5: "", 6: ""}

// extend appends vals to c's arguments after the optional ones of decide.lua and charge.lua,
// giving those c has not.
func (c *call) extend(vals ...any) {
	for i := c.nargs; i < len(optional); i++ {
		c.args[i] = optional[i]
	}
	c.nargs = len(optional) + copy(c.args[len(optional):], vals)
}

// newCall prepares the script call of one decision of key's plan pl (see decide.lua).
func (s *Store) newCall(key string, cost int, now time.Time, pl *plan) *call {
	c := &call{nargs: 3}
	c.keys[0] = s.prefix + key
	c.args[0], c.args[1], c.args[2] = pl.args[0], pl.args[1], cost
	if s.clock.caller {
		c.args[3], c.args[4] = now.UnixMicro(), s.clock.tolerance
		c.nargs = 5
	}
	if s.policyOf != nil {
		if !s.clock.caller {
			c.args[3], c.args[4] = "", 0
		}
		c.args[5], c.args[6] = s.own.args[0], s.own.args[1]
		c.nargs = 7
	}
	return c
}

// A roundTrip is the context of one round trip: the caller's values, and a deadline, the
// store's timeout from now or the caller's own if sooner, which the caller's cancellation does
// not shorten (see [Store.Decide]).
type roundTrip struct {
	ctx      context.Context
	deadline time.Time
	own      bool // the deadline is the caller's
	short    bool // the round trip has what a wait for another's left of the store's timeout
}

// newRoundTrip returns the round trip of a call of the caller's ctx with the store's timeout,
// and the function that releases its timer.
func newRoundTrip(ctx context.Context, timeout time.Duration) (roundTrip, context.CancelFunc) {
	rt := roundTrip{deadline: time.Now().Add(timeout)}
	if d, ok := ctx.Deadline(); ok && d.Before(rt.deadline) {
		rt.deadline, rt.own = d, true
	}
	var cancel context.CancelFunc
	rt.ctx, cancel = context.WithDeadline(context.WithoutCancel(ctx), rt.deadline)
	return rt, cancel
}

// unsent returns the error of a call of rt whose deadline passed before it was sent (err): the
// caller's own deadline's, or Redis's failure to answer within the store's timeout, which is
// no evidence that Redis is down (see batcher).
func unsent(rt roundTrip, err error) error {
	if rt.own {
		return fmt.Errorf("redisstore: %w", err)
	}
	return &unavailableError{cause: err}
}

// decision returns the Decision of one layer of policy p from the four integers the scripts
// answer for it.
func decision(res []int64, p retryafter.Policy) retryafter.Decision {
	d := retryafter.Decision{
		Policy:    p,
		Allowed:   res[0] == 1,
		Limit:     p.Burst,
		Remaining: int(res[2]),
		Reset:     time.Duration((res[3]+999)/1000) * time.Microsecond, // d, ns, rounded up to µs
	}
	if res[1] < 0 {
		d.RetryAfter = rate.InfDuration
	} else {
		d.RetryAfter = time.Duration(res[1]) * time.Microsecond // 0, or the wait until a place
	}
	return d
}
