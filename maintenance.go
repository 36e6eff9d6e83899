package retryafter

import (
	"net/http"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

// defaultMaintenanceWait is the Retry-After of a [Maintenance] with no end to count down to,
// when no [WithMaintenanceWait] is given.
const defaultMaintenanceWait = time.Minute

// A Maintenance is a switch that, while on, answers every request that is not exempt with
// 503 Service Unavailable, a Retry-After that counts down to the announced end of the work, and
// a Date from the same clock reading, so that well-behaved clients and crawlers come back when
// the work is done instead of retrying at once or giving up.
//
// Retry-After is in delay-seconds by default: the time left until the announced end, rounded up
// to whole seconds and never 0. With [WithHTTPDate] it is the announced end itself, rounded up
// to the next whole second, as an IMF-fixdate; Date is the clock reading truncated to the second,
// so that a client that subtracts Date from the date never waits less than the time left.
//
// When there is no end to count down to, Retry-After is the wait set by [WithMaintenanceWait]
// (60 seconds by default), in the chosen form. That is the case when [Maintenance.Start] was
// given the zero time (end unknown) and when the announced end has passed and
// [Maintenance.Stop] has not been called (an overrun): Retry-After is then never 0, negative or
// a date in the past, and clients keep a steady pace instead of all retrying every second while
// the service is still busy. To announce a new end, call Start again.
//
// Requests exempted by [WithExempt] (health checks, an admin route) are passed to the next
// handler. The body is the [Responder]'s, as for a 429 ([WithResponder]); the default is a short
// plain text, and a HEAD request gets none.
//
// The zero value is not usable; use [NewMaintenance]. A Maintenance is safe for concurrent use:
// Start and Stop may be called from any goroutine while requests are served, and each request
// sees one state or the other. While it is off, a request costs one atomic load.
type Maintenance struct {
	state   atomic.Pointer[window] // nil while off
	now     func() time.Time
	respond Responder
	exempt  func(*http.Request) bool
	wait    time.Duration
	date    bool
	emit    emitter
}

// window is the state of a Maintenance that is on.
type window struct {
	until time.Time // the announced end; zero when unknown
}

// NewMaintenance returns a [Maintenance] that is off until [Maintenance.Start] is called. It
// reads [WithClock], [WithResponder], [WithHTTPDate], [WithExempt] and [WithMaintenanceWait].
func NewMaintenance(opts ...Option) *Maintenance {
	c := newConfig(opts)
	return &Maintenance{
		now:     c.now,
		respond: c.respond,
		exempt:  c.exempt,
		wait:    c.openWait,
		date:    c.httpDate,
	}
}

// Start turns maintenance on, or announces a new end if it is on already: from now until
// [Maintenance.Stop] is called, requests that are not exempt are answered 503 with a Retry-After
// that counts down to until. Maintenance does not end by itself at until: the announced end is
// what clients are told, and Stop is what ends it.
//
// The zero time means the end is unknown, and an until that has passed means the work is late;
// either way Retry-After is the wait set by [WithMaintenanceWait]. An until in the past is
// accepted rather than refused, since turning maintenance on must not fail for want of a good
// estimate.
func (m *Maintenance) Start(until time.Time) {
	m.state.Store(&window{until: until})
}

// Stop turns maintenance off: requests are passed to the next handler again. Stopping a
// Maintenance that is off does nothing.
func (m *Maintenance) Stop() {
	m.state.Store(nil)
}

// Until reports whether maintenance is on and, if so, the end announced by the last
// [Maintenance.Start] (the zero time when unknown).
func (m *Maintenance) Until() (until time.Time, on bool) {
	w := m.state.Load()
	if w == nil {
		return time.Time{}, false
	}
	return w.until, true
}

// Handler returns next behind the switch: while maintenance is off, or for an exempt request, it
// calls next; otherwise it answers 503 Service Unavailable itself. With chi: r.Use(m.Handler).
//
// Mounted before a rate limiter such as [Limit], a request answered 503 never reaches the
// limiter and costs no quota; mounted after it, the limiter counts the request first.
func (m *Maintenance) Handler(next http.Handler) http.Handler {
	if next == nil {
		panic("retryafter: Maintenance.Handler(nil)")
	}
	return &maintenanceHandler{m: m, next: next}
}

// maintenanceHandler is the handler [Maintenance.Handler] wraps around next.
type maintenanceHandler struct {
	m    *Maintenance
	next http.Handler
}

func (h *maintenanceHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	win := h.m.state.Load()
	if win == nil || (h.m.exempt != nil && h.m.exempt(r)) {
		h.next.ServeHTTP(w, r)
		return
	}
	h.m.refuse(w, r, win.until)
}

// refuse answers r with 503, Date and a Retry-After counting down to until, from one clock
// reading.
func (m *Maintenance) refuse(w http.ResponseWriter, r *http.Request, until time.Time) {
	now := m.now()
	if until.IsZero() || !until.After(now) {
		until = time.Time{}
	}
	if m.date {
		if until.IsZero() {
			until = now.Add(m.wait)
		}
		m.emit.refuseUntil(w, r, m.respond, http.StatusServiceUnavailable, now, until)
		return
	}
	wait := m.wait
	if !until.IsZero() {
		// An end too far away for a Duration saturates at rate.InfDuration, which the
		// emitter takes for "never"; one nanosecond less still rounds to a finite header.
		wait = min(until.Sub(now), rate.InfDuration-1)
	}
	m.emit.refuse(w, r, m.respond, http.StatusServiceUnavailable, now, wait, nil)
}

// WithHTTPDate makes a [Maintenance] state Retry-After as an HTTP-date (IMF-fixdate, in GMT):
// the announced end rounded up to the next whole second, rather than the time left in
// delay-seconds. The seconds form, the default, depends on nobody's clock; the date form suits
// clients that schedule by the wall clock, and a client that subtracts the response's Date from
// it, as [ParseRetryAfter] does, is unaffected by its own clock's skew. Since the date is
// rounded up and Date truncated, such a client may wait up to two seconds more than the time
// truly left (the seconds form: less than one), and never less. It affects [NewMaintenance].
func WithHTTPDate() Option {
	return func(c *config) { c.httpDate = true }
}

// WithExempt makes a [Maintenance] pass the requests for which exempt reports true to the next
// handler while it is on: health checks, an admin route, an operator's address. exempt runs only
// while maintenance is on, on the request's goroutine, and must be safe for concurrent use.
// Given more than once, a request exempted by any of them passes. The default exempts nothing.
// It panics if exempt is nil. It affects [NewMaintenance].
func WithExempt(exempt func(r *http.Request) bool) Option {
	if exempt == nil {
		panic("retryafter: WithExempt(nil)")
	}
	return func(c *config) {
		if prev := c.exempt; prev != nil {
			c.exempt = func(r *http.Request) bool { return prev(r) || exempt(r) }
			return
		}
		c.exempt = exempt
	}
}

// WithMaintenanceWait sets the Retry-After a [Maintenance] states when it has no end to count
// down to: [Maintenance.Start] was given the zero time, or the announced end has passed and
// [Maintenance.Stop] has not been called. It is rounded up to whole seconds (in the date form,
// the date it points to is rounded up). The default is 60 seconds. It panics if d is not
// positive or is [rate.InfDuration]. It affects [NewMaintenance].
func WithMaintenanceWait(d time.Duration) Option {
	if d <= 0 || d >= rate.InfDuration {
		panic("retryafter: WithMaintenanceWait out of range")
	}
	return func(c *config) { c.openWait = d }
}
