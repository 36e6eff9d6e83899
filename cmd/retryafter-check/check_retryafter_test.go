package main

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/retryafter/retryafter/internal/testkit"
)

// response is a refusal received at testkit.T0 (sent 100 ms before) with the header fields
// of kv, name and value in turn; a name may repeat.
func response(status int, kv ...string) *exchange {
	h := make(http.Header)
	for i := 0; i+1 < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return &exchange{n: 1, method: http.MethodGet, sent: testkit.T0.Add(-100 * time.Millisecond), received: testkit.T0, status: status, header: h}
}

// imf formats T0 + d as an IMF-fixdate.
func imf(d time.Duration) string { return testkit.T0.Add(d).Format(http.TimeFormat) }

const date0 = "Sun, 29 Nov 2026 12:00:00 GMT" // testkit.T0

func TestCheckRetryAfterField(t *testing.T) {
	for _, c := range []struct {
		kv   []string
		want Result
		seen string
	}{
		{nil, Fail, "absent from the 429: a client cannot know when to come back"},
		{[]string{"Retry-After", "1"}, Pass, `"1": delay-seconds`},
		{[]string{"Retry-After", "86400"}, Pass, `"86400": delay-seconds`},
		{[]string{"Retry-After", "0"}, Fail, `"0": a wait of 0 tells clients to retry at once`},
		{[]string{"Retry-After", "000"}, Fail, "a wait of 0"},
		{[]string{"Retry-After", "1.5"}, Fail, `"1.5": not delay-seconds: a fraction; delay-seconds are whole`},
		{[]string{"Retry-After", "+5"}, Fail, `"+5": not delay-seconds: a sign`},
		{[]string{"Retry-After", "-1"}, Fail, `"-1": not delay-seconds: negative`},
		{[]string{"Retry-After", "0x10"}, Fail, "neither delay-seconds nor an HTTP-date"},
		{[]string{"Retry-After", "1", "Retry-After", "2"}, Fail, `"1, 2": several lines that disagree`},
		{[]string{"Date", date0, "Retry-After", imf(10 * time.Second)}, Pass, `"Sun, 29 Nov 2026 12:00:10 GMT": IMF-fixdate, 10 s after Date`},
		{[]string{"Retry-After", imf(10 * time.Second)}, Pass, "IMF-fixdate, 10 s after the probe's clock"},
		{[]string{"Date", date0, "Retry-After", date0}, Fail, "the same second as Date, a wait of 0"},
		{[]string{"Date", date0, "Retry-After", imf(-5 * time.Second)}, Fail, "a date 5 s before Date: the wait has passed already"},
		{[]string{"Date", date0, "Retry-After", "Sun, 29 Nov 2026 12:00:10 UTC"}, Fail, "not an HTTP-date: zone UTC (Go's time.RFC1123 or RFC1123Z); an HTTP-date ends in GMT"},
		{[]string{"Date", date0, "Retry-After", "Sun, 29 Nov 2026 12:00:10 +0000"}, Fail, "zone +0000"},
		{[]string{"Date", date0, "Retry-After", "Sunday, 29-Nov-26 12:00:10 GMT"}, Fail, "the obsolete RFC 850 form"},
		{[]string{"Date", date0, "Retry-After", "Sun Nov 29 12:00:10 2026"}, Fail, "the obsolete asctime form"},
		{[]string{"Date", date0, "Retry-After", "Mon, 29 Nov 2026 12:00:10 GMT"}, Fail, "the day name Mon does not match the date (a Sunday)"},
	} {
		got := checkRetryAfterField(response(429, c.kv...), readTold(response(429, c.kv...)))
		if got.Name != checkRetryAfter || got.Result != c.want || !strings.Contains(got.Seen, c.seen) {
			t.Errorf("%q: %s %q, want %s and %q", c.kv, got.Result, got.Seen, c.want, c.seen)
		}
	}
}
