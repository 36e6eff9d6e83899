package header

import (
	"math"
	"net/http"
	"time"
)

// maxDelaySeconds is the largest whole number of seconds that fits in a
// [time.Duration]; anything above it saturates.
const maxDelaySeconds = math.MaxInt64 / int64(time.Second)

// ParseRetryAfter reads the Retry-After field of h strictly, as RFC 9110
// defines it, and returns how long the server asked the client to wait. The
// second result reports whether h held a conforming Retry-After.
//
// Both forms of RFC 9110 §10.2.3 are read:
//
//   - delay-seconds: only ASCII digits after trimming surrounding spaces and
//     tabs, so "+5", "-1", "1.5", "1e3" and "0x10" are not ok. A value too
//     large for a [time.Duration] saturates to the largest one; it never wraps.
//   - HTTP-date, in any of the three formats RFC 9110 §5.6.7 requires a
//     recipient to accept: IMF-fixdate ("Sun, 06 Nov 1994 08:49:37 GMT"), the
//     obsolete RFC 850 form ("Sunday, 06-Nov-94 08:49:37 GMT") and ANSI C
//     asctime ("Sun Nov  6 08:49:37 1994", one or two spaces before a one-digit
//     day). The zone must be GMT. The wait is the date minus the response's own
//     Date field when that holds a valid HTTP-date, since both come from the
//     server's clock; otherwise the date minus now. A two-digit RFC 850 year
//     names the latest such year that is not more than 50 years after that
//     same reference instant. A date before the reference is not ok; a date
//     equal to it is a wait of 0.
//
// Parsing is strict: calendar errors (31 Feb, hour 24), other zones, a comma
// list, several Retry-After field lines with differing values, and an absent
// field are all not ok, and so is any value that is neither form. The name of
// the week day is checked for spelling but not against the date, and a leap
// second (":60") is read as the start of the next minute.
//
// ParseRetryAfter does not allocate and is safe for concurrent use as long as
// h is not being modified. It is the one strict reader of the project:
// retryafter.ParseRetryAfter is this function.
func ParseRetryAfter(h http.Header, now time.Time) (time.Duration, bool) {
	v, ok := singleFieldValue(h[RetryAfter])
	if !ok {
		return 0, false
	}
	if d, ok := parseDelaySeconds(v); ok {
		return d, true
	}
	ref := now
	if dv, ok := singleFieldValue(h[Date]); ok {
		if t, ok := ParseHTTPDate(dv, now); ok {
			ref = t
		}
	}
	t, ok := ParseHTTPDate(v, ref)
	if !ok {
		return 0, false
	}
	d := t.Sub(ref) // saturates rather than wraps
	if d < 0 {
		return 0, false
	}
	return d, true
}

// singleFieldValue returns the one value carried by the field lines vs, with
// surrounding spaces and tabs trimmed. Several lines are accepted only when
// they all carry the same value (a repeated header); absent or conflicting
// lines are not ok.
func singleFieldValue(vs []string) (string, bool) {
	if len(vs) == 0 {
		return "", false
	}
	v := TrimOWS(vs[0])
	for _, other := range vs[1:] {
		if TrimOWS(other) != v {
			return "", false
		}
	}
	return v, true
}

// TrimOWS trims the optional whitespace of RFC 9110 §5.6.3 (spaces and
// horizontal tabs) from both ends of s.
func TrimOWS(s string) string {
	for len(s) > 0 && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	for len(s) > 0 && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}
	return s
}

// parseDelaySeconds parses the delay-seconds form of Retry-After (1*DIGIT)
// after trimming surrounding spaces and tabs. Every byte is checked to be an
// ASCII digit before any range check, so a long number followed by junk is
// not ok rather than saturated. A value beyond the largest [time.Duration]
// saturates to it.
func parseDelaySeconds(s string) (time.Duration, bool) {
	s = TrimOWS(s)
	if s == "" {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	var n int64
	for i := 0; i < len(s); i++ {
		n = n*10 + int64(s[i]-'0')
		if n > maxDelaySeconds {
			return math.MaxInt64, true
		}
	}
	return time.Duration(n) * time.Second, true
}

// ParseHTTPDate parses an HTTP-date (RFC 9110 §5.6.7) in any of its three
// formats, after trimming surrounding spaces and tabs. ref is the instant that
// resolves the two-digit year of the RFC 850 form: the result is the latest
// instant with those digits that is not more than 50 years after ref. The
// other formats ignore ref. The result is in UTC.
func ParseHTTPDate(s string, ref time.Time) (time.Time, bool) {
	s = TrimOWS(s)
	switch {
	case len(s) == 29 && s[3] == ',':
		return parseIMFFixdate(s)
	case (len(s) == 24 || len(s) == 23) && s[3] == ' ':
		return parseASCTime(s)
	default:
		return parseRFC850Date(s, ref)
	}
}

// parseIMFFixdate parses "Sun, 06 Nov 1994 08:49:37 GMT".
func parseIMFFixdate(s string) (time.Time, bool) {
	if len(s) != 29 || !shortDayName(s[:3]) || s[3:5] != ", " || s[7] != ' ' ||
		s[11] != ' ' || s[16] != ' ' || s[25:] != " GMT" {
		return time.Time{}, false
	}
	day, ok1 := twoDigits(s[5:7])
	month := monthNumber(s[8:11])
	year, ok2 := fourDigits(s[12:16])
	if !ok1 || !ok2 || month == 0 {
		return time.Time{}, false
	}
	return httpDate(year, month, day, s[17:25])
}

// parseASCTime parses "Sun Nov  6 08:49:37 1994" (24 bytes, SP SP DIGIT or
// SP 2DIGIT before the day) and the one-space form "Sun Nov 6 08:49:37 1994"
// (23 bytes) that some senders use.
func parseASCTime(s string) (time.Time, bool) {
	if !shortDayName(s[:3]) || s[3] != ' ' || s[7] != ' ' {
		return time.Time{}, false
	}
	month := monthNumber(s[4:7])
	var day int
	var ok bool
	switch {
	case len(s) == 24 && s[8] == ' ': // SP SP DIGIT
		day, ok = oneDigit(s[9])
		ok = ok && day != 0
	case len(s) == 24: // SP 2DIGIT
		day, ok = twoDigits(s[8:10])
	default: // SP DIGIT
		day, ok = oneDigit(s[8])
		ok = ok && day != 0
	}
	// In both lengths the value ends with " hh:mm:ss yyyy".
	tail := s[len(s)-14:]
	if !ok || month == 0 || tail[0] != ' ' || tail[9] != ' ' {
		return time.Time{}, false
	}
	year, ok := fourDigits(tail[10:])
	if !ok {
		return time.Time{}, false
	}
	return httpDate(year, month, day, tail[1:9])
}

// parseRFC850Date parses "Sunday, 06-Nov-94 08:49:37 GMT", resolving the
// two-digit year against ref.
func parseRFC850Date(s string, ref time.Time) (time.Time, bool) {
	// After the long day name: ", 06-Nov-94 08:49:37 GMT", 24 bytes.
	const tailLen = 24
	if len(s) < tailLen+6 || len(s) > tailLen+9 {
		return time.Time{}, false
	}
	name, t := s[:len(s)-tailLen], s[len(s)-tailLen:]
	if !longDayName(name) || t[:2] != ", " || t[4] != '-' || t[8] != '-' ||
		t[11] != ' ' || t[20:] != " GMT" {
		return time.Time{}, false
	}
	day, ok1 := twoDigits(t[2:4])
	month := monthNumber(t[5:8])
	yy, ok2 := twoDigits(t[9:11])
	if !ok1 || !ok2 || month == 0 {
		return time.Time{}, false
	}
	hour, minute, sec, ok := timeOfDay(t[12:20])
	if !ok {
		return time.Time{}, false
	}

	year := rfc850Year(yy, ref, time.Date(0, time.Month(month), day, hour, minute, sec, 0, time.UTC))
	if day < 1 || day > daysIn(month, year) {
		return time.Time{}, false
	}
	return time.Date(year, time.Month(month), day, hour, minute, sec, 0, time.UTC), true
}

// rfc850Year returns the year whose last two digits are yy, for a date whose month, day and
// time of day are those of at (year 0). RFC 9110 §5.6.7: a year more than 50 years in the
// future means the most recent past year with the same last two digits. It takes the latest
// year with those digits up to ref's year + 50; only in that very year can the instant itself
// fall after ref + 50 years.
func rfc850Year(yy int, ref, at time.Time) int {
	ref = ref.UTC()
	limitYear := ref.Year() + 50
	year := limitYear - floorMod(limitYear-yy, 100)
	if year == limitYear && at.AddDate(year, 0, 0).After(ref.AddDate(50, 0, 0)) {
		year -= 100
	}
	return year
}

// httpDate validates the calendar date and the time of day "hh:mm:ss" and
// builds the instant in UTC.
func httpDate(year, month, day int, hms string) (time.Time, bool) {
	hour, minute, sec, ok := timeOfDay(hms)
	if !ok || day < 1 || day > daysIn(month, year) {
		return time.Time{}, false
	}
	return time.Date(year, time.Month(month), day, hour, minute, sec, 0, time.UTC), true
}

// timeOfDay parses "hh:mm:ss" with hour 00-23, minute 00-59 and second 00-60
// (RFC 9110 allows a leap second).
func timeOfDay(s string) (hour, minute, sec int, ok bool) {
	if len(s) != 8 || s[2] != ':' || s[5] != ':' {
		return 0, 0, 0, false
	}
	hour, ok1 := twoDigits(s[0:2])
	minute, ok2 := twoDigits(s[3:5])
	sec, ok3 := twoDigits(s[6:8])
	if !ok1 || !ok2 || !ok3 || hour > 23 || minute > 59 || sec > 60 {
		return 0, 0, 0, false
	}
	return hour, minute, sec, true
}

func oneDigit(c byte) (int, bool) {
	if c < '0' || c > '9' {
		return 0, false
	}
	return int(c - '0'), true
}

func twoDigits(s string) (int, bool) {
	a, ok1 := oneDigit(s[0])
	b, ok2 := oneDigit(s[1])
	return a*10 + b, ok1 && ok2
}

func fourDigits(s string) (int, bool) {
	hi, ok1 := twoDigits(s[0:2])
	lo, ok2 := twoDigits(s[2:4])
	return hi*100 + lo, ok1 && ok2
}

func floorMod(a, b int) int {
	m := a % b
	if m < 0 {
		m += b
	}
	return m
}

// daysIn returns the number of days in month (1-12) of the proleptic
// Gregorian year.
func daysIn(month, year int) int {
	switch month {
	case 2:
		if year%4 == 0 && (year%100 != 0 || year%400 == 0) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}

// monthNumber returns 1-12 for the case-sensitive month names of RFC 9110,
// or 0.
func monthNumber(s string) int {
	switch s {
	case "Jan":
		return 1
	case "Feb":
		return 2
	case "Mar":
		return 3
	case "Apr":
		return 4
	case "May":
		return 5
	case "Jun":
		return 6
	case "Jul":
		return 7
	case "Aug":
		return 8
	case "Sep":
		return 9
	case "Oct":
		return 10
	case "Nov":
		return 11
	case "Dec":
		return 12
	}
	return 0
}

// shortDayName reports whether s is a day-name of RFC 9110 (case-sensitive).
func shortDayName(s string) bool {
	switch s {
	case "Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun":
		return true
	}
	return false
}

// longDayName reports whether s is a day-name-l of RFC 9110 (case-sensitive).
func longDayName(s string) bool {
	switch s {
	case "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday":
		return true
	}
	return false
}
