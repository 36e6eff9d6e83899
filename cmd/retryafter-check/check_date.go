package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/retryafter/retryafter/internal/header"
)

// maxSkew is how far a refusal's Date may be from the probe's clock before the check fails:
// a server clock that far off misleads every client that reads a date by its own clock.
const maxSkew = time.Minute

// checkDateField judges the Date of the refusal e: present (RFC 9110 §6.6.1: an origin server
// with a clock sends it on every 4xx; on a 5xx it may, and without it a client cannot cancel
// the skew between its clock and the server's), an IMF-fixdate, and how far it is from the
// probe's clock.
func checkDateField(e *exchange) Check {
	c := Check{Name: checkDate}
	lines := e.header[header.Date]
	if len(lines) == 0 {
		c.Result, c.Seen = Fail, fmt.Sprintf("absent from the %d: a client cannot measure a Retry-After date against the server's clock", e.status)
		return c
	}
	v, single := singleValue(lines)
	if !single {
		c.Result, c.Seen = Fail, fmt.Sprintf("%q: several lines that disagree", strings.Join(lines, ", "))
		return c
	}
	q := fmt.Sprintf("%q", v)
	at, ok := header.ParseHTTPDate(v, e.received)
	switch {
	case !ok:
		if _, ok := generousDate(v, e.received); ok {
			zone := v[strings.LastIndexByte(v, ' ')+1:]
			c.Result, c.Seen = Fail, fmt.Sprintf("%s: not an HTTP-date: zone %s; an HTTP-date ends in GMT", q, zone)
		} else {
			c.Result, c.Seen = Fail, q+": not an HTTP-date"
		}
		return c
	case !isIMFFixdate(v):
		c.Result, c.Seen = Fail, q+": "+notIMFFixdate(v)
		return c
	}
	skew, desc := dateSkew(at, e)
	c.Result, c.Seen = Pass, q+": "+desc
	if skew > maxSkew || skew < -maxSkew {
		c.Result, c.Seen = Fail, q+": "+desc+"; one of the two clocks is wrong"
	}
	return c
}

// dateSkew returns how far the server's clock, as Date shows it, is from the probe's, and says
// so for a person. Date has whole seconds, so the server's clock read between Date and a second
// later while the probe's read between sending and receiving: only a difference beyond both
// counts.
func dateSkew(at time.Time, e *exchange) (time.Duration, string) {
	lo := at.Sub(e.received)              // the server behind by at most this much
	hi := at.Add(time.Second).Sub(e.sent) // ahead by at most this much
	switch {
	case hi < 0:
		return hi, fmt.Sprintf("IMF-fixdate, at least %s behind the probe's clock", seconds(roundDuration(-hi)))
	case lo > 0:
		return lo, fmt.Sprintf("IMF-fixdate, at least %s ahead of the probe's clock", seconds(roundDuration(lo)))
	}
	return 0, "IMF-fixdate, agrees with the probe's clock to the second"
}
