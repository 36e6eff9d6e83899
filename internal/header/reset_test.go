package header

import (
	"math"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestReadWait pins the reading of each reset field, alone and beside others, on a refusal.
func TestReadWait(t *testing.T) {
	const (
		s      = time.Second
		ms     = time.Millisecond
		date   = "Sun, 29 Nov 2026 12:00:00 GMT" // instant0
		noWait = time.Duration(0)                // unusable
	)
	epoch := strconv.FormatInt(instant0.Unix(), 10)
	epochPlus := func(secs int64) string { return strconv.FormatInt(instant0.Unix()+secs, 10) }
	runWaitCases(t, []waitCase{
		// Retry-After, when usable, is read first, whatever else is there.
		{name: "Retry-After first", h: http.Header{"Retry-After": {"7"}, "Retry-After-Ms": {"100"}, "X-Ratelimit-Reset": {"30"}},
			rounded: 7 * s, exact: 7 * s, field: RetryAfter},
		{name: "unusable Retry-After, then Retry-After-Ms", h: http.Header{"Retry-After": {"soon"}, "Retry-After-Ms": {"1500"}},
			rounded: 1500 * ms, exact: 1500 * ms, field: RetryAfterMs},

		// Retry-After-Ms.
		{name: "ms", h: http.Header{"Retry-After-Ms": {"250"}}, rounded: 250 * ms, exact: 250 * ms, field: RetryAfterMs},
		{name: "ms fraction", h: http.Header{"Retry-After-Ms": {"250.1"}}, rounded: 251 * ms, exact: 251 * ms, field: RetryAfterMs, lenient: LenientFraction},
		{name: "ms 0", h: http.Header{"Retry-After-Ms": {"0"}}, rounded: ms, exact: ms, field: RetryAfterMs, lenient: LenientZero},
		{name: "ms negative", h: http.Header{"Retry-After-Ms": {"-5"}}, rounded: noWait},
		{name: "ms saturated", h: http.Header{"Retry-After-Ms": {"99999999999999999999999"}}, rounded: math.MaxInt64, exact: math.MaxInt64, field: RetryAfterMs},
		{name: "x-ms-retry-after-ms", h: http.Header{"X-Ms-Retry-After-Ms": {"40"}}, rounded: 40 * ms, exact: 40 * ms, field: XMsRetryAfterMs},
		{name: "Retry-After-Ms before x-ms-retry-after-ms", h: http.Header{"Retry-After-Ms": {"30"}, "X-Ms-Retry-After-Ms": {"40"}},
			rounded: 30 * ms, exact: 30 * ms, field: RetryAfterMs},
		{name: "ms lines disagree, then X-RateLimit-Reset", h: http.Header{"Retry-After-Ms": {"1", "2"}, "X-Ratelimit-Reset": {"3"}},
			rounded: 3 * s, exact: 3 * s, field: XRateLimitReset},

		// RateLimit, draft 08 and later.
		{name: "RateLimit t", h: http.Header{"Ratelimit": {`"default";r=0;t=30`}}, rounded: 30 * s, exact: 30 * s, field: RateLimit},
		{name: "RateLimit token name", h: http.Header{"Ratelimit": {`default;r=0;t=4`}}, rounded: 4 * s, exact: 4 * s, field: RateLimit},
		{name: "RateLimit largest t of the spent policies", h: http.Header{"Ratelimit": {`"minute";r=0;t=20, "hour";r=0;t=1800, "day";r=40;t=80000`}},
			rounded: 1800 * s, exact: 1800 * s, field: RateLimit},
		{name: "RateLimit two lines", h: http.Header{"Ratelimit": {`"a";r=0;t=2`, `"b";r=0;t=9`}}, rounded: 9 * s, exact: 9 * s, field: RateLimit},
		{name: "RateLimit comma in a name", h: http.Header{"Ratelimit": {`"a,b";r=0;t=6`}}, rounded: 6 * s, exact: 6 * s, field: RateLimit},
		{name: "RateLimit escaped quote in a name", h: http.Header{"Ratelimit": {`"a\",b";r=0;t=5`}}, rounded: 5 * s, exact: 5 * s, field: RateLimit},
		{name: "RateLimit unterminated name", h: http.Header{"Ratelimit": {`"a;r=0;t=5`}}, rounded: noWait},
		{name: "RateLimit a name alone, then a policy", h: http.Header{"Ratelimit": {`"a", b;r=0;t=3`}}, rounded: 3 * s, exact: 3 * s, field: RateLimit},
		{name: "RateLimit quota left says nothing", h: http.Header{"Ratelimit": {`"default";r=3;t=30`}}, rounded: noWait},
		{name: "RateLimit without t", h: http.Header{"Ratelimit": {`"default";r=0`}}, rounded: noWait},
		{name: "RateLimit t 0", h: http.Header{"Ratelimit": {`"default";r=0;t=0`}}, rounded: s, exact: s, field: RateLimit, lenient: LenientZero},
		{name: "RateLimit draft 07", h: http.Header{"Ratelimit": {`limit=10, remaining=0, reset=12`}}, rounded: 12 * s, exact: 12 * s, field: RateLimit},
		{name: "RateLimit draft 07 with quota left", h: http.Header{"Ratelimit": {`limit=10, remaining=2, reset=12`}}, rounded: noWait},
		{name: "RateLimit garbage, then RateLimit-Reset", h: http.Header{"Ratelimit": {`"x";r=0;t=soon`}, "Ratelimit-Reset": {"8"}},
			rounded: 8 * s, exact: 8 * s, field: RateLimitReset},

		// RateLimit-Reset, drafts up to 06.
		{name: "RateLimit-Reset", h: http.Header{"Ratelimit-Reset": {"50"}}, rounded: 50 * s, exact: 50 * s, field: RateLimitReset},
		{name: "RateLimit-Reset before X-RateLimit-Reset", h: http.Header{"Ratelimit-Reset": {"5"}, "X-Ratelimit-Reset": {"6"}},
			rounded: 5 * s, exact: 5 * s, field: RateLimitReset},
		{name: "RateLimit-Reset as a Unix time", h: http.Header{"Ratelimit-Reset": {epochPlus(10)}, "Date": {date}},
			rounded: 11 * s, exact: 10 * s, field: RateLimitReset},

		// X-RateLimit-Reset: delay-seconds or a Unix time.
		{name: "X delay-seconds", h: http.Header{"X-Ratelimit-Reset": {"42"}}, rounded: 42 * s, exact: 42 * s, field: XRateLimitReset},
		{name: "X largest delay", h: http.Header{"X-Ratelimit-Reset": {strconv.FormatInt(instant0.Unix()/2-1, 10)}},
			rounded: time.Duration(instant0.Unix()/2-1) * s, exact: time.Duration(instant0.Unix()/2-1) * s, field: XRateLimitReset},
		{name: "X smallest epoch is far past", h: http.Header{"X-Ratelimit-Reset": {strconv.FormatInt(instant0.Unix()/2, 10)}}, rounded: noWait},
		{name: "X epoch against a Date of 2000", h: http.Header{"X-Ratelimit-Reset": {"946684810"}, "Date": {"Sat, 01 Jan 2000 00:00:00 GMT"}},
			rounded: 11 * s, exact: 10 * s, field: XRateLimitReset},
		{name: "X delay against a Date of 1970", h: http.Header{"X-Ratelimit-Reset": {"30"}, "Date": {"Thu, 01 Jan 1970 00:00:00 GMT"}},
			rounded: 30 * s, exact: 30 * s, field: XRateLimitReset},
		{name: "X epoch against Date", h: http.Header{"X-Ratelimit-Reset": {epochPlus(10)}, "Date": {date}},
			rounded: 11 * s, exact: 10 * s, field: XRateLimitReset},
		{name: "X epoch against a skewed Date", h: http.Header{"X-Ratelimit-Reset": {epochPlus(3600 + 10)}, "Date": {"Sun, 29 Nov 2026 13:00:00 GMT"}},
			rounded: 11 * s, exact: 10 * s, field: XRateLimitReset},
		{name: "X epoch against now", h: http.Header{"X-Ratelimit-Reset": {epochPlus(10)}}, rounded: 11 * s, exact: 10 * s, field: XRateLimitReset},
		{name: "X epoch this second", h: http.Header{"X-Ratelimit-Reset": {epoch}, "Date": {date}},
			rounded: s, exact: s, field: XRateLimitReset, lenient: LenientZero},
		{name: "X epoch past", h: http.Header{"X-Ratelimit-Reset": {epochPlus(-1)}, "Date": {date}}, rounded: noWait},
		{name: "X epoch fraction", h: http.Header{"X-Ratelimit-Reset": {epochPlus(10) + ".25"}, "Date": {date}},
			rounded: 11 * s, exact: 11 * s, field: XRateLimitReset, lenient: LenientFraction},
		{name: "X epoch ms", h: http.Header{"X-Ratelimit-Reset": {strconv.FormatInt(instant0.UnixMilli()+2500, 10)}, "Date": {date}},
			rounded: 2500 * ms, exact: 2500 * ms, field: XRateLimitReset},
		{name: "X epoch ms fraction", h: http.Header{"X-Ratelimit-Reset": {strconv.FormatInt(instant0.UnixMilli()+2500, 10) + ".5"}, "Date": {date}},
			rounded: 2501 * ms, exact: 2501 * ms, field: XRateLimitReset, lenient: LenientFraction},
		{name: "X epoch against a UTC Date", h: http.Header{"X-Ratelimit-Reset": {epochPlus(10)}, "Date": {"Sun, 29 Nov 2026 12:00:00 UTC"}},
			rounded: 11 * s, exact: 10 * s, field: XRateLimitReset, lenient: LenientDateField},
		{name: "X 0", h: http.Header{"X-Ratelimit-Reset": {"0"}}, rounded: s, exact: s, field: XRateLimitReset, lenient: LenientZero},
		{name: "X signed", h: http.Header{"X-Ratelimit-Reset": {"+3"}}, rounded: 3 * s, exact: 3 * s, field: XRateLimitReset, lenient: LenientSign},
		{name: "X hex", h: http.Header{"X-Ratelimit-Reset": {"0x10"}}, rounded: noWait},
		{name: "X exponent", h: http.Header{"X-Ratelimit-Reset": {"1e3"}}, rounded: noWait},
		{name: "X negative", h: http.Header{"X-Ratelimit-Reset": {"-30"}}, rounded: noWait},
		{name: "nothing", h: http.Header{"X-Ratelimit-Remaining": {"0"}}, rounded: noWait},
	})
}

// waitCase is one response and the wait that ReadWait reads from it on a refusal, without and
// with ExactDates.
type waitCase struct {
	name           string
	h              http.Header
	rounded, exact time.Duration // 0 for unusable
	field          string
	lenient        Leniency
}

// runWaitCases checks each case at instant0, the client's clock.
func runWaitCases(t *testing.T, cases []waitCase) {
	t.Helper()
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			for _, exact := range []bool{false, true} {
				mode, want := Refusal, tt.rounded
				if exact {
					mode, want = Refusal|ExactDates, tt.exact
				}
				r := ReadWait(tt.h, instant0, mode)
				if tt.rounded == 0 {
					if r != (Reading{}) {
						t.Errorf("ReadWait(%v, exact %v) = %+v; want unusable", tt.h, exact, r)
					}
					continue
				}
				if !r.OK || r.Wait != want || r.Field != tt.field || r.Leniency != tt.lenient {
					t.Errorf("ReadWait(%v, exact %v) = %+v; want %v from %s, leniency %v", tt.h, exact, r, want, tt.field, tt.lenient)
				}
			}
		})
	}
}

// TestReadWaitOnlyRefusals checks that the reset fields say nothing outside a refusal (a
// redirect's Retry-After is all there is to read).
func TestReadWaitOnlyRefusals(t *testing.T) {
	h := http.Header{"Retry-After-Ms": {"100"}, "Ratelimit": {`"d";r=0;t=3`}, "Ratelimit-Reset": {"3"}, "X-Ratelimit-Reset": {"3"}}
	if r := ReadWait(h, instant0, 0); r != (Reading{}) {
		t.Errorf("ReadWait on a redirect = %+v; want unusable", r)
	}
}

// TestReadWaitEpochs checks the reading of Unix times against many random Dates of two
// centuries, skews and waits: a reset cut to the second reads as the end of that second measured against Date,
// whatever the local clock says, and one sent as delay-seconds reads as itself.
func TestReadWaitEpochs(t *testing.T) {
	r := rand.New(rand.NewPCG(33, 32))
	for range 5000 {
		// From 1980 to 2180: the reading follows the server's clock, not the calendar.
		server := time.Date(1980, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(r.Int64N(int64(200 * 365 * 24 * time.Hour)))).Truncate(time.Second)
		local := server.Add(time.Duration(r.Int64N(int64(2*time.Hour))) - time.Hour) // the client's clock, up to an hour off
		secs := 1 + r.Int64N(86400)
		h := http.Header{"Date": {server.Format(http.TimeFormat)}, "X-Ratelimit-Reset": {strconv.FormatInt(server.Unix()+secs, 10)}}
		want := time.Duration(secs) * time.Second
		if got := ReadWait(h, local, Refusal); !got.OK || got.Wait != want+time.Second || !got.Date {
			t.Fatalf("%v: ReadWait = %+v; want %v (the end of the second named)", h, got, want+time.Second)
		}
		if got := ReadWait(h, local, Refusal|ExactDates); !got.OK || got.Wait != want {
			t.Fatalf("%v with ExactDates: ReadWait = %+v; want %v", h, got, want)
		}
		h["X-Ratelimit-Reset"] = []string{strconv.FormatInt(secs, 10)}
		if got := ReadWait(h, local, Refusal); !got.OK || got.Wait != want || got.Date {
			t.Fatalf("%v: ReadWait = %+v; want %v", h, got, want)
		}
	}
}

func TestReadWaitAllocs(t *testing.T) {
	for _, h := range []http.Header{
		{"Retry-After-Ms": {"100"}},
		{"Ratelimit": {`"minute";r=0;t=20, "hour";r=0;t=1800`}},
		{"X-Ratelimit-Reset": {"1796040010"}, "Date": {"Sun, 29 Nov 2026 12:00:00 GMT"}},
	} {
		if n := testing.AllocsPerRun(100, func() { ReadWait(h, instant0, Refusal) }); n != 0 {
			t.Errorf("ReadWait(%v) allocates %v times, want 0", h, n)
		}
	}
}

// FuzzReadWait checks, for any values of the reset fields and Date, in every mode: no panic; a
// wait never negative and above 0 when ok on a refusal; nothing but the zero Reading when not
// ok; a Field that names a field h has; and, wherever Retry-After is usable, its reading.
func FuzzReadWait(f *testing.F) {
	f.Add("", "250", "", "", "", "")
	f.Add("soon", "", `"default";r=0;t=30`, "", "", "")
	f.Add("", "", `limit=1, remaining=0, reset=4`, "", "", "")
	f.Add("", "", "", "50", "1796040010", "Sun, 29 Nov 2026 12:00:00 GMT")
	f.Add("", "", "", "", "1796040010.5", "")
	f.Add("", "", "", "", "1796040010000", "Sun, 29 Nov 2026 12:00:00 UTC")
	f.Fuzz(func(t *testing.T, retryAfter, ms, rateLimit, reset, xReset, date string) {
		h := http.Header{}
		for name, v := range map[string]string{"Retry-After": retryAfter, "Retry-After-Ms": ms, "X-Ms-Retry-After-Ms": reset,
			"Ratelimit": rateLimit, "Ratelimit-Reset": reset, "X-Ratelimit-Reset": xReset, "Date": date} {
			if v != "" {
				h[name] = strings.Split(v, "\n")
			}
		}
		for _, mode := range []ReadMode{0, Refusal, Refusal | ExactDates, ExactDates} {
			r := ReadWait(h, instant0, mode)
			switch {
			case r.Wait < 0:
				t.Fatalf("ReadWait(%v, %v) = %+v: negative", h, mode, r)
			case !r.OK && r != (Reading{}):
				t.Fatalf("ReadWait(%v, %v) = %+v: not ok, yet says more", h, mode, r)
			case r.OK && mode&Refusal != 0 && r.Wait <= 0:
				t.Fatalf("ReadWait(%v, %v) = %+v: no wait on a refusal", h, mode, r)
			case r.OK && h[r.Field] == nil:
				t.Fatalf("ReadWait(%v, %v) = %+v: read from a field h does not have", h, mode, r)
			}
			if ra := ReadRetryAfter(h, instant0, mode); (ra.OK || mode&Refusal == 0) && r != ra {
				t.Fatalf("ReadWait(%v, %v) = %+v; Retry-After reads %+v", h, mode, r, ra)
			}
		}
	})
}
