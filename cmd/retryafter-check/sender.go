package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/retryafter/retryafter/internal/header"
)

// An exchange is one request the probe sent and the response it got.
type exchange struct {
	n        int       // its number among the requests sent, from 1
	method   string    // GET, HEAD, ...
	due      time.Time // when it was meant to go, for a request sent at an instant; else zero
	sent     time.Time
	received time.Time // when the response's header had arrived
	read     time.Time // when its body had been read
	status   int
	// prevN and prevBody are the number of the request before, for a request sent at an
	// instant, and how long its body took to read.
	prevN    int
	prevBody time.Duration
	header   http.Header // the fields a check reads, as keepFields keeps them
}

// refused reports whether the response is a refusal that Retry-After applies to: a 429, a 503,
// or a 403 that GitHub sends for a rate limit (see header.IsRefusal).
func (e *exchange) refused() bool {
	return header.IsRefusal(e.status, e.header)
}

// admitted reports whether the request got through: a 2xx, or a 4xx that is no refusal (the
// limiter let it through to a handler that answered so). A 3xx or a 5xx that is no refusal is
// neither admitted nor refused: it says nothing of the limiter.
func (e *exchange) admitted() bool {
	switch {
	case e.status >= 200 && e.status < 300:
		return true
	case e.status >= 400 && e.status < 500:
		return !e.refused()
	}
	return false
}

// lateSlack is how much later than its instant a retry may go and still be judged as sent at
// it; a later one tells nothing of that instant.
const lateSlack = 500 * time.Millisecond

// late is how much later than its instant e went, when that is more than lateSlack; else 0.
func (e *exchange) late() time.Duration {
	if e.due.IsZero() || e.sent.Sub(e.due) <= lateSlack {
		return 0
	}
	return e.sent.Sub(e.due)
}

// lateness says how late e went, and why when the body of the response before it took long to
// read: a server that trickles the body of a refusal holds back the retry after it.
func (e *exchange) lateness() string {
	why := fmt.Sprintf("went %s late", seconds(roundDuration(e.late())))
	if e.prevBody > lateSlack {
		why += fmt.Sprintf(", the body of request %d having taken %s to read", e.prevN, seconds(roundDuration(e.prevBody)))
	}
	return why
}

// Why the probe stopped before it was done. The messages end up in the report.
var (
	errRequestBudget = errors.New("the request budget is spent (-budget)")
)

// A timeBudgetError is a wait that would end after the time budget.
type timeBudgetError struct {
	wait, left, timeout time.Duration
}

func (e *timeBudgetError) Error() string {
	if e.wait <= 0 {
		return fmt.Sprintf("the time budget is spent (-timeout %s)", e.timeout)
	}
	return fmt.Sprintf("waiting %s would pass the time budget (-timeout %s, %s left)",
		roundDuration(e.wait), e.timeout, roundDuration(max(e.left, 0)))
}

// A redirectError is a redirect met while seeking a refusal; the probe follows none.
type redirectError struct {
	status    int
	location  string
	otherHost bool
}

func (e *redirectError) Error() string {
	where := "the same host"
	if e.otherHost {
		where = "another host"
	}
	loc := e.location
	if loc == "" {
		loc = "(no Location)"
	}
	return fmt.Sprintf("answered %s, Location: %s, on %s: retryafter-check follows no redirect and sends only to the URL it is given; point it at the API itself",
		statusText(e.status), loc, where)
}

// requestTimeout is the longest a single request may take.
const requestTimeout = 30 * time.Second

// bodyLimit is the most of a response body read before the connection is given up on.
const bodyLimit = 64 << 10

// A sender sends every request of the probe, to its one URL, within the request and time
// budgets. It is used by one goroutine.
type sender struct {
	rt      http.RoundTripper
	target  string // the one URL every request goes to
	method  string
	header  http.Header
	body    []byte
	budget  int
	pace    time.Duration
	timeout time.Duration
	start   time.Time
	now     func() time.Time
	sleep   func(context.Context, time.Duration) error

	sent     int       // requests sent
	last     time.Time // when the last one was sent
	prev     *exchange // the last response
	cut      int       // how many responses had more of the fields checks read than keepFields keeps
	statuses map[int]int
	skew     skew        // what the Dates so far prove about the server's clock
	refusals []*exchange // every refusal so far, in the order met
}

// deadline is when the time budget ends.
func (s *sender) deadline() time.Time { return s.start.Add(s.timeout) }

// send sends one request with method now.
func (s *sender) send(ctx context.Context, method string) (*exchange, error) {
	if s.sent >= s.budget {
		return nil, errRequestBudget
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	now := s.now()
	if !now.Before(s.deadline()) {
		return nil, &timeBudgetError{timeout: s.timeout}
	}
	rctx, cancel := context.WithDeadline(ctx, minTime(s.deadline(), now.Add(requestTimeout)))
	defer cancel()
	var body io.Reader
	if method != http.MethodHead && len(s.body) > 0 {
		body = bytes.NewReader(s.body)
	}
	req, err := http.NewRequestWithContext(rctx, method, s.target, body)
	if err != nil {
		return nil, err
	}
	req.Header = s.header.Clone()
	if req.Header == nil {
		req.Header = make(http.Header)
	}
	s.sent++
	s.last = now
	resp, err := s.rt.RoundTrip(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("request %d (%s): %w", s.sent, method, err)
	}
	e := &exchange{n: s.sent, method: method, sent: now, received: s.now(), status: resp.StatusCode}
	var cut bool
	if e.header, cut = keepFields(resp.Header); cut {
		s.cut++
	}
	resp.Header = nil
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, bodyLimit))
	resp.Body.Close()
	e.read = s.now()
	s.prev = e
	if s.statuses == nil {
		s.statuses = make(map[int]int)
	}
	s.statuses[resp.StatusCode]++
	s.skew.add(e)
	if e.refused() {
		s.refusals = append(s.refusals, e)
	}
	return e, nil
}

// wait sleeps for d, unless that would end after the time budget.
func (s *sender) wait(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	if left := s.deadline().Sub(s.now()); d >= left {
		return &timeBudgetError{wait: d, left: left, timeout: s.timeout}
	}
	return s.sleep(ctx, d)
}

// sendAt sends one request with method at t, or now if t has passed; the exchange says when
// it was due.
func (s *sender) sendAt(ctx context.Context, t time.Time, method string) (*exchange, error) {
	if err := s.wait(ctx, t.Sub(s.now())); err != nil {
		return nil, err
	}
	prev := s.prev
	e, err := s.send(ctx, method)
	if e != nil {
		e.due = t
		if prev != nil {
			e.prevN, e.prevBody = prev.n, prev.read.Sub(prev.received)
		}
	}
	return e, err
}

// provoke sends requests with the probe's method, no closer together than the pace, until one
// is refused, and returns it. It stops at a redirect, which it does not follow.
func (s *sender) provoke(ctx context.Context) (*exchange, error) {
	return s.provokeWithin(ctx, math.MaxInt)
}

// errNoRefusal is most requests of provokeWithin, none of them refused.
var errNoRefusal = errors.New("no refusal")

// provokeWithin is provoke, sending at most most requests; when none of them is refused, it
// returns errNoRefusal.
func (s *sender) provokeWithin(ctx context.Context, most int) (*exchange, error) {
	for range most {
		if s.sent > 0 {
			if err := s.wait(ctx, s.last.Add(s.pace).Sub(s.now())); err != nil {
				return nil, err
			}
		}
		e, err := s.send(ctx, s.method)
		if err != nil {
			return nil, err
		}
		if e.refused() {
			return e, nil
		}
		if e.status >= 300 && e.status < 400 && e.status != http.StatusNotModified {
			return nil, s.redirect(e)
		}
	}
	return nil, errNoRefusal
}

// redirect describes the redirect e.
func (s *sender) redirect(e *exchange) error {
	loc := e.header.Get("Location")
	other := false
	if u, err := url.Parse(s.target); err == nil && loc != "" {
		if l, err := u.Parse(loc); err == nil {
			other = !strings.EqualFold(l.Host, u.Host)
		}
	}
	return &redirectError{status: e.status, location: loc, otherHost: other}
}

// seen describes the statuses of the responses so far: "295 × 200 OK, 5 × 404 Not Found".
func (s *sender) seen() string {
	codes := make([]int, 0, len(s.statuses))
	for c := range s.statuses {
		codes = append(codes, c)
	}
	sort.Ints(codes)
	parts := make([]string, len(codes))
	for i, c := range codes {
		parts[i] = fmt.Sprintf("%d × %s", s.statuses[c], statusText(c))
	}
	return strings.Join(parts, ", ")
}

// sleepContext is the default sleep: d on a timer, or until ctx is done.
func sleepContext(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
