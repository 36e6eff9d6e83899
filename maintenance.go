package retryafter

import (
	"net/http"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/retryafter/retryafter/internal/clock"
	"github.com/retryafter/retryafter/internal/door"
	"github.com/retryafter/retryafter/internal/downtime"
	"github.com/retryafter/retryafter/internal/header"
)

// defaultMaintenanceWait is the Retry-After of a [Maintenance] with no end to count down to,
// when its Wait is not set.
const defaultMaintenanceWait = time.Minute

// A Maintenance is a switch that, while on, answers every request that is not exempt with
// 503 Service Unavailable, a Retry-After that counts down to the announced end of the work, and
// a Date from the same clock reading, so that well-behaved clients and crawlers come back when
// the work is done instead of retrying at once or giving up.
//
//	var m retryafter.Maintenance
//	r.Use(m.Handler)
//	m.Start(time.Now().Add(15 * time.Minute))
//
// Retry-After is in delay-seconds by default: the time left until the announced end, rounded up
// to whole seconds and never 0. With HTTPDate it is the announced end itself, rounded up to the
// next whole second, as an IMF-fixdate; Date is the clock reading truncated to the second, so
// that a client that subtracts Date from the date never waits less than the time left.
//
// When the end is unknown ([Maintenance.Start] was given the zero time), Retry-After is Wait, in
// the chosen form. When the announced end has passed and [Maintenance.Stop] has not been called
// (an overrun), Retry-After is how late the work is so far, at least one second and at most
// Wait: a client that comes back as told finds the work late by twice as long, so the clients
// that return at the announced end are kept out, after Stop, no longer than the overrun itself
// (a second or so for an overrun of a second, rather than a whole Wait), and each is refused
// about log2(overrun in seconds) + 2 times before the waits reach Wait. Retry-After is never 0,
// negative or a date in the past. To announce a new end, call Start again.
//
// The zero value is ready to use, and off. A Maintenance is safe for concurrent use: Start and
// Stop may be called from any goroutine while requests are served, and each request sees one
// state or the other; while it is off, a request costs one atomic load. Its fields must be set
// before it is first used, and a Maintenance must not be copied after that.
type Maintenance struct {
	// HTTPDate states Retry-After as an HTTP-date (IMF-fixdate, in GMT) rather than in
	// delay-seconds. The seconds form, the default, depends on nobody's clock; the date form
	// suits clients that schedule by the wall clock, and a client that measures it against the
	// response's Date, as [ParseRetryAfter] does, is unaffected by its own clock's skew. Since
	// the date is rounded up and Date truncated, such a client may wait up to two seconds more
	// than the time truly left (the seconds form: less than one), and never less.
	HTTPDate bool

	// Now is the clock, read once per refused request for both Retry-After and Date. If nil,
	// the default is time.Now.
	Now func() time.Time

	// Wait is the Retry-After when the end is unknown, and the longest one while the work
	// overruns its announced end, rounded up to whole seconds. If zero or negative, the
	// default is 60 seconds.
	Wait time.Duration

	// Exempt reports the requests that pass to the next handler while maintenance is on:
	// health checks, an admin route, an operator's address. It runs only while maintenance is
	// on, on the request's goroutine, and must be safe for concurrent use. If nil, no request
	// is exempt.
	Exempt func(r *http.Request) bool

	// ReturnRate is how many of the clients refused before a known end the service can take
	// back each second after it. When it is set, each such client is told a second of its own,
	// never before the end, so that at most ReturnRate of them (rounded up to a whole client)
	// come back in each second of the server's clock, as far as an hour after the end, rather
	// than all at once, however long before the end it is refused. If zero, every one is told
	// the end itself. Each Start books afresh.
	ReturnRate rate.Limit

	// Respond writes the status line and body of the 503. If nil, the default is a short plain
	// text, and none for HEAD; set it to a [ProblemDetails]' Respond method for RFC 9457
	// problem objects.
	Respond Responder

	state      atomic.Pointer[window] // nil while off
	preflights door.Shared            // what the nexts of its handlers do with requests shaped as preflights
	emit       emitter
}

// window is the state of a Maintenance that is on.
type window struct {
	until   time.Time      // the announced end; zero when unknown
	returns *clock.Returns // the seconds booked for clients after it, with ReturnRate
}

// Start turns maintenance on, or announces a new end if it is on already: from now until
// [Maintenance.Stop] is called, requests that are not exempt are answered 503 with a Retry-After
// that counts down to until. Maintenance does not end by itself at until: the announced end is
// what clients are told, and Stop is what ends it.
//
// The zero time means the end is unknown: Retry-After is then Wait. An until that has passed
// means the work is late: Retry-After is then how late, at least a second and at most Wait. An
// until in the past is accepted rather than refused, since turning maintenance on must not fail
// for want of a good estimate.
func (m *Maintenance) Start(until time.Time) {
	m.state.Store(&window{until: until, returns: new(clock.Returns)})
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
// limiter and costs no quota; mounted after it, the limiter counts the request first. CORS
// middleware goes before both (see the package doc's Browsers section); a CORS preflight that
// CORS middleware answers, on either side, is passed on, never refused, and a request only
// shaped as one is refused as any other, by the rule of [LimitWith].
func (m *Maintenance) Handler(next http.Handler) http.Handler {
	if next == nil {
		panic("retryafter: Maintenance.Handler(nil)")
	}
	return &maintenanceHandler{m: m, next: next, preflights: door.Memory{Shared: &m.preflights, Next: door.HandlerID(next)}}
}

// maintenanceHandler is the handler [Maintenance.Handler] wraps around next.
type maintenanceHandler struct {
	m          *Maintenance
	next       http.Handler
	preflights door.Memory // what next does with requests shaped as preflights
}

func (h *maintenanceHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	win := h.m.state.Load()
	switch {
	case win == nil:
		h.next.ServeHTTP(w, r)
		if door.IsPreflight(r) {
			// What next does with a request shaped as a preflight is learned while off, so
			// that next need not run to show it while maintenance is on.
			h.preflights.Learn(r, door.AnswersPreflight(w.Header()))
		}
	case h.m.Exempt != nil && h.m.Exempt(r):
		h.next.ServeHTTP(w, r)
	case door.IsPreflight(r) && h.preflights.Pass(h, w, r):
		// Free when it is one, which only the answer tells: see package internal/door.
	default:
		h.m.refuse(w, r, win)
	}
}

// Serve implements door.Door.
func (h *maintenanceHandler) Serve(w http.ResponseWriter, r *http.Request) { h.next.ServeHTTP(w, r) }

// Enter implements door.Door: r is refused while maintenance is on, unless it is exempt.
func (h *maintenanceHandler) Enter(w http.ResponseWriter, r *http.Request) (func(), bool) {
	win := h.m.state.Load()
	if win == nil || (h.m.Exempt != nil && h.m.Exempt(r)) {
		return nil, true
	}
	h.m.refuse(w, r, win)
	return nil, false
}

// refuse answers r with 503, Date and a Retry-After counting down to until, from one clock
// reading.
func (m *Maintenance) refuse(w http.ResponseWriter, r *http.Request, win *window) {
	now := time.Now
	if m.Now != nil {
		now = m.Now
	}
	at := now()
	wait := m.Wait
	if wait <= 0 {
		wait = defaultMaintenanceWait
	}
	// An overrun, handled by downtime.Answer: come back when the work will have been late twice
	// as long, so that a short overrun costs a short wait and a long one backs off to Wait.
	end, wait, counting := downtime.Answer(at, win.until, wait)
	spread := counting && m.ReturnRate > 0
	// The schedule books the hour after the reading it is given: one further from the end is
	// given to it as 2 s before the end, so that the clients refused long before are spread
	// over the hour after the end too. Each is booked from the second it may come back in.
	booking := at
	if early := end.Add(-2 * time.Second); spread && early.After(at) {
		booking = early
	}
	if m.HTTPDate {
		if spread {
			end = time.Unix(win.returns.Book(booking, end, float64(m.ReturnRate), 0, 1, true), 0)
		}
		m.emit.refuseUntil(w, r, m.Respond, Refusal{Status: http.StatusServiceUnavailable}, at, end)
		return
	}
	if spread {
		first := time.Unix(at.Unix()+header.DelaySeconds(wait), 0)
		secs := win.returns.Book(booking, first, float64(m.ReturnRate), 0, 1, false) - at.Unix()
		wait = rate.InfDuration - 1 // a second further than a Duration holds: the longest it does
		if secs < int64(wait/time.Second) {
			wait = time.Duration(secs) * time.Second
		}
	}
	m.emit.refuse(w, r, m.Respond, Refusal{Status: http.StatusServiceUnavailable, RetryAfter: wait}, at, nil)
}
