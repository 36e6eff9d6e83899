package retryaftercaddy

import (
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/caddyserver/caddy/v2"
	"golang.org/x/time/rate"

	"github.com/retryafter/retryafter"
)

// buckets holds the token buckets of every retry_after_limit in the running configurations,
// by the limit's identity (see [Limit.identity]), so that a configuration loaded while one runs
// finds the buckets of the limits it keeps. Caddy's own reverse_proxy keeps its upstreams' state
// across loads the same way. An entry is deleted, and its memory released, when the last
// handler that uses it is cleaned up with the configuration it belongs to.
var buckets = caddy.NewUsagePool()

// sharedBucket is one limit's buckets, shared by the handlers of that identity in consecutive
// configurations.
type sharedBucket struct {
	bucket *retryafter.TokenBucket
	policy atomic.Pointer[retryafter.Policy] // the rate and burst of the handler that served last
}

// Destruct implements caddy.Destructor: there is nothing to close, the memory goes with the
// entry.
func (*sharedBucket) Destruct() error { return nil }

// newSharedBucket returns the buckets of a limit on pol.
func newSharedBucket(pol *retryafter.Policy) *sharedBucket {
	s := new(sharedBucket)
	s.policy.Store(pol)
	s.bucket = retryafter.NewTokenBucket(pol.Limit, pol.Burst,
		retryafter.WithPolicyFunc(func(string) retryafter.Policy { return *s.policy.Load() }))
	return s
}

// use puts the buckets on pol, if they are not on it already: from then on every key's tokens
// refill at pol's rate, and a key holds at most pol's burst (see [retryafter.WithPolicyFunc]).
func (s *sharedBucket) use(pol *retryafter.Policy) {
	if s.policy.Load() != pol {
		s.policy.Store(pol)
	}
}

// identity returns what the buckets of h are found by in [buckets]: its Name, or, for a limit
// without one, its whole definition, so that an unchanged limit keeps its buckets and a changed
// one starts afresh.
func (h *Limit) identity() string {
	if h.Name != "" {
		return "name " + h.Name
	}
	return fmt.Sprintf("definition %q %d %q", h.Rate, h.Burst, h.Key)
}

// shareBuckets finds the buckets of h's identity in [buckets], or makes them on the policy of
// limit and h.Burst; [Limit.Cleanup] gives them back.
func (h *Limit) shareBuckets(limit rate.Limit) error {
	pol := &retryafter.Policy{Limit: limit, Burst: h.Burst}
	id := h.identity()
	v, _, err := buckets.LoadOrNew(id, func() (caddy.Destructor, error) { return newSharedBucket(pol), nil })
	if err != nil {
		return err
	}
	h.shared, h.policy, h.poolKey = v.(*sharedBucket), pol, id
	return nil
}

// Cleanup gives back h's buckets and maintenance switch: when no handler of the running
// configurations uses them any more, they are deleted.
func (h *Limit) Cleanup() error {
	var err error
	if h.poolKey != "" {
		_, err = buckets.Delete(h.poolKey)
		h.poolKey = ""
	}
	if h.switchKey != "" {
		_, err2 := switches.Delete(h.switchKey)
		h.switchKey = ""
		err = errors.Join(err, err2)
	}
	return err
}
