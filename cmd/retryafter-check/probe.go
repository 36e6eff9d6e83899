package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"
)

// Defaults of [Probe].
const (
	defaultBudget  = 300
	defaultPace    = 50 * time.Millisecond
	defaultTimeout = 3 * time.Minute
)

// A Probe sends requests to one URL until one is refused with 429 or 503, then checks what the
// refusal told, as a client that obeys it would experience it.
type Probe struct {
	// URL is the one URL every request goes to: absolute, http or https.
	URL string

	// Method is the method of every request but the HEAD of the head check. If empty, the
	// default is GET.
	Method string

	// Header is sent with every request (an API key, say).
	Header http.Header

	// Body is sent with every request but HEAD.
	Body []byte

	// Origin, if not empty, is sent as the Origin of every request, and the cors check judges
	// whether a script of that origin can read Retry-After.
	Origin string

	// Budget is the most requests the probe sends. If zero or negative, the default is 300.
	Budget int

	// Pace is the least time between two requests while the probe seeks a refusal. The
	// checks' own requests go at the instants they test, each once. If zero or negative,
	// the default is 50 ms.
	Pace time.Duration

	// Timeout is the time budget of the whole run. If zero or negative, the default is
	// 3 minutes.
	Timeout time.Duration

	// Transport sends the requests, one at a time; the probe never follows a redirect. If nil,
	// the default is http.DefaultTransport.
	Transport http.RoundTripper

	// SkipLater skips the later round, which spends the quota again later in a window to find
	// a wait padded to the whole window (see later.go).
	SkipLater bool

	// Now is the probe's clock. If nil, the default is time.Now.
	Now func() time.Time

	// Sleep waits d, or until ctx is done, and then returns ctx's error. If nil, the default
	// waits on a timer.
	Sleep func(ctx context.Context, d time.Duration) error
}

// validate reports what is wrong with p's URL.
func (p Probe) validate() error {
	u, err := url.Parse(p.URL)
	switch {
	case err != nil:
		return err
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("%q: want an http or https URL", p.URL)
	case u.Host == "":
		return fmt.Errorf("%q: no host", p.URL)
	}
	return nil
}

// A session is one run of a Probe: its sender, and why it stopped early.
type session struct {
	p    Probe // with its defaults filled in
	s    *sender
	stop error // why the probe stopped before it was done; nil while it goes on
}

// stopWith records why the probe stopped; the first reason stands.
func (q *session) stopWith(err error) {
	if q.stop == nil {
		q.stop = err
	}
}

// notChecked is the check name, not run because the probe stopped.
func (q *session) notChecked(name string) Check {
	return na(name, "not checked: "+q.stop.Error())
}

// Run probes p.URL and reports what it found. It never sends more than p.Budget requests, nor
// runs much past p.Timeout.
func (p Probe) Run(ctx context.Context) *Report {
	if p.Method == "" {
		p.Method = http.MethodGet
	}
	if p.Budget <= 0 {
		p.Budget = defaultBudget
	}
	if p.Pace <= 0 {
		p.Pace = defaultPace
	}
	if p.Timeout <= 0 {
		p.Timeout = defaultTimeout
	}
	if p.Transport == nil {
		p.Transport = http.DefaultTransport
	}
	if p.Now == nil {
		p.Now = time.Now
	}
	if p.Sleep == nil {
		p.Sleep = sleepContext
	}
	h := p.Header.Clone()
	if h == nil {
		h = make(http.Header)
	}
	if p.Origin != "" {
		h.Set("Origin", p.Origin)
	}
	if h.Get("User-Agent") == "" {
		h.Set("User-Agent", "retryafter-check")
	}
	q := &session{p: p, s: &sender{
		rt: p.Transport, target: p.URL, method: p.Method, header: h, body: p.Body,
		budget: p.Budget, pace: p.Pace, timeout: p.Timeout,
		start: p.Now(), now: p.Now, sleep: p.Sleep,
	}}
	rep := &Report{Method: p.Method, URL: p.URL, Budget: p.Budget, Timeout: p.Timeout, TimeoutSeconds: p.Timeout.Seconds()}
	if err := p.validate(); err != nil {
		q.stopWith(err)
	} else {
		q.probe(ctx, rep)
	}
	rep.Requests, rep.FieldsCut = q.s.sent, q.s.cut
	rep.Elapsed = p.Now().Sub(q.s.start)
	rep.Seconds = rep.Elapsed.Round(time.Millisecond).Seconds()
	if q.stop != nil {
		rep.GaveUp = q.explain(q.stop, rep.Refusal != nil)
	}
	rep.Exit = rep.exitCode()
	return rep
}

// probe seeks a refusal and runs every check on it.
func (q *session) probe(ctx context.Context, rep *Report) {
	r1, err := q.s.provoke(ctx)
	if err != nil {
		q.stopWith(err)
		return
	}
	rep.Refusal = &Refusal{Request: r1.n, Status: r1.status, RetryAfter: r1.header["Retry-After"], Date: r1.header["Date"],
		AlreadyLimited: r1.n == 1 && r1.status == http.StatusTooManyRequests}

	var obey, tight, free, head Check
	if r1.status == http.StatusServiceUnavailable {
		// A maintenance window ends: HEAD goes first, while it is still on.
		head = q.checkHEADAfter(ctx, r1)
		if q.stop != nil {
			obey, tight, free = q.notChecked(checkObey), q.notChecked(checkTight), q.notChecked(checkFree)
		} else {
			obey, tight, free = q.retriesAfter503(ctx, r1)
		}
		if r1.n > 1 {
			// Admitted before it, the probe spent a quota: a 503 of a rate limiter.
			tight = q.laterRound(ctx, r1, tight)
		}
	} else {
		// HEAD goes last, so that whatever it costs falls on no other check.
		obey, tight, free = q.retriesAfter429(ctx, r1)
		tight = q.laterRound(ctx, r1, tight)
		head = q.headLast(ctx)
	}
	// The fields of every refusal of the run are judged, the retries' and HEAD's too: a client
	// meets them all.
	every := q.s.refusals
	retryAfter := judgeEvery(every, func(e *exchange) Check { return checkRetryAfterField(e, readTold(e)) })
	date := judgeEvery(every, checkDateField)
	cors := judgeEvery(every, func(e *exchange) Check { return checkCORSExposure(e, readTold(e), q.p.Origin) })
	rateLimit := judgeEvery(every, func(e *exchange) Check { return checkRateLimitFields(e, readTold(e)) })
	rep.Checks = []Check{retryAfter, date, obey, tight, free, head, cors, rateLimit}
}

// judgeEvery judges each of refusals, the refusals of a run in the order met, with check, and
// sums the verdicts up: the first failure, saying how many failed; else the first refusal's
// verdict (or the first pass, where the check does not apply to the first), saying how many
// passed.
func judgeEvery(refusals []*exchange, check func(*exchange) Check) Check {
	var first, failed, passed *Check
	var fails, passes int
	for i, e := range refusals {
		c := check(e)
		if i > 0 {
			c.Seen = fmt.Sprintf("request %d (%s): %s", e.n, e.method, c.Seen)
		}
		switch c.Result {
		case Fail:
			fails++
			if failed == nil {
				failed = &c
			}
		case Pass:
			passes++
			if passed == nil {
				passed = &c
			}
		}
		if first == nil {
			first = &c
		}
	}
	n := len(refusals)
	switch {
	case failed != nil:
		if n > 1 {
			failed.Seen += fmt.Sprintf(" (%d of %d refusals fail)", fails, n)
		}
		return *failed
	case passed == nil:
		return *first
	case passes == n && n > 1:
		passed.Seen += fmt.Sprintf(" (all %d refusals pass)", n)
	case n > 1:
		passed.Seen += fmt.Sprintf(" (%d of %d refusals pass, the others: n/a)", passes, n)
	}
	return *passed
}

// headLast seeks one more refusal and runs the head check on it.
func (q *session) headLast(ctx context.Context) Check {
	if q.p.Method != http.MethodGet {
		return na(checkHEAD, "HEAD mirrors GET; the probe sends "+q.p.Method)
	}
	if q.stop != nil {
		return q.notChecked(checkHEAD)
	}
	get, err := q.s.provoke(ctx)
	if err != nil {
		q.stopWith(err)
		return q.notChecked(checkHEAD)
	}
	return q.checkHEADAfter(ctx, get)
}

// explain turns why the probe stopped into a sentence for the report; refused says whether it
// had met a refusal.
func (q *session) explain(err error, refused bool) string {
	var tb *timeBudgetError
	switch {
	case len(q.s.statuses) == 0:
		return "could not run: " + err.Error()
	case errors.Is(err, context.Canceled):
		return "interrupted"
	case !refused && (errors.Is(err, errRequestBudget) || errors.As(err, &tb)):
		return fmt.Sprintf("no refusal: %s, after %d %s (%s)", err, q.s.sent, plural(q.s.sent, "request"), q.s.seen())
	case errors.Is(err, errRequestBudget), errors.As(err, &tb):
		return fmt.Sprintf("%s, after %d %s", err, q.s.sent, plural(q.s.sent, "request"))
	}
	return err.Error()
}
