package header

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestReadWaitOpenAI reads OpenAI's resets, durations as Go writes them, in the shapes of its
// rate-limit guide (requests "1s", tokens "6m0s") and of the responses its users quote ("12ms",
// "9ms", "20ms"): the longest reset of a spent limit, or of all when none says it is spent.
func TestReadWaitOpenAI(t *testing.T) {
	const s, ms = time.Second, time.Millisecond
	guide := http.Header{ // the guide's example, on a refusal
		"X-Ratelimit-Limit-Requests": {"60"}, "X-Ratelimit-Limit-Tokens": {"150000"},
		"X-Ratelimit-Remaining-Requests": {"59"}, "X-Ratelimit-Remaining-Tokens": {"149984"},
		"X-Ratelimit-Reset-Requests": {"1s"}, "X-Ratelimit-Reset-Tokens": {"6m0s"},
	}
	runWaitCases(t, []waitCase{
		{name: "only reset-requests 6m0s", h: http.Header{"X-Ratelimit-Reset-Requests": {"6m0s"}},
			rounded: 6 * time.Minute, exact: 6 * time.Minute, field: OpenAIResetRequests},
		{name: "the guide's fields: none spent, the longest", h: guide,
			rounded: 6 * time.Minute, exact: 6 * time.Minute, field: OpenAIResetTokens},
		{name: "requests spent", h: http.Header{"X-Ratelimit-Remaining-Requests": {"0"}, "X-Ratelimit-Remaining-Tokens": {"149984"},
			"X-Ratelimit-Reset-Requests": {"20ms"}, "X-Ratelimit-Reset-Tokens": {"6m0s"}},
			rounded: 20 * ms, exact: 20 * ms, field: OpenAIResetRequests},
		{name: "both spent, the longest", h: http.Header{"X-Ratelimit-Remaining-Requests": {"0"}, "X-Ratelimit-Remaining-Tokens": {"0"},
			"X-Ratelimit-Reset-Requests": {"12ms"}, "X-Ratelimit-Reset-Tokens": {"9ms"}},
			rounded: 12 * ms, exact: 12 * ms, field: OpenAIResetRequests},
		{name: "a fraction", h: http.Header{"X-Ratelimit-Reset-Tokens": {"1m30.5s"}},
			rounded: 90*s + 500*ms, exact: 90*s + 500*ms, field: OpenAIResetTokens},
		{name: "hours", h: http.Header{"X-Ratelimit-Reset-Requests": {"2h3m4s"}},
			rounded: 2*time.Hour + 3*time.Minute + 4*s, exact: 2*time.Hour + 3*time.Minute + 4*s, field: OpenAIResetRequests},
		{name: "microseconds, rounded up", h: http.Header{"X-Ratelimit-Reset-Requests": {"1.0000001µs"}},
			rounded: 1001, exact: 1001, field: OpenAIResetRequests},
		{name: "0s is a second", h: http.Header{"X-Ratelimit-Reset-Tokens": {"0s"}},
			rounded: s, exact: s, field: OpenAIResetTokens, lenient: LenientZero},
		{name: "saturated", h: http.Header{"X-Ratelimit-Reset-Tokens": {"99999999999999999999h"}},
			rounded: 1<<63 - 1, exact: 1<<63 - 1, field: OpenAIResetTokens},
		{name: "one unreadable reset spoils both", h: http.Header{"X-Ratelimit-Reset-Requests": {"1s"}, "X-Ratelimit-Reset-Tokens": {"soon"}}},
		{name: "negative", h: http.Header{"X-Ratelimit-Reset-Requests": {"-1s"}}},
		{name: "a bare number is seconds (Azure OpenAI)", h: http.Header{"X-Ratelimit-Reset-Tokens": {"6"}},
			rounded: 6 * s, exact: 6 * s, field: OpenAIResetTokens},
		{name: "a bare 0 is a second (Azure OpenAI)", h: http.Header{"X-Ratelimit-Reset-Tokens": {"0"}},
			rounded: s, exact: s, field: OpenAIResetTokens, lenient: LenientZero},
		{name: "a unit alone", h: http.Header{"X-Ratelimit-Reset-Requests": {"s"}}},
		{name: "an unknown unit", h: http.Header{"X-Ratelimit-Reset-Requests": {"6d"}}},
		{name: "a signed number", h: http.Header{"X-Ratelimit-Reset-Requests": {"+6"}}},
		{name: "a bare fraction point", h: http.Header{"X-Ratelimit-Reset-Requests": {"6.s"}}},
		{name: "lines that disagree", h: http.Header{"X-Ratelimit-Reset-Requests": {"1s", "2s"}}},
		{name: "Retry-After first", h: http.Header{"Retry-After": {"3"}, "X-Ratelimit-Reset-Requests": {"6m0s"}},
			rounded: 3 * s, exact: 3 * s, field: RetryAfter},
		{name: "retry-after-ms before the resets", h: http.Header{"Retry-After-Ms": {"1500"}, "X-Ratelimit-Reset-Requests": {"6m0s"}},
			rounded: 1500 * ms, exact: 1500 * ms, field: RetryAfterMs},
	})
}

// TestReadWaitAnthropic reads Anthropic's resets, RFC 3339 instants, against the response's
// Date, whatever the client's clock says: the longest reset of a spent limit, or of all.
func TestReadWaitAnthropic(t *testing.T) {
	const s = time.Second
	server := instant0.Add(-37 * time.Minute) // the server's clock, 37 minutes behind the client's
	date := server.Format(http.TimeFormat)
	at := func(d time.Duration) string { return server.Add(d).Format(time.RFC3339) }
	atNano := func(d time.Duration) string { return server.Add(d).Format(time.RFC3339Nano) }
	runWaitCases(t, []waitCase{
		{name: "tokens spent, 171 s away", h: http.Header{"Date": {date},
			"Anthropic-Ratelimit-Requests-Limit": {"50"}, "Anthropic-Ratelimit-Requests-Remaining": {"49"},
			"Anthropic-Ratelimit-Requests-Reset": {at(2 * s)},
			"Anthropic-Ratelimit-Tokens-Limit":   {"40000"}, "Anthropic-Ratelimit-Tokens-Remaining": {"0"},
			"Anthropic-Ratelimit-Tokens-Reset": {at(171 * s)}},
			rounded: 172 * s, exact: 171 * s, field: AnthropicTokensReset},
		{name: "input and output tokens spent, the longest", h: http.Header{"Date": {date},
			"Anthropic-Ratelimit-Input-Tokens-Remaining": {"0"}, "Anthropic-Ratelimit-Input-Tokens-Reset": {at(20 * s)},
			"Anthropic-Ratelimit-Output-Tokens-Remaining": {"0"}, "Anthropic-Ratelimit-Output-Tokens-Reset": {at(50 * s)},
			"Anthropic-Ratelimit-Requests-Remaining": {"10"}, "Anthropic-Ratelimit-Requests-Reset": {at(59 * s)}},
			rounded: 51 * s, exact: 50 * s, field: AnthropicOutputTokensReset},
		{name: "none spent, the longest", h: http.Header{"Date": {date},
			"Anthropic-Ratelimit-Requests-Reset": {at(4 * s)}, "Anthropic-Ratelimit-Tokens-Reset": {at(9 * s)}},
			rounded: 10 * s, exact: 9 * s, field: AnthropicTokensReset},
		{name: "a fraction is the instant", h: http.Header{"Date": {date}, "Anthropic-Ratelimit-Requests-Reset": {atNano(1500 * time.Millisecond)}},
			rounded: 1500 * time.Millisecond, exact: 1500 * time.Millisecond, field: AnthropicRequestsReset},
		{name: "an offset", h: http.Header{"Date": {date}, "Anthropic-Ratelimit-Requests-Reset": {server.Add(30 * s).In(time.FixedZone("", -7*3600)).Format(time.RFC3339)}},
			rounded: 31 * s, exact: 30 * s, field: AnthropicRequestsReset},
		{name: "this second", h: http.Header{"Date": {date}, "Anthropic-Ratelimit-Requests-Reset": {at(0)}},
			rounded: s, exact: s, field: AnthropicRequestsReset, lenient: LenientZero},
		{name: "a past reset holds nothing back", h: http.Header{"Date": {date},
			"Anthropic-Ratelimit-Requests-Remaining": {"0"}, "Anthropic-Ratelimit-Requests-Reset": {at(-5 * s)},
			"Anthropic-Ratelimit-Tokens-Reset": {at(7 * s)}},
			rounded: 8 * s, exact: 7 * s, field: AnthropicTokensReset},
		{name: "only past resets", h: http.Header{"Date": {date}, "Anthropic-Ratelimit-Requests-Reset": {at(-5 * s)}}},
		{name: "without Date, against now", h: http.Header{"Anthropic-Ratelimit-Tokens-Reset": {instant0.Add(12 * s).Format(time.RFC3339)}},
			rounded: 13 * s, exact: 12 * s, field: AnthropicTokensReset},
		{name: "Retry-After first", h: http.Header{"Date": {date}, "Retry-After": {"5"}, "Anthropic-Ratelimit-Tokens-Reset": {at(171 * s)}},
			rounded: 5 * s, exact: 5 * s, field: RetryAfter},
		{name: "an HTTP-date is not RFC 3339", h: http.Header{"Date": {date}, "Anthropic-Ratelimit-Tokens-Reset": {server.Add(9 * s).Format(http.TimeFormat)}}},
		{name: "one unreadable reset spoils all", h: http.Header{"Date": {date},
			"Anthropic-Ratelimit-Requests-Reset": {at(4 * s)}, "Anthropic-Ratelimit-Tokens-Reset": {"soon"}}},
	})
}

// TestReadWaitGitHub reads GitHub's primary limit, X-RateLimit-Reset in epoch seconds against
// Date, in the shape of its documentation's refused request, and its secondary limits'
// Retry-After.
func TestReadWaitGitHub(t *testing.T) {
	const s = time.Second
	runWaitCases(t, []waitCase{
		{name: "the documentation's 403", h: http.Header{"Date": {"Tue, 20 Aug 2013 14:50:41 GMT"},
			"X-Ratelimit-Limit": {"60"}, "X-Ratelimit-Remaining": {"0"}, "X-Ratelimit-Reset": {"1377013266"}},
			rounded: 3026 * s, exact: 3025 * s, field: XRateLimitReset},
		{name: "a secondary limit", h: http.Header{"Date": {"Tue, 20 Aug 2013 14:50:41 GMT"}, "Retry-After": {"60"},
			"X-Ratelimit-Limit": {"5000"}, "X-Ratelimit-Remaining": {"4990"}, "X-Ratelimit-Reset": {"1377013266"}},
			rounded: 60 * s, exact: 60 * s, field: RetryAfter},
	})
}

// TestReadWaitRateLimitNames reads the RateLimit field in the names of draft 11 (r, t) and in
// those of the working group's text after it (a, w), alike.
func TestReadWaitRateLimitNames(t *testing.T) {
	const s = time.Second
	runWaitCases(t, []waitCase{
		{name: "draft 11", h: http.Header{"Ratelimit": {`"default";r=0;t=30`}}, rounded: 30 * s, exact: 30 * s, field: RateLimit},
		{name: "after draft 11", h: http.Header{"Ratelimit": {`"default";a=0;w=30`}}, rounded: 30 * s, exact: 30 * s, field: RateLimit},
		{name: "after draft 11, with a cost and a partition key", h: http.Header{"Ratelimit": {`"api";a=0;w=60;c=1;pk=:R0VUH2FsaWNl:`}},
			rounded: 60 * s, exact: 60 * s, field: RateLimit},
		{name: "after draft 11, quota left", h: http.Header{"Ratelimit": {`"default";a=50;w=30`}}},
		{name: "both, the largest spent", h: http.Header{"Ratelimit": {`"a";r=0;t=5, "b";a=0;w=9`}}, rounded: 9 * s, exact: 9 * s, field: RateLimit},
	})
}

// TestReadGoDurationAgreesWithGo checks, over durations that Go writes, that the reading is
// what time.ParseDuration reads.
func TestReadGoDurationAgreesWithGo(t *testing.T) {
	for d := time.Duration(1); d < 1<<62; d = d*3 + 7 {
		got, _, ok := readGoDuration(d.String())
		if !ok || got != d {
			t.Fatalf("readGoDuration(%q) = %v, %v; want %v", d.String(), got, ok, d)
		}
	}
}

// FuzzReadGoDuration checks, for any text: no panic; never a negative duration; and wherever
// time.ParseDuration reads a duration without a sign, with digits on either side of each point,
// a reading never shorter than it, and longer by less than a nanosecond a number (the fractions
// it rounds up where Go cuts).
func FuzzReadGoDuration(f *testing.F) {
	for _, s := range []string{"1s", "6m0s", "20ms", "1m30.5s", "2h3m4.000000001s", "1.5µs", "0s", ".5s", "-1s", "99999999999h"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, unit, ok := readGoDuration(s)
		if d < 0 || (ok && unit <= 0) {
			t.Fatalf("readGoDuration(%q) = %v, %v, %v", s, d, unit, ok)
		}
		trimmed := TrimOWS(s)
		if strings.ContainsAny(trimmed, "+-") {
			return
		}
		want, err := time.ParseDuration(trimmed)
		if err != nil || !digitsAroundPoints(trimmed) {
			return // what Go reads and readGoDuration need not: ".5s", "1.s"
		}
		numbers := int64(strings.Count(trimmed, "s") + strings.Count(trimmed, "m") + strings.Count(trimmed, "h"))
		if !ok || d < want || int64(d-want) > numbers {
			t.Fatalf("readGoDuration(%q) = %v, %v; time.ParseDuration reads %v", s, d, ok, want)
		}
	})
}

// digitsAroundPoints reports whether each decimal point of s has a digit on either side.
func digitsAroundPoints(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == '.' && (i == 0 || i == len(s)-1 || !isDigit(s[i-1]) || !isDigit(s[i+1])) {
			return false
		}
	}
	return true
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// FuzzReadWaitAPIs checks, for any values of OpenAI's and Anthropic's fields and of Date, in
// every mode: no panic; a wait never negative and above 0 when ok on a refusal; nothing but the
// zero Reading when not ok; a Field that names a field h has; and never a wait shorter than a
// spent limit's reset that reads on its own.
func FuzzReadWaitAPIs(f *testing.F) {
	date := instant0.Format(http.TimeFormat)
	f.Add("6m0s", "20ms", "0", "", "", "", "")
	f.Add("", "", "", instant0.Add(171*time.Second).Format(time.RFC3339), "0", "2026-11-29T12:00:01.5Z", date)
	f.Add("1s", "soon", "1", "2026-11-29T12:00:00Z", "", "", "Sun, 29 Nov 2026 12:00:00 UTC")
	f.Fuzz(func(t *testing.T, openReq, openTok, openLeft, anthReq, anthLeft, anthTok, date string) {
		h := http.Header{}
		for name, v := range map[string]string{OpenAIResetRequests: openReq, OpenAIResetTokens: openTok,
			"X-Ratelimit-Remaining-Requests": openLeft, AnthropicRequestsReset: anthReq,
			"Anthropic-Ratelimit-Requests-Remaining": anthLeft, AnthropicTokensReset: anthTok, "Date": date} {
			if v != "" {
				h[name] = strings.Split(v, "\n")
			}
		}
		for _, mode := range []ReadMode{Refusal, Refusal | ExactDates} {
			r := ReadWait(h, instant0, mode)
			switch {
			case !r.OK && r != (Reading{}):
				t.Fatalf("ReadWait(%v, %v) = %+v: not ok, yet says more", h, mode, r)
			case r.OK && r.Wait <= 0:
				t.Fatalf("ReadWait(%v, %v) = %+v: no wait on a refusal", h, mode, r)
			case r.OK && h[r.Field] == nil:
				t.Fatalf("ReadWait(%v, %v) = %+v: read from a field h does not have", h, mode, r)
			}
			// A spent request limit whose reset reads alone holds the retry back at least as long.
			if r.Field == OpenAIResetTokens || r.Field == OpenAIResetRequests {
				alone := ReadWait(http.Header{OpenAIResetRequests: h[OpenAIResetRequests]}, instant0, mode)
				if left, ok := singleFieldValue(h["X-Ratelimit-Remaining-Requests"]); ok && isZero(left) && alone.OK && r.Wait < alone.Wait {
					t.Fatalf("ReadWait(%v, %v) = %+v; the spent request limit alone reads %v", h, mode, r, alone.Wait)
				}
			}
		}
	})
}

// TestReadWaitAPIsAllocs checks that reading the APIs' resets does not allocate.
func TestReadWaitAPIsAllocs(t *testing.T) {
	date := instant0.Format(http.TimeFormat)
	for _, h := range []http.Header{
		{OpenAIResetRequests: {"6m0s"}, OpenAIResetTokens: {"20ms"}},
		{"Date": {date}, AnthropicTokensReset: {instant0.Add(171 * time.Second).Format(time.RFC3339)}},
	} {
		if n := testing.AllocsPerRun(100, func() { ReadWait(h, instant0, Refusal) }); n != 0 {
			t.Errorf("ReadWait(%v) allocates %v times, want 0", h, n)
		}
	}
}
