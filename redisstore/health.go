package redisstore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrUnavailable is the error, wrapped, that [Store.Decide] returns when Redis did not answer
// (it timed out, refused the connection, or answered with an error of its own state: out of
// memory, read-only, loading, busy), and while the store knows it to be down (see
// [WithProbeInterval]). An error that belongs to one key is [ErrKeyState] instead.
var ErrUnavailable = errors.New("redisstore: Redis is unavailable")

// unavailableError is an error wrapping ErrUnavailable and its cause.
type unavailableError struct{ cause error }

func (e *unavailableError) Error() string {
	return "redisstore: Redis is unavailable: " + e.cause.Error()
}
func (e *unavailableError) Unwrap() []error { return []error{ErrUnavailable, e.cause} }

// downAfter is how many failures in a row, each of a round trip sent after the one before had
// failed, show Redis to be down (see [WithProbeInterval]).
const downAfter = 3

// health is what a Store knows of Redis: up until downAfter round trips in a row have failed,
// each sent after the failure before it was known, then down until one succeeds. Failures of
// round trips that were in flight together (a stall of the client's process fails them all at
// once) are one piece of evidence, not several, and a timeout seen long after its deadline (see
// starved) is none. While it is down, one decision per interval is
// let through to Redis, a probe, and the others fail at once with the error that took it down,
// prebuilt, so that failing costs nothing. Its clock is time.Now, monotonic, whatever instants
// the callers of Decide pass.
type health struct {
	interval time.Duration
	epoch    time.Time                        // origin of next, seen and the instants of calls
	down     atomic.Pointer[unavailableError] // nil while up
	next     atomic.Int64                     // ns since epoch at which the next probe may start
	failing  atomic.Bool                      // failures > 0, as while down: the fast path of ok

	mu       sync.Mutex
	failures int   // failures in a row, those in flight together counted once
	seen     int64 // ns since epoch at which the last one counted was known
}

func newHealth(interval time.Duration) *health {
	return &health{interval: interval, epoch: time.Now()}
}

// since returns the instant of h's clock, in nanoseconds since its epoch.
func (h *health) since() int64 { return int64(time.Since(h.epoch)) }

// admit reports whether a decision may go to Redis: always while it is up, and while it is
// down only as the probe of the current interval. Otherwise it returns the error to fail with.
// sent is the instant of the round trip, for failed.
func (h *health) admit() (sent int64, err error) {
	now := h.since()
	down := h.down.Load()
	if down == nil {
		return now, nil
	}
	next := h.next.Load()
	if now >= next && h.next.CompareAndSwap(next, now+int64(h.interval)) {
		return now, nil // the probe
	}
	return now, down
}

// failed records that a round trip sent at sent (from admit) failed with err, and returns the
// error to report. The failure counts towards the down state only if the round trip was sent
// after the last failure counted was known; it takes the store down once downAfter have.
func (h *health) failed(sent int64, err error) error {
	e := &unavailableError{cause: err}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.down.Load() != nil {
		h.down.Store(e) // a failed probe, or a round trip that was in flight: still down
		return e
	}
	if sent < h.seen {
		return e // in flight when the last failure was known: the same evidence
	}
	now := h.since()
	h.failures++
	h.seen = now
	h.failing.Store(true)
	if h.failures >= downAfter {
		h.next.Store(now + int64(h.interval))
		h.down.Store(e)
	}
	return e
}

// reprobe lets the next decision probe Redis at once, while it is down: the last probe told
// nothing.
func (h *health) reprobe() {
	if h.down.Load() != nil {
		h.next.Store(0)
	}
}

// ok records that a round trip succeeded: Redis is up, and the failures before are forgotten.
func (h *health) ok() {
	if !h.failing.Load() { // nor down, which follows failures
		return
	}
	h.mu.Lock()
	h.failures = 0
	h.failing.Store(false)
	h.down.Store(nil)
	h.mu.Unlock()
}

// nodes is the health of each node a Store sends to: its own, for its one server or a cluster
// as a whole, and on a cluster one per master, so that a master that is down fails fast only the
// keys it holds.
type nodes struct {
	*health                      // the store's own
	probe   time.Duration        // WithProbeInterval's
	cluster *redis.ClusterClient // the store's client, when it is one
	masters sync.Map             // *redis.Client of a master → *health
}

// of returns the health of the Redis that holds key: the store's own, or on a cluster that of
// the master serving key's slot, so that a slot moved to a promoted replica is asked at once.
func (n *nodes) of(ctx context.Context, key string) *health {
	if n.cluster == nil {
		return n.health
	}
	node, err := n.cluster.MasterForKey(ctx, key)
	if err != nil {
		return n.health // no slot map: the cluster as a whole
	}
	if h, ok := n.masters.Load(node); ok {
		return h.(*health)
	}
	h, _ := n.masters.LoadOrStore(node, newHealth(n.probe))
	return h.(*health)
}

// downErr returns the error that showed a node down, the store's own first, or nil while every
// node answers.
func (n *nodes) downErr() error {
	if e := n.health.down.Load(); e != nil {
		return e
	}
	var err error
	n.masters.Range(func(_, h any) bool {
		if e := h.(*health).down.Load(); e != nil {
			err = e
		}
		return err == nil
	})
	return err
}

// starved returns how long after the deadline of a round trip of the store's timeout its failure
// may be seen before it is taken to show a process starved of CPU rather than a Redis down.
func starved(timeout time.Duration) time.Duration {
	return max(timeout/10, time.Millisecond)
}

// isTimeout reports whether err is a round trip's deadline passing, as the context or the
// connection reports it.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}

// failed returns the error of a round trip rt of the caller's ctx, sent at sent (from
// health.admit), that failed with err, and whether it was a failure of Redis, which it then
// records in health: not when the caller's own deadline ended it, nor when the failure is a
// key's (see [ErrKeyState]), the one place that tells them apart.
func (s *Store) failed(ctx context.Context, rt roundTrip, health *health, sent int64, err error) (error, bool) {
	err = s.dials.cause(err, rt.deadline.Add(-s.timeout))
	if isKeyState(err) {
		health.ok() // Redis answered: the failure is the key's (see ErrKeyState)
		return &keyStateError{cause: err}, false
	}
	if rt.own && (ctx.Err() != nil || !time.Now().Before(rt.deadline)) {
		return fmt.Errorf("redisstore: %w", err), false
	}
	if rt.short && isTimeout(err) {
		// The round trip had only what a wait for another's left of the timeout: that it ran
		// out says nothing of Redis, which the round trip waited for may have.
		return &unavailableError{cause: err}, true
	}
	if late := time.Since(rt.deadline); late > starved(s.timeout) && isTimeout(err) {
		// The timeout was seen long after the deadline: this process did not run in time to
		// read the answer, and that says nothing of Redis. A probe so failed is asked again by
		// the next decision. Other errors (a refused connection) count however late.
		health.reprobe()
		return &unavailableError{cause: err}, true
	}
	if s.health.cluster != nil {
		// go-redis reloads the slot map only on a MOVED reply or once a minute, and a master
		// that is down sends none: without this, its keys would fail for up to a minute after
		// its replica took over. Failures are at most one probe per interval and master, and
		// go-redis coalesces the reloads.
		s.health.cluster.ReloadState(ctx)
	}
	return health.failed(sent, err), true
}

// Down returns, while the store knows Redis to be down, the error that showed it (wrapping
// [ErrUnavailable]), and nil while Redis answers: for health checks and metrics, since with
// [WithLocalFallback] an outage reaches no error hook.
// On a cluster, it reports the first master found down.
func (s *Store) Down() error { return s.health.downErr() }
