package main

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/retryafter/retryafter/internal/testkit"
)

// epoch is T0 + d as an epoch time in seconds.
func epoch(d time.Duration) string { return strconv.FormatInt(testkit.T0.Add(d).Unix(), 10) }

func TestCheckRateLimitFields(t *testing.T) {
	const pol = `"default";q=5;w=5`
	for _, c := range []struct {
		kv   []string
		want Result
		seen string
	}{
		{[]string{"Retry-After", "1"}, NA, "no RateLimit, RateLimit-Policy, RateLimit-Limit, -Remaining, -Reset or X-RateLimit-* field"},
		{[]string{"Retry-After", "1", "RateLimit-Policy", pol, "RateLimit", `"default";r=0;t=1`}, Pass, `RateLimit: "default";r=0;t=1: t=1 agrees with Retry-After`},
		{[]string{"Retry-After", "1", "RateLimit", `"default";r=0;t=1`}, Pass, "agrees"}, // no policy field: allowed
		{[]string{"Retry-After", "1", "RateLimit-Policy", pol}, Pass, "no RateLimit on the refusal to compare"},
		{[]string{"Retry-After", "1", "RateLimit-Policy", pol, "RateLimit", `"default";r=0`}, Pass, "the exhausted policy has no t"},
		{[]string{"RateLimit-Policy", pol, "RateLimit", `"default";r=0;t=1`}, Pass, "no usable Retry-After to compare with"},
		{[]string{"Retry-After", "1", "RateLimit-Policy", pol, "RateLimit", `"default";r=0;t=0`}, Fail, "t=0 but Retry-After says 1 s: a client reading RateLimit comes back early"},
		{[]string{"Retry-After", "1", "RateLimit-Policy", pol, "RateLimit", `"default";r=0;t=5`}, Fail, "t=5 but Retry-After says 1 s: a client reading RateLimit waits longer than it must"},
		{[]string{"Retry-After", "1", "RateLimit-Policy", pol, "RateLimit", `"default";r=2;t=1`}, Fail, "refused, yet every policy has quota left"},
		{[]string{"Retry-After", "1", "RateLimit-Policy", pol, "RateLimit", `"other";r=0;t=1`}, Fail, `names "other", which RateLimit-Policy`},
		{[]string{"Retry-After", "1", "RateLimit-Policy", pol, "RateLimit", `"default";t=1`}, Fail, `"default" has no r, which is required`},
		{[]string{"Retry-After", "1", "RateLimit-Policy", `"default";w=5`, "RateLimit", `"default";r=0;t=1`}, Fail, `"default" has no q, which is required`},
		{[]string{"Retry-After", "1", "RateLimit", `"default";r=0;t=-1`}, Fail, `t of "default" is not a non-negative Integer`},
		{[]string{"Retry-After", "1", "RateLimit", `"default";r=0;t=1.5`}, Fail, `t of "default" is not a non-negative Integer`},
		{[]string{"Retry-After", "1", "RateLimit", `default;r=0;t=1`}, Fail, "member 1 names its policy with a Token, not a String"},
		{[]string{"Retry-After", "1", "RateLimit", `("default");r=0`}, Fail, "member 1 is an inner list"},
		{[]string{"Retry-After", "1", "RateLimit", `limit=5, remaining=0, reset=1`}, Fail, "not a Structured Field List"},
		// The names of the working group's text after draft 11: a for r, w for t.
		{[]string{"Retry-After", "1", "RateLimit-Policy", pol, "RateLimit", `"default";a=0;w=1`}, Pass, "t=1 agrees with Retry-After"},
		{[]string{"Retry-After", "1", "RateLimit", `"api";a=0;w=1;c=1;pk=:R0VUH2FsaWNl:`}, Pass, "t=1 agrees with Retry-After"},
		{[]string{"Retry-After", "1", "RateLimit", `"default";a=0;w=5`}, Fail, "t=5 but Retry-After says 1 s"},
		{[]string{"Retry-After", "1", "RateLimit", `"default";a=3;w=1`}, Fail, "refused, yet every policy has quota left"},
		{[]string{"Retry-After", "1", "RateLimit", `"default";a=0;w=-1`}, Fail, `w of "default" is not a non-negative Integer`},
		// Two policies exhausted: the later one decides, and Retry-After must name it.
		{[]string{"Retry-After", "3600", "RateLimit", `"burst";r=0;t=1, "daily";r=0;t=3600`}, Pass, "t=3600 agrees"},
		{[]string{"Retry-After", "1", "RateLimit", `"burst";r=0;t=1, "daily";r=0;t=3600`}, Fail, "t=3600 but Retry-After says 1 s"},
		// One exhausted, one not: only the exhausted one is compared.
		{[]string{"Retry-After", "1", "RateLimit", `"burst";r=0;t=1, "daily";r=900;t=3600`}, Pass, "t=1 agrees"},
		// A date has whole seconds on both sides: a second either way agrees.
		{[]string{"Date", date0, "Retry-After", imf(10 * time.Second), "RateLimit", `"default";r=0;t=9`}, Pass, "t=9 agrees"},
		{[]string{"Date", date0, "Retry-After", imf(10 * time.Second), "RateLimit", `"default";r=0;t=8`}, Fail, "comes back early"},

		// The fields of drafts up to 06: Integers, Reset in seconds from the response.
		{[]string{"Retry-After", "5", "RateLimit-Limit", "10", "RateLimit-Remaining", "0", "RateLimit-Reset", "5"}, Pass,
			"RateLimit-Limit: 10, RateLimit-Remaining: 0, RateLimit-Reset: 5: agrees with Retry-After"},
		{[]string{"Retry-After", "1", "RateLimit-Reset", "1"}, Pass, "RateLimit-Reset: 1: agrees with Retry-After"},
		{[]string{"Retry-After", "5", "RateLimit-Limit", "10, 10;w=1", "RateLimit-Remaining", "0", "RateLimit-Reset", "5"}, Pass, "agrees with Retry-After"},
		{[]string{"Retry-After", "5", "RateLimit-Remaining", "0", "RateLimit-Reset", "4"}, Fail,
			"RateLimit-Reset: 4: but Retry-After says 5 s: a client reading RateLimit-Reset comes back early"},
		{[]string{"Retry-After", "5", "RateLimit-Reset", "6"}, Fail, "a client reading RateLimit-Reset waits longer than it must"},
		{[]string{"Retry-After", "5", "RateLimit-Limit", "10", "RateLimit-Remaining", "2", "RateLimit-Reset", "5"}, Fail, "refused, yet RateLimit-Remaining is 2"},
		{[]string{"Retry-After", "5", "RateLimit-Limit", "10", "RateLimit-Remaining", "11"}, Fail, "RateLimit-Remaining 11 is more than RateLimit-Limit 10"},
		{[]string{"Retry-After", "5", "RateLimit-Limit", "ten"}, Fail, "RateLimit-Limit is not a non-negative Integer"},
		{[]string{"Retry-After", "5", "RateLimit-Reset", "1.5"}, Fail, "RateLimit-Reset is not a non-negative Integer of seconds"},
		{[]string{"Retry-After", "5", "RateLimit-Limit", "10", "RateLimit-Remaining", "0"}, Pass, "parses; no RateLimit-Reset to compare with Retry-After"},
		{[]string{"RateLimit-Limit", "10", "RateLimit-Remaining", "0", "RateLimit-Reset", "5"}, Pass, "parses; no usable Retry-After to compare with"},
		{[]string{"Retry-After", "5", "RateLimit-Reset", epoch(5 * time.Second)}, Fail, "is an epoch time, but the draft's RateLimit-Reset is seconds from the response"},
		{[]string{"Date", date0, "Retry-After", imf(10 * time.Second), "RateLimit-Reset", "9"}, Pass, "agrees"},
		{[]string{"Date", date0, "Retry-After", imf(10 * time.Second), "RateLimit-Reset", "8"}, Fail, "comes back early"},

		// X-RateLimit-*: no standard; Reset an epoch time, seconds or a date.
		{[]string{"Date", date0, "Retry-After", "10", "X-RateLimit-Limit", "5", "X-RateLimit-Remaining", "0", "X-RateLimit-Reset", epoch(10 * time.Second)}, Pass,
			"X-RateLimit-Limit: 5, X-RateLimit-Remaining: 0, X-RateLimit-Reset: " + epoch(10*time.Second) + " (an epoch, 10 s after Date): agrees with Retry-After"},
		{[]string{"Date", date0, "Retry-After", "10", "X-RateLimit-Reset", epoch(9 * time.Second)}, Pass, "agrees"}, // a second either way
		{[]string{"Date", date0, "Retry-After", "10", "X-RateLimit-Reset", epoch(3 * time.Second)}, Fail,
			"(an epoch, 3 s after Date): but Retry-After says 10 s: a client reading X-RateLimit-Reset comes back early"},
		{[]string{"Date", date0, "Retry-After", "10", "X-RateLimit-Reset", epoch(-5 * time.Second)}, Fail, "(an epoch, 5 s before Date): but Retry-After says 10 s"},
		{[]string{"Date", date0, "Retry-After", "10", "X-RateLimit-Reset", epoch(60 * time.Second)}, Fail, "waits longer than it must"},
		{[]string{"Date", date0, "Retry-After", "10", "X-RateLimit-Reset", strconv.FormatInt(testkit.T0.Add(10*time.Second).UnixMilli(), 10)}, Pass,
			"(an epoch in milliseconds, 10 s after Date): agrees"},
		{[]string{"Date", date0, "Retry-After", "10", "X-RateLimit-Reset", "10"}, Pass, "X-RateLimit-Reset: 10 (seconds): agrees"},
		{[]string{"Date", date0, "Retry-After", "10", "X-RateLimit-Reset", "3"}, Fail, "comes back early"},
		{[]string{"Date", date0, "Retry-After", "10", "X-RateLimit-Reset", imf(10 * time.Second)}, Pass, "(a date, 10 s after Date): agrees"},
		{[]string{"Date", date0, "Retry-After", "10", "X-RateLimit-Reset", testkit.T0.Add(10 * time.Second).Format(time.RFC1123)}, Pass, "(a date, 10 s after Date): agrees"},
		// Without Date, an instant is measured against the probe's clock.
		{[]string{"Retry-After", "10", "X-RateLimit-Reset", epoch(10 * time.Second)}, Pass, "(an epoch, 10 s after the probe's clock): agrees"},
		{[]string{"Date", date0, "Retry-After", "10", "X-RateLimit-Reset", "soon"}, NA,
			"X-RateLimit-Reset is neither an epoch, seconds nor a date; these fields follow no standard, so that is not judged"},
		{[]string{"Date", date0, "Retry-After", "10", "X-RateLimit-Remaining", "-1"}, NA, "X-RateLimit-Remaining is not a non-negative Integer"},
		{[]string{"Date", date0, "Retry-After", "10", "X-RateLimit-Limit", "5", "X-RateLimit-Remaining", "3", "X-RateLimit-Reset", epoch(3 * time.Second)}, NA,
			"refused with 3 left, so another limit refused: X-RateLimit-Reset is not compared with Retry-After"},
		{[]string{"Date", date0, "X-RateLimit-Limit", "5", "X-RateLimit-Remaining", "0", "X-RateLimit-Reset", epoch(10 * time.Second)}, NA, "no usable Retry-After to compare with"},
		{[]string{"Date", date0, "Retry-After", "10", "X-RateLimit-Limit", "5", "X-RateLimit-Remaining", "0"}, NA, "no X-RateLimit-Reset to compare with Retry-After"},

		// Several kinds at once: each is judged, and any failure fails.
		{[]string{"Date", date0, "Retry-After", "10", "RateLimit", `"default";r=0;t=10`, "X-RateLimit-Reset", epoch(3 * time.Second)}, Fail,
			`RateLimit: "default";r=0;t=10: t=10 agrees with Retry-After; X-RateLimit-Reset: ` + epoch(3*time.Second) + " (an epoch, 3 s after Date): but Retry-After says 10 s"},
		{[]string{"Date", date0, "Retry-After", "10", "RateLimit", `"default";r=0;t=10`, "X-RateLimit-Reset", "soon"}, Pass, "t=10 agrees with Retry-After; X-RateLimit-Reset: soon: "},
	} {
		e := response(429, c.kv...)
		got := checkRateLimitFields(e, readTold(e))
		if got.Name != checkRateLimit || got.Result != c.want || !strings.Contains(got.Seen, c.seen) {
			t.Errorf("%q: %s %q, want %s and %q", c.kv, got.Result, got.Seen, c.want, c.seen)
		}
	}
}

// FuzzRateLimitFields checks that no values of the rate-limit fields, Retry-After and Date
// make the ratelimit check panic or answer without a verdict and a reason.
func FuzzRateLimitFields(f *testing.F) {
	f.Add("1", date0, `"default";r=0;t=1`, "5", "0", "1", "5", "0", epoch(time.Second))
	f.Add(imf(3*time.Second), date0, "", "10, 10;w=1", "0", epoch(3*time.Second), "", "-1", testkit.T0.Format(time.RFC1123))
	f.Add("0", "", "", "", "", "99999999999999999999", "", "", "9223372036854775807")
	f.Fuzz(func(t *testing.T, retryAfter, date, rl, limit, remaining, reset, xLimit, xRemaining, xReset string) {
		var kv []string
		for _, f := range [][2]string{{"Retry-After", retryAfter}, {"Date", date}, {"RateLimit", rl},
			{"RateLimit-Limit", limit}, {"RateLimit-Remaining", remaining}, {"RateLimit-Reset", reset},
			{"X-RateLimit-Limit", xLimit}, {"X-RateLimit-Remaining", xRemaining}, {"X-RateLimit-Reset", xReset}} {
			if f[1] != "" {
				kv = append(kv, f[0], f[1])
			}
		}
		e := response(429, kv...)
		c := checkRateLimitFields(e, readTold(e))
		if c.Name != checkRateLimit || (c.Result != Pass && c.Result != Fail && c.Result != NA) || c.Seen == "" {
			t.Errorf("%q: %+v", kv, c)
		}
	})
}
