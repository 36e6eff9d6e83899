package retryafter

import (
	"net/http"
	"time"

	"github.com/retryafter/retryafter/internal/header"
)

// ParseRetryAfter reads the Retry-After field of h, as found on a 429 or 503 response, strictly
// as RFC 9110 §10.2.3 defines it, and returns how long the server asked the client to wait. The
// second result reports whether h held a conforming Retry-After. It is the check that this
// package's own responses are held to.
//
// Both forms are read:
//
//   - delay-seconds: only ASCII digits after trimming surrounding spaces and tabs, so "+5",
//     "-1", "1.5", "1e3" and "0x10" are not ok. A value too large for a [time.Duration]
//     saturates to the largest one; it never wraps.
//   - HTTP-date, in any of the three formats RFC 9110 §5.6.7 requires a recipient to accept:
//     IMF-fixdate ("Sun, 06 Nov 1994 08:49:37 GMT"), the obsolete RFC 850 form
//     ("Sunday, 06-Nov-94 08:49:37 GMT") and ANSI C asctime ("Sun Nov  6 08:49:37 1994"). The
//     zone must be GMT. The wait is the date minus the response's own Date field when that
//     holds a valid HTTP-date, since both come from the server's clock, so the client's clock
//     skew cancels; otherwise the date minus now. A two-digit RFC 850 year names the latest
//     such year that is not more than 50 years after that same reference instant. A date
//     before the reference is not ok; a date equal to it is a wait of 0.
//
// Calendar errors (31 Feb, hour 24), other zones, a comma list, several Retry-After field lines
// with differing values, and an absent field are all not ok. The day name is checked for
// spelling but not against the date. ParseRetryAfter does not allocate.
//
// What a client should wait, and what a gateway should pass on, read such values more
// generously: see package retryclient and package gateway.
func ParseRetryAfter(h http.Header, now time.Time) (time.Duration, bool) {
	return header.ParseRetryAfter(h, now)
}
