package overload

import (
	"container/list"
	"math"
	"net/http"
	"sync"
	"time"

	"github.com/retryafter/retryafter"
	"github.com/retryafter/retryafter/internal/clock"
	"github.com/retryafter/retryafter/internal/door"
)

// Defaults of a [Concurrency].
const (
	defaultQueueWait   = time.Second
	defaultServiceTime = time.Second
)

// serviceWeight is the weight of the newest service time in the moving average a
// [Concurrency] keeps: about the last 16 requests count.
const serviceWeight = 1.0 / 16

// A Concurrency lets at most Max requests run at once, may hold a bounded queue of others for a
// bounded time, and answers the rest 503 Service Unavailable with a Retry-After and a Date from
// one clock reading: a limit on what the server can do at once, where [retryafter.Limit] is one
// on what a client may ask.
//
//	c := &overload.Concurrency{Max: 64, Queue: 256}
//	r.Use(c.Handler)
//	r.Use(retryafter.Limit(rate.Every(200*time.Millisecond), 10))
//
// Retry-After follows the pace at which slots free and the requests waiting ahead: each slot is
// taken to free once per the moving average of how long requests hold one, or, while its request
// has run longer, once per that request's age, so that one slot held for any length of time
// changes the pace by its share at most. A refused request is told the whole number of seconds,
// never 0, after which a slot should have freed for it; clients refused together are told
// different seconds, each second as many as the slots free in one, so that they come back as fast
// as requests complete (see [retryafter.Spread]). Each comes back at the fraction of a second it
// was refused at: of a flood refused at one instant, those beyond the slots and the queue are
// refused again.
//
// A request that finds every slot taken waits in the queue, first come first served, until a
// slot frees, QueueWait passes (it is then refused), or the client hangs up (it leaves the
// queue). A handler that panics frees its slot. A CORS preflight that CORS middleware answers is
// passed on uncounted; a request only shaped as one takes a slot as any other. Mount it with
// [retryafter.Limit] in either order: outside, a request it refuses costs no quota; inside, only
// admitted requests take a slot. A [retryafter.Maintenance] goes before both.
//
// A Concurrency is configured by its fields, which must be set before its Handler is first
// called; Max must be at least 1 and the zero value is not ready. One Concurrency may guard
// several handlers, which then share its slots. It is safe for concurrent use, and must not be
// copied after first use.
type Concurrency struct {
	// Max is the most requests that run at once. Handler panics if it is below 1.
	Max int

	// MaxPerKey, if above 0, is the most requests of one client (named by Key) that run or
	// wait in the queue at once. A request over it is refused without waiting, told the time
	// until one of the client's own requests should complete.
	MaxPerKey int

	// Key names the client a request counts against for MaxPerKey. If nil, the default is
	// [retryafter.ClientIP] with no trusted proxy. A request whose key function fails is answered 500
	// Internal Server Error. It is called only when MaxPerKey is set.
	Key retryafter.KeyFunc

	// Queue is the most requests that wait for a slot. If zero, none waits: a request that
	// finds every slot taken is refused at once.
	Queue int

	// QueueWait is the longest a request waits in the queue. If zero, the default is one
	// second.
	QueueWait time.Duration

	// ServiceTime is how long a request is taken to hold its slot until requests have
	// completed and their times are measured. If zero, the default is one second. A value
	// above the true one makes the first requests refused wait longer than they need; below,
	// come back before a slot is free.
	ServiceTime time.Duration

	// Now is the clock, read once as a request is refused for both Retry-After and Date, and
	// as a request takes and frees its slot. If nil, the default is time.Now.
	Now func() time.Time

	// Respond writes the status line and body of the 503. If nil, the default is a short plain
	// text; set it to a [retryafter.ProblemDetails]' Respond method for RFC 9457 problem
	// objects, of type temporary-reduced-capacity.
	Respond retryafter.Responder

	// OnShed is told of every request refused with a 503, before it is answered, for logs and
	// metrics. It runs on the request's goroutine and must be safe for concurrent use. If nil,
	// there is none.
	OnShed func(r *http.Request, s Shed)

	once       sync.Once
	preflights door.Shared // what the nexts of its handlers do with requests shaped as preflights
	key        retryafter.KeyFunc
	mu         sync.Mutex
	state      concurrencyState
	ret        clock.Returns
}

// A Shed describes a request that a [Concurrency] refused, for its OnShed hook.
type Shed struct {
	// Reason says why the request was refused.
	Reason ShedReason

	// Key is the client's key when MaxPerKey is set, and empty otherwise.
	Key string

	// RetryAfter is the wait the client is told, in whole seconds.
	RetryAfter time.Duration

	// Running and Queued are the requests that held a slot and that waited for one, as the
	// request was refused.
	Running, Queued int

	// ServiceTime is how long a request was taken to hold its slot, as measured, as
	// [ConcurrencyLoad] reports it. RetryAfter follows the pace of each slot instead (see
	// [Concurrency]), so that one request held long does not decide it.
	ServiceTime time.Duration
}

// A ConcurrencyLoad is what a [Concurrency] holds at one instant, for gauges.
type ConcurrencyLoad struct {
	// Running and Queued are the requests that hold a slot and that wait for one.
	Running, Queued int

	// ServiceTime is how long a request is taken to hold its slot: the measured moving
	// average, ServiceTime before anything was measured, or the mean age of the running
	// requests when that is longer.
	ServiceTime time.Duration
}

// Load reports what c holds now. It is safe to call while requests are served.
func (c *Concurrency) Load() ConcurrencyLoad {
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	return ConcurrencyLoad{Running: c.state.running, Queued: c.state.queue.Len(), ServiceTime: fromSeconds(c.serviceTime(now))}
}

// A ShedReason says why a [Concurrency] refused a request.
type ShedReason int

const (
	// ShedFull: every slot was taken and the queue full (or there is none).
	ShedFull ShedReason = iota + 1
	// ShedTimeout: the request waited QueueWait in the queue without getting a slot.
	ShedTimeout
	// ShedKey: the client had MaxPerKey requests running or waiting.
	ShedKey
	// ShedCanceled: the request's context ended while it waited in the queue.
	ShedCanceled
)

// String returns the reason's name in lower case ("full", "timeout", "key", "canceled"), for a
// metric's attribute.
func (r ShedReason) String() string {
	switch r {
	case ShedFull:
		return "full"
	case ShedTimeout:
		return "timeout"
	case ShedKey:
		return "key"
	case ShedCanceled:
		return "canceled"
	}
	return "unknown"
}

// concurrencyState is what a Concurrency counts, under its mutex.
type concurrencyState struct {
	running  int
	queue    list.List // of *waiter, first come first
	keys     map[string]*keySlots
	service  float64 // moving average of the seconds a request holds its slot; 0 until measured
	startSum float64 // sum of the start of every running request, in seconds since base
	base     time.Time
	// starts holds the start of the request in each slot that has been taken, in seconds since
	// base, or +Inf while the slot is free; owners its client, when MaxPerKey is set; free the
	// indices of the free ones.
	starts []float64
	owners []*keySlots
	free   []int
}

// keySlots is what one client holds, while it holds anything.
type keySlots struct {
	name    string
	running int
	queued  int
}

// A waiter is a request in the queue. ready is closed when it is given a slot.
type waiter struct {
	ready   chan struct{}
	granted bool // under the mutex
	held    held
	key     *keySlots
}

// held is the slot a request holds, and when it took it.
type held struct {
	slot  int
	start time.Time
}

// Handler returns next behind the limit. With chi: r.Use(c.Handler). It panics if next is
// nil, Max is below 1, or MaxPerKey, Queue, QueueWait or ServiceTime is negative.
func (c *Concurrency) Handler(next http.Handler) http.Handler {
	switch {
	case next == nil:
		panic("retryafter: Concurrency.Handler(nil)")
	case c.Max < 1:
		panic("retryafter: Concurrency.Max below 1")
	case c.MaxPerKey < 0, c.Queue < 0, c.QueueWait < 0, c.ServiceTime < 0:
		panic("retryafter: Concurrency with a negative MaxPerKey, Queue, QueueWait or ServiceTime")
	}
	c.once.Do(func() {
		c.key = c.Key
		if c.key == nil {
			c.key = retryafter.ClientIP()
		}
		c.state.base = c.now()
	})
	return &concurrencyHandler{c: c, next: next, preflights: door.Memory{Shared: &c.preflights, Next: door.HandlerID(next)}}
}

// concurrencyHandler is the handler [Concurrency.Handler] wraps around next.
type concurrencyHandler struct {
	c          *Concurrency
	next       http.Handler
	preflights door.Memory // what next does with requests shaped as preflights
}

func (h *concurrencyHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// Free when it is one, which only the answer tells: see package internal/door.
	preflight := door.IsPreflight(r)
	if preflight && h.preflights.Pass(h, w, r) {
		return
	}
	k, slot, ok := h.c.admit(w, r)
	if !ok {
		return
	}
	defer h.c.release(k, slot)
	h.next.ServeHTTP(w, r)
	if preflight {
		h.preflights.Learn(r, door.AnswersPreflight(w.Header()))
	}
}

// Serve implements door.Door.
func (h *concurrencyHandler) Serve(w http.ResponseWriter, r *http.Request) { h.next.ServeHTTP(w, r) }

// Enter implements door.Door: r takes a slot, which it frees once next has returned.
func (h *concurrencyHandler) Enter(w http.ResponseWriter, r *http.Request) (func(), bool) {
	k, slot, ok := h.c.admit(w, r)
	if !ok {
		return nil, false
	}
	return func() { h.c.release(k, slot) }, true
}

// admit gives r a slot, as acquire does, after finding its key when MaxPerKey is set; or it
// refuses r, answers it, and reports false.
func (c *Concurrency) admit(w http.ResponseWriter, r *http.Request) (*keySlots, held, bool) {
	key := ""
	if c.MaxPerKey > 0 {
		var err error
		if key, err = c.key(r); err != nil {
			retryafter.Refuse(w, r, retryafter.Refusal{Status: http.StatusInternalServerError}, c.Respond, c.now())
			return nil, held{}, false
		}
	}
	return c.acquire(w, r, key)
}

func (c *Concurrency) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}

func (c *Concurrency) queueWait() time.Duration {
	if c.QueueWait > 0 {
		return c.QueueWait
	}
	return defaultQueueWait
}

// acquire gives r a slot, at once or after a wait in the queue, and returns its key's slots and
// the slot; or it refuses r, answers it, and reports false.
func (c *Concurrency) acquire(w http.ResponseWriter, r *http.Request, key string) (*keySlots, held, bool) {
	now := c.now()
	st := &c.state
	c.mu.Lock()
	var k *keySlots
	if c.MaxPerKey > 0 {
		if k = st.keys[key]; k == nil {
			if st.keys == nil {
				st.keys = make(map[string]*keySlots)
			}
			k = &keySlots{name: key}
			st.keys[key] = k
		}
	}
	if k != nil && k.running+k.queued >= c.MaxPerKey {
		c.shed(w, r, now, k, ShedKey) // unlocks
		return nil, held{}, false
	}
	if st.running < c.Max && st.queue.Len() == 0 {
		h := c.take(k, now)
		c.mu.Unlock()
		return k, h, true
	}
	if st.queue.Len() >= c.Queue {
		c.shed(w, r, now, k, ShedFull)
		return nil, held{}, false
	}
	wt := &waiter{ready: make(chan struct{}), key: k}
	e := st.queue.PushBack(wt)
	if k != nil {
		k.queued++
	}
	c.mu.Unlock()

	timer := time.NewTimer(c.queueWait())
	defer timer.Stop()
	reason := ShedTimeout
	select {
	case <-wt.ready:
		return k, wt.held, true
	case <-r.Context().Done():
		reason = ShedCanceled
	case <-timer.C:
	}
	now = c.now()
	c.mu.Lock()
	if wt.granted { // given a slot as it gave up: it is its own
		c.mu.Unlock()
		return k, wt.held, true
	}
	st.queue.Remove(e)
	if k != nil {
		k.queued--
	}
	c.shed(w, r, now, k, reason)
	return nil, held{}, false
}

// take counts a request of k (nil: no key) that gets a slot at now, and returns the slot. The
// mutex is held.
func (c *Concurrency) take(k *keySlots, now time.Time) held {
	st := &c.state
	st.running++
	at := now.Sub(st.base).Seconds()
	st.startSum += at
	if k != nil {
		k.running++
	}
	if n := len(st.free); n > 0 {
		slot := st.free[n-1]
		st.free = st.free[:n-1]
		st.starts[slot], st.owners[slot] = at, k
		return held{slot, now}
	}
	st.starts, st.owners = append(st.starts, at), append(st.owners, k)
	return held{len(st.starts) - 1, now}
}

// release frees the slot h of a request of k, measures how long it held it, and gives it to the
// first request in the queue.
func (c *Concurrency) release(k *keySlots, h held) {
	now := c.now()
	st := &c.state
	c.mu.Lock()
	defer c.mu.Unlock()
	st.running--
	st.startSum -= h.start.Sub(st.base).Seconds()
	st.starts[h.slot], st.owners[h.slot] = math.Inf(1), nil
	st.free = append(st.free, h.slot)
	c.measure(max(now.Sub(h.start).Seconds(), 0))
	if k != nil {
		k.running--
		c.forget(k)
	}
	if e := st.queue.Front(); e != nil {
		wt := st.queue.Remove(e).(*waiter)
		if wt.key != nil {
			wt.key.queued--
		}
		wt.held = c.take(wt.key, now)
		wt.granted = true
		close(wt.ready)
	}
}

// measure adds d, the seconds a request held its slot, to the moving average. A request longer
// than the average counts as at most so much longer that the pace of Max slots falls to that of
// Max-1: one request, however long, changes the pace by its slot's share at most. The mutex is
// held.
func (c *Concurrency) measure(d float64) {
	st := &c.state
	if st.service == 0 {
		st.service = max(d, 1e-9)
		return
	}
	if c.Max > 1 {
		d = min(d, st.service*(1+1/(serviceWeight*float64(c.Max-1))))
	}
	st.service += serviceWeight * (d - st.service)
}

// forget drops k when it holds nothing. The mutex is held.
func (c *Concurrency) forget(k *keySlots) {
	if k.running == 0 && k.queued == 0 {
		delete(c.state.keys, k.name)
	}
}

// serviceTime returns how long a request is taken to hold its slot at now, for [Concurrency.Load]
// and [Shed]: the moving average, or the mean age of the running requests when longer, as when the
// requests got stuck. The mutex is held.
func (c *Concurrency) serviceTime(now time.Time) float64 {
	st := &c.state
	s := c.average()
	if st.running > 0 {
		age := now.Sub(st.base).Seconds() - st.startSum/float64(st.running)
		s = max(s, age)
	}
	return s
}

// average returns the moving average of the seconds a request holds its slot, or ServiceTime
// until there is one. The mutex is held.
func (c *Concurrency) average() float64 {
	if s := c.state.service; s > 0 {
		return s
	}
	if c.ServiceTime > 0 {
		return c.ServiceTime.Seconds()
	}
	return defaultServiceTime.Seconds()
}

// pace returns how many slots free a second at now, of the Max slots, or of the MaxPerKey slots
// of k when k is not nil: each slot once per the moving average, or, while its request has run
// longer, once per that request's age. The mutex is held.
func (c *Concurrency) pace(now time.Time, k *keySlots) float64 {
	st := &c.state
	s := c.average()
	t := now.Sub(st.base).Seconds()
	young, old := c.Max, 0.0
	if k != nil {
		young = c.MaxPerKey
	}
	for i, start := range st.starts {
		if age := t - start; age > s && (k == nil || st.owners[i] == k) { // never a free slot, whose start is +Inf
			young--
			old += 1 / age
		}
	}
	return float64(young)/s + old
}

// firstDone returns how many seconds from now the first request of k may complete when none of
// them runs: its first in the queue gets a slot once those before it have (the slots free at
// pace), then runs for the moving average. 0 when one of them runs. The mutex is held.
func (c *Concurrency) firstDone(now time.Time, k *keySlots) float64 {
	if k.running > 0 {
		return 0
	}
	ahead := 0
	for e := c.state.queue.Front(); e != nil && e.Value.(*waiter).key != k; e = e.Next() {
		ahead++
	}
	return float64(ahead+1)/c.pace(now, nil) + c.average()
}

// shed refuses r at now for reason, tells the hook and answers it. The mutex is held; shed
// unlocks it.
func (c *Concurrency) shed(w http.ResponseWriter, r *http.Request, now time.Time, k *keySlots, reason ShedReason) {
	st := &c.state
	var wait time.Duration
	if reason == ShedKey {
		// The client's own slots: one of them frees for each waiting request, and one more;
		// with none running, not before its first waiting request gets a slot and completes.
		wait = fromSeconds(max(float64(k.queued+1)/c.pace(now, k), c.firstDone(now, k)))
	} else {
		// The slots free perSecond a second; those waiting go first. Each second is told
		// the returns of that pace, the held slots' share in it, and no cap of its own.
		perSecond := c.pace(now, nil)
		wait = fromSeconds(float64(st.queue.Len()+1) / perSecond)
		wait = c.ret.SpreadWait(now, wait, perSecond, 0, 1)
	}
	sh := Shed{Reason: reason, RetryAfter: wait, Running: st.running, Queued: st.queue.Len(), ServiceTime: fromSeconds(c.serviceTime(now))}
	if k != nil {
		sh.Key = k.name
		c.forget(k)
	}
	c.mu.Unlock()
	if wait%time.Second != 0 {
		wait = (wait/time.Second + 1) * time.Second
	}
	sh.RetryAfter = max(wait, time.Second)
	if c.OnShed != nil {
		c.OnShed(r, sh)
	}
	retryafter.Refuse(w, r, retryafter.Refusal{Status: http.StatusServiceUnavailable, RetryAfter: sh.RetryAfter, Type: retryafter.ProblemReducedCapacity}, c.Respond, now)
}

// fromSeconds converts s seconds to a Duration, saturating at 2^62 ns (146 years), which leaves
// room to round it up.
func fromSeconds(s float64) time.Duration {
	return time.Duration(min(s*float64(time.Second), 1<<62))
}
