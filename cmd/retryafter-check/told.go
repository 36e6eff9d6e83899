package main

import (
	"errors"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/retryafter/retryafter/internal/header"
)

// What a refusal told: its Retry-After, read as a client that obeys it would read it. The
// strict verdict is the project's parser (internal/header, retryafter.ParseRetryAfter); a value
// that fails it is still read, where its sender's meaning is plain, so that the probe can obey
// it and show what that brings: "1.5" is 1.5 s, "+5" is 5 s, a date in zone UTC or +0000 is that
// instant. A date is measured against the response's own Date, or against the probe's clock
// when Date is absent or invalid.

// A told is the Retry-After of one response.
type told struct {
	value   string        // the field's value, its lines joined with ", "; "" when absent
	present bool          // whether the response had the field
	strict  bool          // whether the strict parser accepts it
	usable  bool          // whether it reads as a wait at all
	wait    time.Duration // the wait, counted from the response; 0 for a date at or before Date
	date    bool          // whether it is a date rather than a number of seconds
	at      time.Time     // for a date, the instant it names
	past    time.Duration // for a date before its reference, by how much
	ref     string        // what a date was measured against: "Date" or "the probe's clock"
	// field is the reset field the wait was read from, where Retry-After was missing or
	// unusable (see readObeyed); "" for Retry-After.
	field string
}

// readObeyed reads what a client obeys on the refusal e: its Retry-After, or where that is
// missing or unusable, the first of the rate-limit reset fields to say when, as
// header.ReadWait reads them (OpenAI's, Anthropic's, GitHub's X-RateLimit-Reset, RateLimit),
// an instant read as the very instant it names and, like a date, obeyed at it.
func readObeyed(e *exchange) told {
	t := readTold(e)
	if t.usable {
		return t
	}
	r := header.ReadWait(e.header, e.received, header.Refusal|header.ExactDates)
	if !r.OK || r.Field == header.RetryAfter {
		return t
	}
	t.usable, t.wait, t.field, t.value = true, r.Wait, r.Field, strings.Join(e.header[r.Field], ", ")
	if r.Date {
		ref, refName := e.received, "the probe's clock"
		if d, ok := validDate(e.header, e.received); ok {
			ref, refName = d, "Date"
		}
		t.date, t.ref, t.at = true, refName, ref.Add(r.Wait)
	}
	return t
}

// source names the field t was read from.
func (t told) source() string {
	if t.field != "" {
		return t.field
	}
	return header.RetryAfter
}

// readTold reads the Retry-After of e.
func readTold(e *exchange) told {
	lines := e.header[header.RetryAfter]
	t := told{present: len(lines) > 0, value: strings.Join(lines, ", ")}
	if !t.present {
		return t
	}
	ref, refName := e.received, "the probe's clock"
	if d, ok := validDate(e.header, e.received); ok {
		ref, refName = d, "Date"
	}
	v, single := singleValue(lines)
	if wait, ok := header.ParseRetryAfter(e.header, e.received); ok {
		t.strict, t.usable, t.wait = true, true, wait
		t.date = !isDigits(v)
		if t.date {
			t.ref = refName
			t.at, _ = header.ParseHTTPDate(v, ref)
		}
		return t
	}
	if !single {
		return t
	}
	if d, ok := generousSeconds(v); ok {
		t.usable, t.wait = true, d
		return t
	}
	if at, ok := generousDate(v, ref); ok {
		t.usable, t.date, t.ref, t.at = true, true, refName, at
		if d := at.Sub(ref); d > 0 {
			t.wait = d
		} else {
			t.past = -d
		}
	}
	return t
}

// validDate returns the instant of h's Date field when it holds one valid HTTP-date; now
// resolves a two-digit year.
func validDate(h http.Header, now time.Time) (time.Time, bool) {
	v, ok := singleValue(h[header.Date])
	if !ok {
		return time.Time{}, false
	}
	return header.ParseHTTPDate(v, now)
}

// singleValue returns the value of a field's lines, trimmed, when they all agree.
func singleValue(lines []string) (string, bool) {
	if len(lines) == 0 {
		return "", false
	}
	v := header.TrimOWS(lines[0])
	for _, l := range lines[1:] {
		if header.TrimOWS(l) != v {
			return "", false
		}
	}
	return v, true
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isDigit(s[i]) {
			return false
		}
	}
	return true
}

// generousSeconds reads a number of seconds that is not delay-seconds but plainly means one:
// a leading "+", or a decimal fraction ("1.5").
func generousSeconds(v string) (time.Duration, bool) {
	s := strings.TrimPrefix(v, "+")
	whole, frac, hasPoint := strings.Cut(s, ".")
	if !isDigits(whole) || (hasPoint && !isDigits(frac)) {
		return 0, false
	}
	secs, err := strconv.ParseFloat(s, 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return 0, false
	}
	// Past the largest time.Duration (2^63 ns, which float64 holds exactly), the wait
	// saturates: it is beyond any budget, never negative.
	if ns := secs * float64(time.Second); ns < float64(math.MaxInt64) {
		return time.Duration(ns), true
	}
	return math.MaxInt64, true
}

// addSat is a+b, saturated at the largest and the smallest time.Duration.
func addSat(a, b time.Duration) time.Duration {
	switch sum := a + b; {
	case b > 0 && sum < a:
		return math.MaxInt64
	case b < 0 && sum > a:
		return math.MinInt64
	default:
		return sum
	}
}

// generousDate reads an IMF-fixdate whose zone is UTC, +0000 or -0000 instead of GMT (Go's
// time.RFC1123 and RFC1123Z), as the instant its sender meant.
func generousDate(v string, ref time.Time) (time.Time, bool) {
	for _, zone := range []string{" UTC", " +0000", " -0000"} {
		if strings.HasSuffix(v, zone) {
			return header.ParseHTTPDate(strings.TrimSuffix(v, zone)+" GMT", ref)
		}
	}
	return time.Time{}, false
}
