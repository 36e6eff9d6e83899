package retryafter

import (
	"context"
	"errors"
	"time"

	"golang.org/x/time/rate"
)

// A Limiter decides, for one request, whether the client named by key may proceed at the instant
// now, and if not, how long it must wait. It is the one seam between how requests are counted
// and what they are answered: [TokenBucket] counts in memory, package httpratestore on any
// counter of go-chi/httprate, package redisstore in Redis, and the middleware treats them alike.
//
// Decide must be safe for concurrent use, and every Limiter of this repository keeps the same
// contract, which package limitertest checks:
//
//   - A request of cost n ≥ 1 is admitted, and its cost spent, or refused, and then nothing
//     is spent: a refusal costs the key no quota.
//   - A refusal's RetryAfter is exact: a request of the same cost at now + RetryAfter is
//     admitted if nothing else spent the key's quota meanwhile, and one at any earlier instant
//     would not be (to the limiter's resolution: a nanosecond in memory, a microsecond in
//     Redis). It is [rate.InfDuration] when the request can never be admitted (its cost is
//     above what the limiter can ever hold).
//   - A cost of 0 spends nothing: it reports the key's quota (a peek), and is admitted unless
//     the key owes more than it holds.
//   - A negative cost is an error wrapping [ErrNegativeCost]; nothing is spent.
//
// Any other error means the limiter could not decide (a store that is down); the middleware then
// fails open or closed as configured.
type Limiter interface {
	Decide(ctx context.Context, key string, cost int, now time.Time) (Decision, error)
}

// ErrNegativeCost is the error, wrapped, that a [Limiter] returns for a cost below 0.
var ErrNegativeCost = errors.New("retryafter: negative cost")

// A Decision is a [Limiter]'s answer for one request.
type Decision struct {
	// Allowed reports whether the request may proceed. Its cost has then been spent.
	Allowed bool

	// RetryAfter is, for a refused request, the wait after which the same request would be
	// admitted, not rounded; rate.InfDuration when it never will be. It is zero for an
	// allowed request.
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
}

// A Policy is a named token-bucket limit: Limit tokens restored per second, up to Burst at once.
// Its Name is the item's name in the RateLimit fields ("default" when empty).
type Policy struct {
	Name  string
	Limit rate.Limit
	Burst int
}
