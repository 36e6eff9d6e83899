package header

import (
	"math"
	"net/http"
	"strings"
	"time"
)

// A Leniency is a set of ways in which a Retry-After value departed from RFC 9110, or from the
// rule that a refusal never says 0, and was read the way its sender evidently meant. The zero
// Leniency is a conforming value.
type Leniency uint8

const (
	// LenientZone is a date in zone UTC, +0000 or -0000 rather than GMT (Go's time.RFC1123 and
	// time.RFC1123Z, as sethvargo/go-limiter sends): the same instant.
	LenientZone Leniency = 1 << iota

	// LenientDayName is a date whose day name is missing, or not spelled as its format wants
	// ("Sunday, 06 Nov 1994 ...", "sun, ...", "Xyz, ..."): the day name carries nothing that
	// the rest of the date does not.
	LenientDayName

	// LenientFraction is delay-seconds with a decimal fraction ("1.5"), rounded up to whole
	// seconds.
	LenientFraction

	// LenientSign is delay-seconds with a leading "+".
	LenientSign

	// LenientZero is a wait of 0 on a refusal ("0", or a date not after its reference), as a
	// limiter that truncates its waits sends for one under a second: read as one second, the
	// smallest honest delay-seconds, or for a date as the rest of the second it names.
	LenientZero

	// LenientDateField is a response Date that is not an HTTP-date but was read as a date is
	// (UTC zone, day name), so that a Retry-After date is measured against it and the sender's
	// clock skew still cancels.
	LenientDateField
)

// leniencyNames are the names of the Leniency bits, in bit order.
var leniencyNames = [...]string{"zone", "day-name", "fraction", "sign", "zero", "date-field"}

// String returns the names of the set's members joined by "+", as "zone+day-name", or
// "conforming" for the empty set.
func (l Leniency) String() string {
	if l == 0 {
		return "conforming"
	}
	var b strings.Builder
	// The shifts are of a Leniency, not of an untyped 1: Yaegi v0.16.1, which interprets
	// Traefik's plugins, types the untyped 1 of such a shift as an int.
	for i, name := range leniencyNames {
		if l&(Leniency(1)<<i) == 0 {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('+')
		}
		b.WriteString(name)
	}
	if rest := l &^ (Leniency(1)<<len(leniencyNames) - 1); rest != 0 {
		if b.Len() > 0 {
			b.WriteByte('+')
		}
		b.WriteString("0x")
		const hex = "0123456789abcdef"
		b.WriteByte(hex[rest>>4])
		b.WriteByte(hex[rest&0xf])
	}
	return b.String()
}

// A ReadMode says how [ReadRetryAfter] reads a value. The zero ReadMode reads the Retry-After
// of a response that is not a refusal (a redirect), with dates read to the end of their second.
type ReadMode uint8

const (
	// Refusal reads the Retry-After of a 429 or 503: a wait of 0 means one under a second and
	// is read as one second.
	Refusal ReadMode = 1 << iota

	// ExactDates reads a date as the instant it names. Without it a date is read as the end of
	// the second it names, one second later: most senders cut the instant they mean to the
	// second, and a client sent back at the start of that second would be early.
	ExactDates
)

// A Reading is what [ReadRetryAfter] understood of a Retry-After field.
type Reading struct {
	// Wait is the wait the sender evidently meant: never negative, and above 0 when OK on a
	// refusal. It is 0 when not OK.
	Wait time.Duration

	// OK reports whether a wait was understood. A value that is absent, empty, negative, in
	// an exponent or hex form, a list, several lines that disagree, a date not after its
	// reference, or anything else is not ok: the caller falls back on its own wait.
	OK bool

	// Date reports that the value named an instant (an HTTP-date, or a Unix time in a reset
	// field), read against the response's Date (or now).
	Date bool

	// Field is the name of the field the wait was read from (RetryAfter, or for [ReadWait] one
	// of the reset fields); "" when not OK.
	Field string

	// Leniency is how the value departed from RFC 9110 and was read anyway; 0 when it
	// conformed (or could not be read at all).
	Leniency Leniency
}

// ReadRetryAfter reads the Retry-After field of h generously, the way its sender evidently
// meant, and says in Leniency where that departed from the strict reading of [ParseRetryAfter]:
//
//   - delay-seconds with a leading "+" ("+5" is 5 s) or a decimal fraction ("1.5" is 2 s:
//     rounded up to whole seconds); negative values, exponents, hex and lists stay unusable;
//   - an HTTP-date whose zone is UTC, +0000 or -0000, or whose day name is missing or
//     misspelled, is that instant; the response's Date is read the same way, and a date is
//     measured against it as strictly, against now only when there is none;
//   - with [Refusal], a wait of 0, or a date not after its reference, means one under a
//     second: one second (for a date read to the end of its second, the rest of that second).
//
// A date is read as the end of the second it names (one second after it) unless mode has
// [ExactDates]. Wherever ParseRetryAfter accepts a value, ReadRetryAfter with ExactDates
// reads the same wait, but for a 0 on a refusal and a Date read generously, both of which
// Leniency names.
func ReadRetryAfter(h http.Header, now time.Time, mode ReadMode) Reading {
	v, ok := singleFieldValue(h[RetryAfter])
	if !ok || v == "" {
		return Reading{}
	}
	var r Reading
	if d, lenient, ok := readDelaySeconds(v); ok {
		r = Reading{Wait: d, OK: true, Leniency: lenient}
	} else {
		r = readDate(v, h, now, mode)
		if !r.OK {
			return Reading{}
		}
	}
	if r.Wait == 0 && mode&Refusal != 0 {
		r.Wait = time.Second
		r.Leniency |= LenientZero
	}
	r.Field = RetryAfter
	return r
}

// readDelaySeconds reads delay-seconds, allowing a leading "+" and a decimal fraction, which
// it rounds up to whole seconds. Like parseDelaySeconds it checks every byte before any range
// check and saturates at the largest Duration.
func readDelaySeconds(s string) (time.Duration, Leniency, bool) {
	var lenient Leniency
	if len(s) > 0 && s[0] == '+' {
		s = s[1:]
		lenient |= LenientSign
	}
	whole, frac, hasFrac := strings.Cut(s, ".")
	if whole == "" || !allDigits(whole) || (hasFrac && (frac == "" || !allDigits(frac))) {
		return 0, 0, false
	}
	var n int64
	for i := 0; i < len(whole); i++ {
		n = n*10 + int64(whole[i]-'0')
		if n > maxDelaySeconds {
			return math.MaxInt64, lenient | fractionIf(hasFrac), true
		}
	}
	if hasFrac {
		lenient |= LenientFraction
		if strings.Trim(frac, "0") != "" {
			n++ // rounded up; maxDelaySeconds+1 still fits in an int64 of seconds
		}
	}
	if n > maxDelaySeconds {
		return math.MaxInt64, lenient, true
	}
	return time.Duration(n) * time.Second, lenient, true
}

func fractionIf(has bool) Leniency {
	if has {
		return LenientFraction
	}
	return 0
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// readDate reads v as an HTTP-date, generously, measured against the response's Date (read
// generously too) or now.
func readDate(v string, h http.Header, now time.Time, mode ReadMode) Reading {
	ref, lenient := reference(h, now)
	t, how, ok := readHTTPDate(v, ref)
	if !ok {
		return Reading{}
	}
	lenient |= how
	exact := t.Sub(ref) // saturates rather than wraps
	d := exact
	if mode&ExactDates == 0 {
		d = t.Add(time.Second).Sub(ref)
		if d <= 0 { // the second it names has passed
			return Reading{}
		}
	}
	if d < 0 {
		return Reading{}
	}
	if exact <= 0 && mode&Refusal != 0 {
		lenient |= LenientZero // "now", or a date in the current second: under a second
	}
	return Reading{Wait: d, OK: true, Date: true, Leniency: lenient}
}

// readHTTPDate parses s as an HTTP-date, strictly if it can, and otherwise with the zone UTC,
// +0000 or -0000 in place of GMT and any day name, or none; it reports what it read past.
func readHTTPDate(s string, ref time.Time) (time.Time, Leniency, bool) {
	s = TrimOWS(s)
	if t, ok := ParseHTTPDate(s, ref); ok {
		return t, 0, true
	}
	s, lenient, zoned := cutZone(s)
	if !zoned {
		if len(s) > 0 && s[len(s)-1] >= '0' && s[len(s)-1] <= '9' {
			return readASCTime(s) // "Sun Nov  6 08:49:37 1994", no zone
		}
		return time.Time{}, 0, false
	}
	name, rest, comma, ok := cutDayName(s)
	if !ok {
		return time.Time{}, 0, false
	}
	var buf [32]byte
	canon, how, ok := canonDate(buf[:0], name, rest, comma)
	if !ok {
		return time.Time{}, 0, false
	}
	t, ok := ParseHTTPDate(string(canon), ref)
	if !ok {
		return time.Time{}, 0, false
	}
	return t, lenient | how, true
}

// cutZone returns s without its zone, which only the IMF-fixdate and RFC 850 forms carry:
// GMT, or leniently UTC, +0000 or -0000. It reports whether s had one.
func cutZone(s string) (string, Leniency, bool) {
	for _, z := range [...]string{" UTC", " +0000", " -0000"} {
		if rest, ok := strings.CutSuffix(s, z); ok {
			return rest, LenientZone, true
		}
	}
	rest, ok := strings.CutSuffix(s, " GMT")
	return rest, 0, ok
}

// cutDayName splits s into its day name, a word of letters with or without a comma (which it
// reports), and the rest; a date with no day name has the name "".
func cutDayName(s string) (name, rest string, comma, ok bool) {
	if len(s) == 0 || !isLetter(s[0]) {
		return "", s, false, true
	}
	name, rest, ok = strings.Cut(s, " ")
	if !ok {
		return "", "", false, false
	}
	name, comma = strings.CutSuffix(name, ",")
	if name == "" || len(name) > len("Wednesday") || !allLetters(name) {
		return "", "", false, false
	}
	return name, rest, comma, true
}

// canonDate appends to buf the IMF-fixdate or RFC 850 date whose day and time are rest, with a
// day name the strict parser takes, and reports whether name (and its comma) departed from it.
func canonDate(buf []byte, name, rest string, comma bool) ([]byte, Leniency, bool) {
	var lenient Leniency
	switch {
	case len(rest) == len("06 Nov 1994 08:49:37") && rest[2] == ' ':
		if !comma || !shortDayName(name) {
			lenient = LenientDayName
		}
		return append(append(append(buf, "Sun, "...), rest...), " GMT"...), lenient, true
	case len(rest) == len("06-Nov-94 08:49:37") && rest[2] == '-':
		if !comma || !longDayName(name) {
			lenient = LenientDayName
		}
		return append(append(append(buf, "Sunday, "...), rest...), " GMT"...), lenient, true
	}
	return nil, 0, false
}

// readASCTime reads an asctime date whose day name is missing or misspelled (the strict
// parser has already refused s as it is).
func readASCTime(s string) (time.Time, Leniency, bool) {
	rest := s
	if i := strings.IndexByte(s, ' '); i > 0 && allLetters(s[:i]) && monthNumber(s[:i]) == 0 {
		if i > len("Wednesday") {
			return time.Time{}, 0, false
		}
		rest = s[i+1:] // a day name, misspelled: the strict parser would have read a good one
	}
	if len(rest) != len("Nov  6 08:49:37 1994") && len(rest) != len("Nov 6 08:49:37 1994") {
		return time.Time{}, 0, false
	}
	var buf [32]byte
	canon := append(append(buf[:0], "Sun "...), rest...)
	t, ok := ParseHTTPDate(string(canon), time.Time{})
	if !ok {
		return time.Time{}, 0, false
	}
	return t, LenientDayName, true
}

func isLetter(c byte) bool { return c|0x20 >= 'a' && c|0x20 <= 'z' }

func allLetters(s string) bool {
	for i := 0; i < len(s); i++ {
		if !isLetter(s[i]) {
			return false
		}
	}
	return true
}
