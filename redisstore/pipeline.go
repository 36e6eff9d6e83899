package redisstore

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// maxShared is the most script calls one shared round trip carries; the others wait for the next.
const maxShared = 128

// A batcher shares round trips between the concurrent script calls of a Store to one server: a
// call that finds no round trip in flight to its server goes out at once, on its own, as
// script.Run sends it; one that finds a round trip in flight waits in the server's queue, when
// that saves something, and every call queued meanwhile goes out together, pipelined, as soon as
// that round trip is back. So an idle store adds no latency, and a busy one sends a round trip per
// round trip's time and server, whatever its number of requests, and Redis reads and answers them
// in one go: most of a decision's cost to Redis is its networking, which the calls of one round
// trip share (BENCHMARKS.md).
//
// A call waits in the queue only when, by the round trips seen lately, the one in flight lands
// and the next comes back with time to spare before the call's deadline (see queue.worth);
// otherwise it goes out at once, on its own, beside the one in flight, as it would without
// sharing. So slow round trips, or a deadline tight for them, turn sharing off, and fast ones
// turn it on again. Each call still waits at most its own deadline: one whose deadline
// passes while queued returns then, unsent, which says nothing of Redis; one whose deadline
// passes while in flight returns then too.
//
// It holds no goroutine while idle: the one that sends a server's queued calls is started when the
// round trip in flight lands with calls queued behind it, and ends with the queue.
type batcher struct {
	cluster *redis.ClusterClient // the store's client, if it is one: a queue per master
	one     queue                // of the server, or of a cluster's keys whose master is unknown
	masters sync.Map             // *redis.Client of a master → *queue
}

// A queue is the calls to one server that wait for the round trip in flight to it.
type queue struct {
	mu      sync.Mutex
	busy    bool          // a round trip is in flight, whose sender will send what is queued
	since   time.Time     // when it was sent
	rtt     time.Duration // the round trips' time, a moving average; 0 before the first
	waiting []*shared
}

// A shared is a script call that waits in a queue, and then in a shared round trip.
type shared struct {
	ctx    context.Context // the round trip's, with the call's deadline (see newRoundTrip)
	client pipeliner       // the store's
	scriptCall
	taken bool          // in a round trip: sent, or on its way (under the queue's mu)
	gone  bool          // its caller left before it was taken: never to be sent (same)
	cmd   *redis.Cmd    // its answer, set before done is closed
	done  chan struct{} // closed when the round trip that carried it is back
}

// newBatcher returns the batcher of a store whose client is on one server (oneServer) or a
// cluster, or nil when the client spreads a round trip over several servers (a *redis.Ring,
// whose pipeline waits for the slowest shard): each call then goes on its own, as it does with a
// client that cannot pipeline.
func newBatcher(oneServer bool, cluster *redis.ClusterClient) *batcher {
	if !oneServer && cluster == nil {
		return nil
	}
	return &batcher{cluster: cluster}
}

// send runs script on keys with args within ctx, whose deadline bounds the call: in a round trip
// of its own, or shared with the calls to the same server (see batcher). It is what script.Run
// does, the round trip shared, and reports whether the call was sent: one that waited in the
// queue until its deadline was not.
func (s *Store) send(ctx context.Context, sc scriptCall) (*redis.Cmd, bool) {
	p, ok := s.client.(pipeliner)
	if s.batch == nil || !ok {
		return sc.script.run(ctx, s.client, sc.keys, sc.args), true
	}
	return s.batch.queueOf(ctx, sc.keys[0]).send(ctx, s.client, p, sc)
}

// queueOf returns the queue of the server that holds key: on a cluster its slot's master.
func (b *batcher) queueOf(ctx context.Context, key string) *queue {
	if b.cluster == nil {
		return &b.one
	}
	node, err := b.cluster.MasterForKey(ctx, key)
	if err != nil {
		return &b.one // no slot map: the cluster's pipeline finds the node, or fails
	}
	if q, ok := b.masters.Load(node); ok {
		return q.(*queue)
	}
	q, _ := b.masters.LoadOrStore(node, &queue{})
	return q.(*queue)
}

// send makes the call at once when no round trip to q's server is in flight, or when waiting for
// it would not leave the call time to spare (see worth), and otherwise queues it for the next,
// until ctx's deadline. It reports whether the call was sent.
// client is the store's, and p the same.
func (q *queue) send(ctx context.Context, client redis.Scripter, p pipeliner, sc scriptCall) (*redis.Cmd, bool) {
	q.mu.Lock()
	if !q.busy {
		q.busy, q.since = true, time.Now()
		q.mu.Unlock()
		cmd := sc.script.run(ctx, client, sc.keys, sc.args)
		q.next(time.Now())
		return cmd, true
	}
	if !q.worth(ctx) {
		q.mu.Unlock()
		return sc.script.run(ctx, client, sc.keys, sc.args), true // beside the round trip in flight
	}
	c := &shared{ctx: ctx, client: p, scriptCall: sc, done: make(chan struct{})}
	q.waiting = append(q.waiting, c)
	q.mu.Unlock()
	select {
	case <-c.done:
		return c.cmd, true
	case <-ctx.Done():
	}
	q.mu.Lock()
	sent := c.taken
	c.gone = !sent
	q.mu.Unlock()
	// Queued or in flight: either way its time is up (take sends no call past its deadline).
	cmd := redis.NewCmd(ctx)
	cmd.SetErr(ctx.Err())
	return cmd, sent
}

// worth reports, with q locked and a round trip in flight, whether a call of ctx may wait for it:
// when, by the round trips' time as seen lately, that round trip lands and the next comes back
// with two more round trips' time to spare before ctx's deadline, so that round trips twice as
// slow as lately still leave it time. Before any round trip has landed, it may not: the first
// (a dial, a script to load) can take several round trips, which a call queued behind it would
// wait through and then need one more, where sent beside it the call takes the same time.
func (q *queue) worth(ctx context.Context) bool {
	deadline, ok := ctx.Deadline()
	switch {
	case !ok:
		return true
	case q.rtt == 0:
		return false
	}
	landing := max(q.rtt-time.Since(q.since), 0)
	return landing+2*q.rtt <= time.Until(deadline)
}

// next hands the calls queued behind the round trip that just landed at now to a goroutine that
// sends them, or marks q idle when there are none.
func (q *queue) next(now time.Time) {
	if calls := q.take(now); calls != nil {
		go q.drain(calls)
	}
}

// take records that the round trip in flight landed at now, and returns the calls to send next,
// up to maxShared, leaving out those whose deadline has passed or whose caller left, which will
// not be sent; none marks q idle.
func (q *queue) take(now time.Time) []*shared {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.observe(now.Sub(q.since))
	var calls []*shared
	n := 0
	for _, c := range q.waiting {
		if len(calls) == maxShared {
			break
		}
		n++
		if c.gone = c.gone || !q.lands(c.ctx, now); !c.gone {
			c.taken = true
			calls = append(calls, c)
		}
	}
	rest := copy(q.waiting, q.waiting[n:])
	clear(q.waiting[rest:])
	q.waiting = q.waiting[:rest]
	if calls == nil {
		q.busy = false
	}
	q.since = now
	return calls
}

// lands reports, with q locked, whether a round trip sent at now for a call of ctx comes back
// before its deadline, by the round trips' time: one that would not is not sent, and fails at
// its deadline as a call that ran out of time in the queue.
func (q *queue) lands(ctx context.Context, now time.Time) bool {
	deadline, ok := ctx.Deadline()
	return !ok || deadline.Sub(now) > q.rtt
}

// observe takes the time of a round trip into q's estimate, with q locked: at once down to a
// faster one, and a quarter up towards a slower one, so that the first round trips (a dial, a
// script to load) and a few stalls of this process on a loaded host do not turn sharing off,
// while round trips that stay slow do within a dozen or so.
func (q *queue) observe(d time.Duration) {
	if q.rtt == 0 || d < q.rtt {
		q.rtt = d
		return
	}
	q.rtt = min(q.rtt+q.rtt/4+1, d)
}

// drain sends calls, and then what was queued meanwhile, until the queue is empty.
func (q *queue) drain(calls []*shared) {
	for ; calls != nil; calls = q.take(time.Now()) {
		exec(calls)
	}
}

// exec sends calls in one pipelined round trip, by EVALSHA, and again by EVAL those whose script
// the server had not (the first calls, or after a restart), which loads it, as script.Run does.
// The round trip carries the values of the first call's context and lasts until the latest of
// their deadlines; each caller waits only until its own.
func exec(calls []*shared) {
	latest, _ := calls[0].ctx.Deadline()
	for _, c := range calls[1:] {
		if d, _ := c.ctx.Deadline(); d.After(latest) {
			latest = d
		}
	}
	ctx, cancel := context.WithDeadline(context.WithoutCancel(calls[0].ctx), latest)
	defer cancel()
	pipe := calls[0].client.Pipeline()
	for _, c := range calls {
		c.cmd = c.script.queue(ctx, pipe, false, c.keys, c.args)
	}
	pipe.Exec(ctx) // each command has its own error
	var redo redis.Pipeliner
	for _, c := range calls {
		if redis.HasErrorPrefix(c.cmd.Err(), "NOSCRIPT") {
			if redo == nil {
				redo = calls[0].client.Pipeline()
			}
			c.cmd = c.script.queue(ctx, redo, true, c.keys, c.args)
		}
	}
	if redo != nil {
		redo.Exec(ctx)
	}
	for _, c := range calls {
		close(c.done)
	}
}
