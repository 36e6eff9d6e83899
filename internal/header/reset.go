package header

import (
	"math"
	"net/http"
	"strings"
	"time"
)

// The fields other than Retry-After that say when a refused client may come back, canonical so
// that they index an [http.Header] as they are.
const (
	// RetryAfterMs is Retry-After in milliseconds (Azure, OpenAI).
	RetryAfterMs = "Retry-After-Ms"

	// XMsRetryAfterMs is the same, as Azure's older services (Cosmos DB, Storage) name it.
	XMsRetryAfterMs = "X-Ms-Retry-After-Ms"

	// RateLimit is the field of draft-ietf-httpapi-ratelimit-headers-08 and later, a list of
	// policies: "default";r=0;t=30 (r the quota left, t the seconds until it resets). Draft 07
	// wrote one policy as a dictionary: limit=10, remaining=0, reset=30.
	RateLimit = "Ratelimit"

	// RateLimitReset is the reset of the drafts up to 06 (tollbooth), in delay-seconds.
	RateLimitReset = "Ratelimit-Reset"

	// XRateLimitReset is the reset of the fields that came before the drafts: a Unix time
	// (GitHub, ulule/limiter, Tyk, go-chi/httprate) or delay-seconds, depending on the sender.
	XRateLimitReset = "X-Ratelimit-Reset"
)

// minEpoch is the least number of seconds read as a Unix time in a reset field, whatever the
// reference: 3 years as a delay, 1973 as an instant.
const minEpoch = 100_000_000

// epochFrom returns the least number a reset field reads as a Unix time in seconds, and in
// milliseconds, against the reference instant ref: half of ref's own Unix time (in 2026 about
// 900 million seconds, 28 years as a delay, which no limiter means, and 1998 as an instant,
// which no reset names), at least minEpoch. It follows the reference, not the calendar, so
// that a server whose clock is far off (or fake, in a test) is read the same way.
func epochFrom(ref time.Time) (seconds, millis uint64) {
	s, ms := ref.Unix()/2, ref.UnixMilli()/2 // no max builtin in Yaegi v0.16.1 (Traefik's plugins)
	if s < minEpoch {
		s = minEpoch
	}
	if ms < minEpoch*1000 {
		ms = minEpoch * 1000
	}
	return uint64(s), uint64(ms)
}

// ReadWait reads the wait that a response asks for: its Retry-After as [ReadRetryAfter] reads
// it and, with [Refusal], when Retry-After is missing or unusable, the first of these fields that
// says when, in this order, read as generously and reported in Reading.Field:
//
//   - Retry-After-Ms, then X-Ms-Retry-After-Ms: milliseconds;
//   - RateLimit: the largest t of the policies whose r is 0 (each of them has to reset before a
//     retry can pass), or the draft-07 reset when its remaining is 0; a policy with quota left
//     says nothing about when the refused request may come back. The working group's text
//     after draft 11 names r and t a and w (its §3.1); both names are read;
//   - RateLimit-Reset: delay-seconds, or a Unix time as X-RateLimit-Reset below;
//   - OpenAI's X-RateLimit-Reset-Requests and -Tokens: Go durations ("6m0s", "20ms");
//   - Anthropic's Anthropic-RateLimit-{Requests,Tokens,Input-Tokens,Output-Tokens}-Reset: RFC
//     3339 instants, measured like a date against Date (or now) and, when in whole seconds,
//     read as the end of the second they name unless mode has [ExactDates];
//   - X-RateLimit-Reset (GitHub and many more): delay-seconds, or a Unix time when the number
//     is more than half the Unix time of the response's Date (or of now), in seconds, or in
//     milliseconds when more than half that in milliseconds (see epochFrom: a delay that long
//     is meant by no limiter, a reset that far back is sent by none); a Unix time is measured
//     like a date against Date (or now) and, when in whole seconds, read as the end of the
//     second it names unless mode has [ExactDates].
//
// Of an API that names several limits (OpenAI's, Anthropic's), the longest reset of those whose
// quota left is 0 gives the wait, or the longest of all when none says 0; one reset that cannot
// be read makes the API's fields unusable (see readLimits).
//
// A number may have a leading "+" or a decimal fraction (rounded up to the field's unit), both
// reported in Leniency; on a refusal a 0, or an instant not after its reference, means a wait
// under the field's unit, as for Retry-After: one unit.
func ReadWait(h http.Header, now time.Time, mode ReadMode) Reading {
	r := ReadRetryAfter(h, now, mode)
	if r.OK || mode&Refusal == 0 {
		return r
	}
	for _, name := range [...]string{RetryAfterMs, XMsRetryAfterMs} {
		if v, ok := singleFieldValue(h[name]); ok {
			if whole, frac, lenient, ok := readNumber(v); ok {
				return delayReading(name, whole, frac, time.Millisecond, lenient)
			}
		}
	}
	if whole, frac, lenient, ok := readRateLimit(h[RateLimit]); ok {
		return delayReading(RateLimit, whole, frac, time.Second, lenient)
	}
	if r := readResetNumber(h, RateLimitReset, now, mode); r.OK {
		return r
	}
	if r := readLimits(h, openAILimits(), readOpenAIReset); r.OK {
		return r
	}
	ref, how := reference(h, now)
	if r := readLimits(h, anthropicLimits(), readAnthropicReset(ref, how, mode)); r.OK {
		return r
	}
	return readResetNumber(h, XRateLimitReset, now, mode)
}

// readResetNumber reads the field name of h, RateLimit-Reset or X-RateLimit-Reset, as
// delay-seconds or a Unix time, as [ReadWait] says.
func readResetNumber(h http.Header, name string, now time.Time, mode ReadMode) Reading {
	v, ok := singleFieldValue(h[name])
	if !ok {
		return Reading{}
	}
	whole, frac, lenient, ok := readNumber(v)
	if !ok {
		return Reading{}
	}
	ref, how := reference(h, now)
	seconds, millis := epochFrom(ref)
	if whole < seconds {
		return delayReading(name, whole, frac, time.Second, lenient)
	}
	return epochReading(name, whole, frac, whole >= millis, lenient|how, ref, mode)
}

// delayReading is the Reading of a delay of whole units of unit, rounded up when frac (its
// digits after the point) is not all zeros; a 0 is one unit.
func delayReading(field string, whole uint64, frac string, unit time.Duration, lenient Leniency) Reading {
	if frac != "" {
		lenient |= LenientFraction
		if strings.Trim(frac, "0") != "" {
			whole++
		}
	}
	if whole == 0 {
		whole = 1
		lenient |= LenientZero
	}
	d := time.Duration(math.MaxInt64)
	if whole <= uint64(math.MaxInt64/unit) {
		d = time.Duration(whole) * unit
	}
	return Reading{Wait: d, OK: true, Leniency: lenient, Field: field}
}

// epochReading is the Reading of a Unix time, in seconds or milliseconds, measured against ref
// as readDate measures a date.
func epochReading(field string, whole uint64, frac string, millis bool, lenient Leniency, ref time.Time, mode ReadMode) Reading {
	var t time.Time
	cut := true // cut to the second, as a date is
	if frac != "" {
		lenient |= LenientFraction
	}
	roundUp := strings.Trim(frac, "0") != ""
	switch {
	case millis:
		t = time.UnixMilli(int64(whole)) // whole is at most maxNumber: no min needed, which Yaegi lacks
		if roundUp {
			t = t.Add(time.Millisecond)
		}
		cut = false
	default:
		t = time.Unix(int64(whole), 0)
		if roundUp {
			t = t.Add(time.Second)
			cut = false
		}
	}
	return instantReading(field, t, cut, lenient, ref, mode)
}

// instantReading is the Reading of the instant t named in field, measured against ref as
// readDate measures a date: when cut (t is whole seconds, as its sender cut it) it is read as
// the end of that second unless mode has [ExactDates]; an instant not after ref is a wait under
// a second (one second, or the rest of the second named), and one before that is unusable.
func instantReading(field string, t time.Time, cut bool, lenient Leniency, ref time.Time, mode ReadMode) Reading {
	exact := t.Sub(ref) // saturates rather than wraps
	d := exact
	if cut && mode&ExactDates == 0 {
		d = t.Add(time.Second).Sub(ref)
		if d <= 0 {
			return Reading{}
		}
	}
	if d < 0 {
		return Reading{}
	}
	if exact <= 0 {
		lenient |= LenientZero
	}
	if d == 0 {
		d = time.Second
	}
	return Reading{Wait: d, OK: true, Date: true, Leniency: lenient, Field: field}
}

// maxNumber is where readNumber saturates: far beyond every unit's largest Duration.
const maxNumber = 1 << 62

// readNumber reads a non-negative decimal number with an optional leading "+" and decimal
// fraction, returning its whole part (saturated at maxNumber) and the digits after the point
// ("" for none). Every byte is checked before any range check.
func readNumber(s string) (whole uint64, frac string, lenient Leniency, ok bool) {
	s = TrimOWS(s)
	if len(s) > 0 && s[0] == '+' {
		s = s[1:]
		lenient |= LenientSign
	}
	w, frac, hasFrac := strings.Cut(s, ".")
	if w == "" || !allDigits(w) || (hasFrac && (frac == "" || !allDigits(frac))) {
		return 0, "", 0, false
	}
	for i := 0; i < len(w); i++ {
		whole = whole*10 + uint64(w[i]-'0')
		if whole >= maxNumber {
			whole = maxNumber
			break
		}
	}
	return whole, frac, lenient, true
}

// readRateLimit reads the field lines of RateLimit: in the list form of draft 08 and later, the
// largest t of the policies whose r is 0; in the dictionary form of draft 07, reset when remaining
// is 0. Lines are one list, as RFC 9110 §5.3 combines them; a member it cannot read is skipped.
func readRateLimit(lines []string) (whole uint64, frac string, lenient Leniency, ok bool) {
	var dict draft07
	for _, line := range lines {
		for line != "" {
			var member string
			member, line = nextMember(line)
			member = TrimOWS(member)
			if name, value, isDict := dictMember(member); isDict {
				dict.add(name, value)
				continue
			}
			r, t, has := policyParams(member)
			if !has || !isZero(r) {
				continue
			}
			w, f, l, good := readNumber(t)
			if good && (!ok || w > whole || (w == whole && f > frac)) {
				whole, frac, lenient, ok = w, f, l, true
			}
		}
	}
	if ok {
		return whole, frac, lenient, true
	}
	if dict.hasR && dict.hasT && isZero(dict.remaining) {
		return readNumber(dict.reset)
	}
	return 0, "", 0, false
}

// draft07 holds what RateLimit's dictionary form of draft 07 says: remaining and reset.
type draft07 struct {
	remaining, reset string
	hasR, hasT       bool
}

// add takes the dictionary member name=value, if it is one of the two.
func (d *draft07) add(name, value string) {
	switch name {
	case "remaining":
		d.remaining, d.hasR = value, true
	case "reset":
		d.reset, d.hasT = value, true
	}
}

// nextMember cuts s at its first comma outside a quoted string.
func nextMember(s string) (member, rest string) {
	quoted := false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\\' && quoted:
			i++
		case c == '"':
			quoted = !quoted
		case c == ',' && !quoted:
			return s[:i], s[i+1:]
		}
	}
	return s, ""
}

// dictMember reports whether member is a draft-07 dictionary member, name=value with a bare
// token name, and returns them.
func dictMember(member string) (name, value string, ok bool) {
	name, value, ok = strings.Cut(member, "=")
	if !ok || name == "" || strings.ContainsAny(name, "\";") {
		return "", "", false
	}
	return TrimOWS(name), TrimOWS(value), true
}

// policyParams returns the values of the parameters r and t of a list member such as
// "default";r=0;t=30, or of a and w, their names after draft 11 ("default";a=0;w=30), and
// whether it has a t (or w).
func policyParams(member string) (r, t string, hasT bool) {
	// Skip the item itself: a quoted string or a token.
	i := 0
	if strings.HasPrefix(member, `"`) {
		for i = 1; i < len(member) && member[i] != '"'; i++ {
			if member[i] == '\\' {
				i++
			}
		}
		if i >= len(member) {
			return "", "", false
		}
		i++
	}
	rest := member[i:]
	if j := strings.IndexByte(rest, ';'); j >= 0 {
		rest = rest[j:]
	} else {
		return "", "", false
	}
	for params, more := rest[1:], true; more; {
		var p string
		p, params, more = strings.Cut(params, ";")
		name, value, _ := strings.Cut(TrimOWS(p), "=")
		switch name {
		case "r", "a":
			r = TrimOWS(value)
		case "t", "w":
			t, hasT = TrimOWS(value), true
		}
	}
	return r, t, hasT
}

// isZero reports whether s is a number equal to zero (a policy with no quota left).
func isZero(s string) bool {
	whole, frac, _, ok := readNumber(s)
	return ok && whole == 0 && strings.Trim(frac, "0") == ""
}

// reference returns the instant a date or Unix time in h is measured against: the response's
// Date, read generously, or now when there is none; it says whether Date was read leniently.
func reference(h http.Header, now time.Time) (time.Time, Leniency) {
	if dv, ok := singleFieldValue(h[Date]); ok {
		if t, how, ok := readHTTPDate(dv, now); ok {
			if how != 0 {
				return t, LenientDateField
			}
			return t, 0
		}
	}
	return now, 0
}
