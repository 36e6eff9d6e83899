package edge

import (
	"context"
	"errors"
	"time"

	"golang.org/x/time/rate"
)

// A Limiter decides, for one request, whether the client named by key may proceed at the instant
// now, and if not, how long it must wait. It is the one seam between how requests are counted
// and what they are answered: every edge asks its Limiter alike, whichever counts.
//
// Decide must be safe for concurrent use, and every Limiter of this repository keeps the same
// contract, which package limitertest checks:
//
//   - A request of cost n ≥ 1 is admitted, and its cost spent, or refused, and then nothing
//     is spent: a refusal costs the key no quota.
//   - A refusal's RetryAfter is exact: a request of the same cost at now + RetryAfter is
//     admitted if nothing else spent the key's quota meanwhile, and one at any earlier instant
//     would not be (to the limiter's resolution: a microsecond in memory and in Redis). It is
//     [rate.InfDuration] when the request can never be admitted.
//   - A cost of 0 spends nothing: it reports the key's quota (a peek), and is admitted unless
//     the key owes more than it holds.
//   - A negative cost is an error wrapping [ErrNegativeCost]; nothing is spent.
//
// Any other error means the limiter could not decide (a store that is down); the edge then fails
// open or closed as configured.
//
// A Limiter that can promise a request a place later on implements [Reserver] too, so that an
// edge configured to wait (Config.MaxWait) makes a request that is only a little early wait for
// its place rather than refuse it; the edge refuses as before with any other.
type Limiter interface {
	Decide(ctx context.Context, key string, cost int, now time.Time) (Decision, error)
}

// An Allower is a [Limiter] that can decide a request without reporting its quota: Allow
// decides exactly as Decide does and returns only the Decision's RetryAfter as wait (0 when the
// request is admitted) and its Policy, whose Burst is its Limit, leaving out Remaining and Reset,
// which can cost as much again as the decision to fill, and a reply small enough to come back in
// registers. A [Core] asks Allow instead of Decide when nothing it was configured with reads the
// quota (no hooks, Config.Quota false).
type Allower interface {
	Limiter
	Allow(ctx context.Context, key string, cost int, now time.Time) (wait time.Duration, p Policy, err error)
}

// ErrNegativeCost is the error, wrapped, that a [Limiter] returns for a cost below 0.
var ErrNegativeCost = errors.New("retryafter: negative cost")

// A Decision is a [Limiter]'s answer for one request.
type Decision struct {
	// Allowed reports whether the request may proceed. Its cost has then been spent.
	Allowed bool

	// RetryAfter is, for a refused request, the wait after which the same request would be
	// admitted, not rounded; rate.InfDuration when it never will be. It is zero for a request
	// allowed at once; for one that [Reserver.Reserve] gave a later place, the wait until it.
	RetryAfter time.Duration

	// Limit, Remaining and Reset describe the key's quota after this request, for the
	// RateLimit fields and status endpoints: Limit is the most the key may spend at once (a
	// token bucket's burst), Remaining the largest cost that would be admitted at now, and
	// Reset how long until the key may spend Limit again if it spends nothing meanwhile. A
	// Limiter that does not track them leaves Limit at 0.
	Limit     int
	Remaining int
	Reset     time.Duration

	// Policy is the limit that decided the request, for the RateLimit fields: their quota is
	// its Burst and their window the time its Limit takes to restore Burst. Its Name, when not
	// empty, names the item in the fields instead of the middleware's policy name. A Limiter
	// that does not know its rate leaves Policy.Limit at 0, and the fields then carry no window.
	Policy Policy

	layers *[]Decision // each layer's, for a request decided in several (see Binding)
}

// Layers returns the Decision of each layer of a request decided in several (the root package's
// All, or a Combiner through [Binding]), in the order of the layers, for the RateLimit fields and the
// problem details of a refusal; nil for a request decided in one. The caller must not modify it.
func (d Decision) Layers() []Decision {
	if d.layers == nil {
		return nil
	}
	return *d.layers
}

// A Policy is a named token-bucket limit: Limit tokens restored per second, up to Burst at once.
// Its Name is the item's name in the RateLimit fields ("default" when empty).
type Policy struct {
	Name  string
	Limit rate.Limit
	Burst int
}
