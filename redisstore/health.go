package redisstore

import (
	"context"
	"errors"
	"sync/atomic"
	"time"
)

// ErrUnavailable is the error, wrapped, that [Store.Decide] returns when Redis did not answer
// (it timed out, refused the connection, or answered with an error), and while the store knows
// it to be down (see [WithProbeInterval]).
var ErrUnavailable = errors.New("redisstore: Redis is unavailable")

// unavailableError is an error wrapping ErrUnavailable and its cause.
type unavailableError struct{ cause error }

func (e *unavailableError) Error() string {
	return "redisstore: Redis is unavailable: " + e.cause.Error()
}
func (e *unavailableError) Unwrap() []error { return []error{ErrUnavailable, e.cause} }

// health is what a Store knows of Redis: up until a round trip fails, then down until one
// succeeds. While it is down, one decision per interval is let through to Redis, a probe, and the
// others fail at once with the error that took it down, prebuilt, so that failing costs nothing.
// Its clock is time.Now, monotonic, whatever instants the callers of Decide pass.
type health struct {
	interval time.Duration
	epoch    time.Time                        // origin of next
	down     atomic.Pointer[unavailableError] // nil while up
	next     atomic.Int64                     // ns since epoch at which the next probe may start
}

func newHealth(interval time.Duration) *health {
	return &health{interval: interval, epoch: time.Now()}
}

// admit reports whether a decision may go to Redis: always while it is up, and while it is
// down only as the probe of the current interval. Otherwise it returns the error to fail with.
func (h *health) admit() error {
	down := h.down.Load()
	if down == nil {
		return nil
	}
	now := int64(time.Since(h.epoch))
	next := h.next.Load()
	if now >= next && h.next.CompareAndSwap(next, now+int64(h.interval)) {
		return nil // the probe
	}
	return down
}

// failed records that a round trip failed with err, and returns the error to report.
func (h *health) failed(err error) error {
	e := &unavailableError{cause: err}
	if h.down.Swap(e) == nil {
		h.next.Store(int64(time.Since(h.epoch) + h.interval))
	}
	return e
}

// ok records that a round trip succeeded.
func (h *health) ok() {
	if down := h.down.Load(); down != nil {
		h.down.CompareAndSwap(down, nil) // not a failure recorded since
	}
}

// healthOf returns the health of the Redis that holds key: the store's own, or on a cluster that
// of the master serving key's slot, so that a master that is down fails fast only the keys it
// holds, and a slot moved to a promoted replica is asked at once.
func (s *Store) healthOf(ctx context.Context, key string) *health {
	if s.cluster == nil {
		return s.health
	}
	node, err := s.cluster.MasterForKey(ctx, key)
	if err != nil {
		return s.health // no slot map: the cluster as a whole
	}
	if h, ok := s.nodes.Load(node); ok {
		return h.(*health)
	}
	h, _ := s.nodes.LoadOrStore(node, newHealth(s.probe))
	return h.(*health)
}
