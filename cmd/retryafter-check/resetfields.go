package main

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/retryafter/retryafter/internal/header"
)

// The fields that told a quota before the draft's RateLimit and RateLimit-Policy: the
// RateLimit-Limit, RateLimit-Remaining and RateLimit-Reset of draft-ietf-httpapi-ratelimit-headers
// up to revision 06 (Integers, Reset in seconds from the response), and the X-RateLimit-Limit,
// -Remaining and -Reset that GitHub, ulule/limiter, go-chi/httprate, sethvargo/go-limiter and
// many more send, after no standard: their Reset is an epoch in seconds or in milliseconds,
// seconds from the response, or a date. A client that reads Reset on a refusal comes back then,
// so where the quota is spent (Remaining 0, or not said) Reset must agree with Retry-After.

// A resetFamily names the three fields of one kind.
type resetFamily struct {
	limit, remaining, reset string // as the specifications spell them
	// draft is set for the draft's fields, whose values must parse; a value of the others that
	// cannot be read is reported, not judged.
	draft bool
}

var (
	draft06Fields    = resetFamily{"RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset", true}
	xRateLimitFields = resetFamily{"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", false}
)

// judge judges the fields of f on the refusal e, whose Retry-After is t. It returns false when e
// has none of them.
func (f resetFamily) judge(e *exchange, t told) (Check, bool) {
	seen := f.shown(e)
	if seen == "" {
		return Check{}, false
	}
	c := Check{Name: checkRateLimit}
	if r, decided := f.judgeRemaining(e, c, seen); decided {
		return r, true
	}
	lines := e.header[http.CanonicalHeaderKey(f.reset)]
	if len(lines) == 0 {
		return f.uncompared(c, seen, "no "+f.reset+" to compare with Retry-After"), true
	}
	wait, instant, how, why := f.readReset(e, lines)
	if why != "" {
		return f.unjudged(c, seen, why), true
	}
	if how != "" {
		seen += " (" + how + ")"
	}
	if !t.usable {
		return f.uncompared(c, seen, "no usable Retry-After to compare with"), true
	}
	// An instant is measured against a Date of whole seconds, as a date is.
	want, wrong := disagreement(wait, t, instant)
	if wrong != "" {
		c.Result, c.Seen = Fail, fmt.Sprintf("%s: but Retry-After says %s: a client reading %s %s", seen, seconds(want), f.reset, wrong)
		return c, true
	}
	c.Result, c.Seen = Pass, seen+": agrees with Retry-After"
	return c, true
}

// shown is the fields of f that e has, as they are shown in a verdict; "" when it has none.
func (f resetFamily) shown(e *exchange) string {
	var shown []string
	for _, name := range []string{f.limit, f.remaining, f.reset} {
		if lines := e.header[http.CanonicalHeaderKey(name)]; len(lines) > 0 {
			shown = append(shown, name+": "+strings.Join(lines, ", "))
		}
	}
	return strings.Join(shown, ", ")
}

// judgeRemaining judges Limit and Remaining on a refusal: both parse, Remaining is at most
// Limit, and nothing is left. It returns false when they leave Reset to be judged.
func (f resetFamily) judgeRemaining(e *exchange, c Check, seen string) (Check, bool) {
	limit, hasLimit, why := f.integer(e, f.limit)
	if why != "" {
		return f.unjudged(c, seen, why), true
	}
	left, hasLeft, why := f.integer(e, f.remaining)
	if why != "" {
		return f.unjudged(c, seen, why), true
	}
	switch {
	case hasLimit && hasLeft && left > limit:
		return f.unjudged(c, seen, fmt.Sprintf("%s %d is more than %s %d", f.remaining, left, f.limit, limit)), true
	case hasLeft && left > 0 && f.draft:
		c.Result, c.Seen = Fail, fmt.Sprintf("%s: refused, yet %s is %d", seen, f.remaining, left)
		return c, true
	case hasLeft && left > 0:
		c.Result, c.Seen = NA, fmt.Sprintf("%s: refused with %d left, so another limit refused: %s is not compared with Retry-After", seen, left, f.reset)
		return c, true
	}
	return c, false
}

// unjudged is c when f's fields cannot be read, for the reason why: a failure for the draft's
// fields, which must parse, and n/a for the others, which follow no standard.
func (f resetFamily) unjudged(c Check, seen, why string) Check {
	if f.draft {
		c.Result, c.Seen = Fail, seen+": "+why
	} else {
		c.Result, c.Seen = NA, seen+": "+why+"; these fields follow no standard, so that is not judged"
	}
	return c
}

// uncompared is c when f's fields parse but Reset cannot be compared with Retry-After, for the
// reason why: a pass for the draft's fields, which parsed, and n/a for the others.
func (f resetFamily) uncompared(c Check, seen, why string) Check {
	c.Result, c.Seen = NA, seen+": "+why
	if f.draft {
		c.Result, c.Seen = Pass, seen+": parses; "+why
	}
	return c
}

// integer reads the field name of e as a non-negative Integer: a Structured Field Item, or the
// first member of a List (the drafts before 06 allowed "10, 10;w=1" for RateLimit-Limit). It
// returns whether the field is present, and a sentence saying what is wrong, or "".
func (f resetFamily) integer(e *exchange, name string) (int64, bool, string) {
	lines := e.header[http.CanonicalHeaderKey(name)]
	if len(lines) == 0 {
		return 0, false, ""
	}
	members, err := parseSFList(lines)
	switch {
	case err != nil || len(members) == 0:
		return 0, true, name + " is not an Integer"
	case members[0].isInner || members[0].bare.kind != sfInteger || members[0].bare.n < 0:
		return 0, true, name + " is not a non-negative Integer"
	}
	return members[0].bare.n, true, ""
}

// readReset reads the Reset field of e, whose lines are lines, as the wait it tells: the
// draft's as seconds from the response; an X-RateLimit-Reset as an epoch in seconds or in
// milliseconds, or as seconds, by its size, or as a date, the instants measured against Date (or
// the probe's clock, without one). It returns whether the value named an instant, how it was
// read for a person, and a sentence saying why it cannot be read, or "".
func (f resetFamily) readReset(e *exchange, lines []string) (wait time.Duration, instant bool, how, why string) {
	v, ok := singleValue(lines)
	if !ok {
		return 0, false, "", f.reset + ": several lines that disagree"
	}
	if f.draft {
		return f.readDraftReset(e, v)
	}
	return f.readXReset(e, v)
}

// readDraftReset reads v, the draft's Reset, as a non-negative Integer of seconds from the
// response that is not an epoch time.
func (f resetFamily) readDraftReset(e *exchange, v string) (time.Duration, bool, string, string) {
	if !isDigits(v) {
		return 0, false, "", f.reset + " is not a non-negative Integer of seconds"
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n > maxSeconds {
		return 0, false, "", f.reset + " is too large"
	}
	if n >= e.received.Unix()/2 {
		return 0, false, "", fmt.Sprintf("%s %d is an epoch time, but the draft's %s is seconds from the response: a client that reads it waits for decades", f.reset, n, f.reset)
	}
	return time.Duration(n) * time.Second, false, "", ""
}

// readXReset reads v, an X-RateLimit-Reset, as an epoch in milliseconds or in seconds, as
// seconds, or as a date, an instant measured against e's Date (or the probe's clock, without
// one).
func (f resetFamily) readXReset(e *exchange, v string) (time.Duration, bool, string, string) {
	ref, refName := e.received, "the probe's clock"
	if d, ok := validDate(e.header, e.received); ok {
		ref, refName = d, "Date"
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil && isDigits(v) {
		if at, how, ok := epochTime(n, ref); ok {
			return measured(at, ref, how, refName)
		}
		if n > maxSeconds {
			return 0, false, "", f.reset + " is too large"
		}
		return time.Duration(n) * time.Second, false, "seconds", ""
	}
	at, ok := header.ParseHTTPDate(v, ref)
	if !ok {
		at, ok = generousDate(v, ref)
	}
	if !ok {
		return 0, false, "", f.reset + " is neither an epoch, seconds nor a date"
	}
	return measured(at, ref, "a date, ", refName)
}

// epochTime reads n as an epoch time in milliseconds or in seconds when it is nearer that epoch
// time of ref than to zero, and says which; it returns false for a smaller n, which is seconds.
func epochTime(n int64, ref time.Time) (time.Time, string, bool) {
	switch {
	case n >= ref.UnixMilli()/2:
		return time.UnixMilli(n), "an epoch in milliseconds, ", true
	case n >= ref.Unix()/2:
		return time.Unix(n, 0), "an epoch, ", true
	}
	return time.Time{}, "", false
}

// measured is the wait from ref, named refName, to the instant at, read as how: the returns of
// readReset for an instant.
func measured(at, ref time.Time, how, refName string) (time.Duration, bool, string, string) {
	wait := at.Sub(ref)
	if wait < 0 {
		return wait, true, how + seconds(roundDuration(-wait)) + " before " + refName, ""
	}
	return wait, true, how + seconds(roundDuration(wait)) + " after " + refName, ""
}

// maxSeconds is the most seconds a time.Duration holds.
const maxSeconds = int64(1<<63-1) / int64(time.Second)
