package main

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/retryafter/retryafter/internal/header"
)

// checkRetryAfterField judges the Retry-After of the refusal e: present, in a form a sender may
// use (delay-seconds 1*DIGIT, or an IMF-fixdate in GMT, RFC 9110 §10.2.3 and §5.6.7), and never
// a wait of 0: neither "0" nor a date at or before Date.
func checkRetryAfterField(e *exchange, t told) Check {
	c := Check{Name: checkRetryAfter}
	if !t.present {
		c.Result, c.Seen = Fail, fmt.Sprintf("absent from the %d: a client cannot know when to come back", e.status)
		return c
	}
	q := fmt.Sprintf("%q", t.value)
	v, single := singleValue(e.header[header.RetryAfter])
	switch {
	case !single:
		c.Result, c.Seen = Fail, q+": several lines that disagree"
	case t.strict && !t.date && t.wait == 0:
		c.Result, c.Seen = Fail, q+": a wait of 0 tells clients to retry at once"
	case t.strict && !t.date:
		c.Result, c.Seen = Pass, q+": delay-seconds"
	case t.strict && !isIMFFixdate(v):
		c.Result, c.Seen = Fail, q+": "+notIMFFixdate(v)
	case t.strict && t.wait == 0:
		c.Result, c.Seen = Fail, q+": the same second as "+t.ref+", a wait of 0"
	case t.strict:
		c.Result, c.Seen = Pass, fmt.Sprintf("%s: IMF-fixdate, %s after %s", q, seconds(t.wait), t.ref)
	default:
		c.Result, c.Seen = Fail, q+": "+whyNotRetryAfter(v, e)
	}
	return c
}

// whyNotRetryAfter says why v, which the strict parser refused, is not a Retry-After.
func whyNotRetryAfter(v string, e *exchange) string {
	ref, refName := e.received, "the probe's clock"
	if d, ok := validDate(e.header, e.received); ok {
		ref, refName = d, "Date"
	}
	if at, ok := header.ParseHTTPDate(v, ref); ok {
		return fmt.Sprintf("a date %s before %s: the wait has passed already", seconds(ref.Sub(at)), refName)
	}
	if _, ok := generousDate(v, ref); ok {
		zone := v[strings.LastIndexByte(v, ' ')+1:]
		return fmt.Sprintf("not an HTTP-date: zone %s (Go's time.RFC1123 or RFC1123Z); an HTTP-date ends in GMT", zone)
	}
	s := strings.TrimPrefix(v, "-")
	if _, ok := generousSeconds(s); ok {
		switch {
		case strings.HasPrefix(v, "-"):
			return "not delay-seconds: negative"
		case strings.HasPrefix(v, "+"):
			return "not delay-seconds: a sign"
		default:
			return "not delay-seconds: a fraction; delay-seconds are whole"
		}
	}
	return "neither delay-seconds nor an HTTP-date"
}

// isIMFFixdate reports whether v is an HTTP-date written as senders must write one: the
// IMF-fixdate of the instant it names, day name included.
func isIMFFixdate(v string) bool {
	_, ok := header.ParseHTTPDate(v, time.Time{})
	if !ok {
		return false
	}
	_, fixdate := fixdateOf(v)
	return fixdate == v
}

// fixdateOf returns the second v, a valid HTTP-date, names and its IMF-fixdate. A leap second
// (23:59:60, which IMF-fixdate allows), read by ParseHTTPDate as the first second of the next
// minute, is the second before it, written with its 60.
func fixdateOf(v string) (time.Time, string) {
	t, _ := header.ParseHTTPDate(v, time.Time{})
	if len(v) == 29 && v[3] == ',' && v[23:25] == "60" {
		t = t.Add(-time.Second)
		f := t.Format(http.TimeFormat)
		return t, f[:23] + "60" + f[25:]
	}
	return t, t.Format(http.TimeFormat)
}

// notIMFFixdate says how v, a valid HTTP-date, differs from the IMF-fixdate a sender must use.
func notIMFFixdate(v string) string {
	t, fixdate := fixdateOf(v)
	switch {
	case len(v) == 29 && v[3] == ',' && v[:3] != t.Format("Mon"):
		return fmt.Sprintf("the day name %s does not match the date (a %s)", v[:3], t.Format("Monday"))
	case len(v) == 29 && v[3] == ',':
		return "not the IMF-fixdate of its instant (" + fixdate + ")"
	case strings.Contains(v, "-"):
		return "the obsolete RFC 850 form: recipients must read it, senders must write IMF-fixdate"
	}
	return "the obsolete asctime form: recipients must read it, senders must write IMF-fixdate"
}
