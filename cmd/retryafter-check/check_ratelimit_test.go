package main

import (
	"strings"
	"testing"
	"time"
)

func TestCheckRateLimitFields(t *testing.T) {
	const pol = `"default";q=5;w=5`
	for _, c := range []struct {
		kv   []string
		want Result
		seen string
	}{
		{[]string{"Retry-After", "1"}, NA, "no RateLimit or RateLimit-Policy field"},
		{[]string{"Retry-After", "1", "RateLimit-Reset", "1"}, NA, "the fields of drafts up to 06"},
		{[]string{"Retry-After", "1", "X-RateLimit-Reset", "1"}, NA, "X-RateLimit-Limit and its kin follow no standard"},
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
		// Two policies exhausted: the later one decides, and Retry-After must name it.
		{[]string{"Retry-After", "3600", "RateLimit", `"burst";r=0;t=1, "daily";r=0;t=3600`}, Pass, "t=3600 agrees"},
		{[]string{"Retry-After", "1", "RateLimit", `"burst";r=0;t=1, "daily";r=0;t=3600`}, Fail, "t=3600 but Retry-After says 1 s"},
		// One exhausted, one not: only the exhausted one is compared.
		{[]string{"Retry-After", "1", "RateLimit", `"burst";r=0;t=1, "daily";r=900;t=3600`}, Pass, "t=1 agrees"},
		// A date has whole seconds on both sides: a second either way agrees.
		{[]string{"Date", date0, "Retry-After", imf(10 * time.Second), "RateLimit", `"default";r=0;t=9`}, Pass, "t=9 agrees"},
		{[]string{"Date", date0, "Retry-After", imf(10 * time.Second), "RateLimit", `"default";r=0;t=8`}, Fail, "comes back early"},
	} {
		e := response(429, c.kv...)
		got := checkRateLimitFields(e, readTold(e))
		if got.Name != checkRateLimit || got.Result != c.want || !strings.Contains(got.Seen, c.seen) {
			t.Errorf("%q: %s %q, want %s and %q", c.kv, got.Result, got.Seen, c.want, c.seen)
		}
	}
}
