package gateway

import "github.com/retryafter/retryafter/internal/header"

// A Leniency is a set of ways in which an upstream's Retry-After departed from RFC 9110, or from
// the rule that a refusal never says 0, and was read the way its sender evidently meant. The zero
// Leniency is a conforming value.
type Leniency uint8

const (
	// LenientZone is a date in zone UTC, +0000 or -0000 rather than GMT (Go's time.RFC1123 and
	// time.RFC1123Z, as sethvargo/go-limiter sends): read as the same instant.
	LenientZone = Leniency(header.LenientZone)

	// LenientDayName is a date whose day name is missing or not spelled as its format wants:
	// read as the date the rest of it names.
	LenientDayName = Leniency(header.LenientDayName)

	// LenientFraction is delay-seconds with a decimal fraction ("1.5"), rounded up to whole
	// seconds.
	LenientFraction = Leniency(header.LenientFraction)

	// LenientSign is delay-seconds with a leading "+".
	LenientSign = Leniency(header.LenientSign)

	// LenientZero is a wait of 0 on a 429 or 503 ("0", or a date not after Date), as a limiter
	// that truncates its waits sends for one under a second: read as one second (for a date
	// read to the end of its second, the rest of that second).
	LenientZero = Leniency(header.LenientZero)

	// LenientDateField is an upstream Date that is not an HTTP-date but was read as one, so
	// that a Retry-After date was measured against it and the upstream's clock skew cancelled.
	LenientDateField = Leniency(header.LenientDateField)
)

// String returns the names of the set's members joined by "+", as "zone+day-name", or
// "conforming" for the empty set.
func (l Leniency) String() string { return header.Leniency(l).String() }
