package header

import (
	"math"
	"math/bits"
	"net/http"
	"strings"
	"time"
)

// The reset fields of the APIs that most programs call, canonical so that they index an
// [http.Header] as they are. Each API names one reset per limit, with the quota left beside it.
const (
	// OpenAIResetRequests and OpenAIResetTokens are OpenAI's resets of its request and token
	// limits: durations as Go writes them ("1s", "6m0s", "20ms", "1m30.5s"), counted from the
	// response.
	OpenAIResetRequests = "X-Ratelimit-Reset-Requests"
	OpenAIResetTokens   = "X-Ratelimit-Reset-Tokens"

	// AnthropicRequestsReset and the three after it are Anthropic's resets of its request,
	// token, input-token and output-token limits: RFC 3339 instants
	// ("2026-11-29T12:02:51Z"), the moment the limit is whole again.
	AnthropicRequestsReset     = "Anthropic-Ratelimit-Requests-Reset"
	AnthropicTokensReset       = "Anthropic-Ratelimit-Tokens-Reset"
	AnthropicInputTokensReset  = "Anthropic-Ratelimit-Input-Tokens-Reset"
	AnthropicOutputTokensReset = "Anthropic-Ratelimit-Output-Tokens-Reset"

	// XRateLimitRemaining is the quota left of the fields that came before the drafts; GitHub
	// sends 0 with a 403 or 429 when its primary limit is spent.
	XRateLimitRemaining = "X-Ratelimit-Remaining"
)

// A limit names the field that tells when one limit of an API resets, and the field that tells
// how much of it is left.
type limit struct{ reset, remaining string }

// openAILimits returns OpenAI's limits, each with its reset and its quota left.
func openAILimits() []limit {
	return []limit{
		{OpenAIResetRequests, "X-Ratelimit-Remaining-Requests"},
		{OpenAIResetTokens, "X-Ratelimit-Remaining-Tokens"},
	}
}

// anthropicLimits returns Anthropic's limits, each with its reset and its quota left.
func anthropicLimits() []limit {
	return []limit{
		{AnthropicRequestsReset, "Anthropic-Ratelimit-Requests-Remaining"},
		{AnthropicTokensReset, "Anthropic-Ratelimit-Tokens-Remaining"},
		{AnthropicInputTokensReset, "Anthropic-Ratelimit-Input-Tokens-Remaining"},
		{AnthropicOutputTokensReset, "Anthropic-Ratelimit-Output-Tokens-Remaining"},
	}
}

// readLimits reads the resets of one API's limits, each with read, and returns the longest
// reset of the limits whose quota left is 0 (each of them holds the retry back), or, when none
// says 0 (a request can be refused for wanting more tokens than are left), the longest of them
// all. A reset that cannot be read makes the whole API's reading unusable: the wait it meant
// could be the longest. A reset already past holds nothing back.
func readLimits(h http.Header, limits []limit, read func(field, v string) (r Reading, parsed bool)) Reading {
	var longest, spent Reading
	for _, l := range limits {
		lines := h[l.reset]
		if len(lines) == 0 {
			continue
		}
		v, ok := singleFieldValue(lines)
		if !ok {
			return Reading{}
		}
		r, parsed := read(l.reset, v)
		if !parsed {
			return Reading{}
		}
		if !r.OK {
			continue
		}
		if r.Wait > longest.Wait {
			longest = r
		}
		if left, ok := singleFieldValue(h[l.remaining]); ok && isZero(left) && r.Wait > spent.Wait {
			spent = r
		}
	}
	if spent.OK {
		return spent
	}
	return longest
}

// readOpenAIReset reads an OpenAI reset, a Go duration, as a Reading of field.
func readOpenAIReset(field, v string) (Reading, bool) {
	d, unit, ok := readGoDuration(v)
	if !ok {
		return Reading{}, false
	}
	var lenient Leniency
	if d == 0 {
		d, lenient = unit, LenientZero
	}
	return Reading{Wait: d, OK: true, Leniency: lenient, Field: field}, true
}

// readGoDuration reads a non-negative duration as Go's time.Duration.String writes it and
// time.ParseDuration reads it, without a sign: one or more decimal numbers, each with an
// optional fraction and a unit (ns, us, µs, ms, s, m, h), as "6m0s", "20ms" or "1m30.5s". A
// fraction of a nanosecond is rounded up; a duration beyond the largest Duration saturates. A
// bare number ("0", "12"), as Azure OpenAI sends, is seconds. It returns the unit of the last
// number too, the least a 0 can stand for.
func readGoDuration(s string) (d, last time.Duration, ok bool) {
	s = TrimOWS(s)
	if s == "" {
		return 0, 0, false
	}
	if _, _, lenient, ok := readNumber(s); ok && lenient == 0 {
		whole, frac, _ := strings.Cut(s, ".")
		return scaleUp(whole, frac, time.Second), time.Second, true
	}
	for s != "" {
		var term time.Duration
		term, last, s, ok = nextDuration(s)
		if !ok {
			return 0, 0, false
		}
		d = addSaturating(d, term)
	}
	return d, last, true
}

// nextDuration reads the first number of s, with its optional fraction and its unit ("1.5m"),
// and returns its duration, its unit and the rest of s.
func nextDuration(s string) (d, unit time.Duration, rest string, ok bool) {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	whole, s := s[:i], s[i:]
	var frac string
	if len(s) > 0 && s[0] == '.' {
		j := 1
		for j < len(s) && s[j] >= '0' && s[j] <= '9' {
			j++
		}
		frac, s = s[1:j], s[j:]
		if frac == "" {
			return 0, 0, "", false
		}
	}
	unit, n := durationUnit(s)
	if whole == "" || n == 0 {
		return 0, 0, "", false
	}
	return scaleUp(whole, frac, unit), unit, s[n:], true
}

// durationUnit returns the unit that s starts with and its length in bytes, or 0, 0.
func durationUnit(s string) (time.Duration, int) {
	for _, u := range [...]struct {
		name string
		d    time.Duration
	}{{"ns", time.Nanosecond}, {"us", time.Microsecond}, {"µs", time.Microsecond}, {"μs", time.Microsecond},
		{"ms", time.Millisecond}, {"s", time.Second}, {"m", time.Minute}, {"h", time.Hour}} {
		if strings.HasPrefix(s, u.name) {
			return u.d, len(u.name)
		}
	}
	return 0, 0
}

// scaleUp returns whole.frac units, rounded up to the nanosecond and saturated at the largest
// Duration; whole and frac are strings of ASCII digits, frac perhaps empty.
func scaleUp(whole, frac string, unit time.Duration) time.Duration {
	var n uint64
	for i := 0; i < len(whole); i++ {
		n = n*10 + uint64(whole[i]-'0')
		if n > math.MaxInt64/uint64(unit) {
			return math.MaxInt64
		}
	}
	d := time.Duration(n) * unit
	// The fraction: its first 18 digits as num/10^k, times unit, rounded up; any digit after
	// them that is not 0 rounds up too.
	const most = 18
	var num, den uint64 = 0, 1
	for i := 0; i < len(frac) && i < most; i++ {
		num, den = num*10+uint64(frac[i]-'0'), den*10
	}
	hi, lo := bits.Mul64(num, uint64(unit))
	q, r := bits.Div64(hi, lo, den) // hi < den since num < den
	if r != 0 || (len(frac) > most && strings.Trim(frac[most:], "0") != "") {
		q++
	}
	return addSaturating(d, time.Duration(q))
}

// addSaturating returns a+b for non-negative a and b, at most the largest Duration.
func addSaturating(a, b time.Duration) time.Duration {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// readAnthropicReset returns a function that reads an Anthropic reset, an RFC 3339 instant, as
// a Reading of field measured against ref as readDate measures a date: an instant in whole
// seconds is read as the end of that second unless mode has [ExactDates].
func readAnthropicReset(ref time.Time, how Leniency, mode ReadMode) func(field, v string) (Reading, bool) {
	return func(field, v string) (Reading, bool) {
		t, err := time.Parse(time.RFC3339, v)
		if err != nil {
			return Reading{}, false
		}
		cut := t.Nanosecond() == 0 && !strings.Contains(v, ".")
		return instantReading(field, t, cut, how, ref, mode), true
	}
}
