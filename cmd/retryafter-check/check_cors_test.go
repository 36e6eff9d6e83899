package main

import (
	"strings"
	"testing"
	"time"
)

func TestCheckCORSExposure(t *testing.T) {
	const origin = "https://app.test"
	ra := []string{"Retry-After", "1"}
	raDate := []string{"Date", date0, "Retry-After", imf(5 * time.Second)}
	for _, c := range []struct {
		origin string
		kv     []string
		want   Result
		seen   string
	}{
		{"", append(ra, "Access-Control-Allow-Origin", "*"), NA, "no -origin given"},
		{origin, []string{"Access-Control-Allow-Origin", "*"}, NA, "no Retry-After to expose"},
		{origin, ra, Fail, "no Access-Control-Allow-Origin: a script of https://app.test cannot read the response at all"},
		{origin, append(ra, "Access-Control-Allow-Origin", "https://other.test"), Fail, "Access-Control-Allow-Origin: https://other.test, not https://app.test or *"},
		{origin, append(ra, "Access-Control-Allow-Origin", "*"), Fail, "Access-Control-Expose-Headers: (none): does not expose Retry-After"},
		{origin, append(ra, "Access-Control-Allow-Origin", origin, "Access-Control-Expose-Headers", "X-Request-Id, retry-after"), Pass, "Access-Control-Expose-Headers: X-Request-Id, retry-after"},
		{origin, append(ra, "Access-Control-Allow-Origin", "*", "Access-Control-Expose-Headers", "X-Request-Id", "Access-Control-Expose-Headers", "Retry-After"), Pass, ""},
		{origin, append(ra, "Access-Control-Allow-Origin", "*", "Access-Control-Expose-Headers", "*"), Pass, ""},
		// With credentials, "*" is a field named "*".
		{origin, append(ra, "Access-Control-Allow-Origin", origin, "Access-Control-Allow-Credentials", "true", "Access-Control-Expose-Headers", "*"), Fail, "does not expose Retry-After"},
		// A date is read against Date, so Date must be readable too.
		{origin, append(raDate, "Access-Control-Allow-Origin", "*", "Access-Control-Expose-Headers", "Retry-After"), Fail, "does not expose Date (Retry-After is a date)"},
		{origin, append(raDate, "Access-Control-Allow-Origin", "*", "Access-Control-Expose-Headers", "Retry-After, Date"), Pass, ""},
	} {
		e := response(429, c.kv...)
		got := checkCORSExposure(e, readTold(e), c.origin)
		if got.Name != checkCORS || got.Result != c.want || !strings.Contains(got.Seen, c.seen) {
			t.Errorf("%q %q: %s %q, want %s and %q", c.origin, c.kv, got.Result, got.Seen, c.want, c.seen)
		}
	}
}
