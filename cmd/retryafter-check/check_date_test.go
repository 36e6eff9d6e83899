package main

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/retryafter/retryafter/internal/testkit"
)

func TestCheckDateField(t *testing.T) {
	for _, c := range []struct {
		status int
		kv     []string
		want   Result
		seen   string
	}{
		{429, nil, Fail, "absent from the 429"},
		{503, nil, Fail, "absent from the 503: a client cannot measure a Retry-After date against the server's clock"},
		{429, []string{"Date", date0}, Pass, `"Sun, 29 Nov 2026 12:00:00 GMT": IMF-fixdate, agrees with the probe's clock to the second`},
		// Date has whole seconds: a server 0.9 s into its second still agrees.
		{429, []string{"Date", imf(-time.Second)}, Pass, "agrees with the probe's clock to the second"},
		{429, []string{"Date", imf(30 * time.Second)}, Pass, "IMF-fixdate, at least 30 s ahead of the probe's clock"},
		{429, []string{"Date", imf(-30 * time.Second)}, Pass, "IMF-fixdate, at least 28.9 s behind the probe's clock"},
		{429, []string{"Date", imf(61 * time.Second)}, Fail, "at least 61 s ahead of the probe's clock; one of the two clocks is wrong"},
		{429, []string{"Date", imf(-2 * time.Hour)}, Fail, "at least 1h59m59s behind the probe's clock; one of the two clocks is wrong"},
		{429, []string{"Date", testkit.T0.Format(time.RFC1123)}, Fail, "not an HTTP-date: zone UTC"},
		{429, []string{"Date", "Sunday, 29-Nov-26 12:00:00 GMT"}, Fail, "the obsolete RFC 850 form"},
		{429, []string{"Date", "yesterday"}, Fail, `"yesterday": not an HTTP-date`},
		{429, []string{"Date", date0, "Date", imf(time.Second)}, Fail, "several lines that disagree"},
	} {
		got := checkDateField(response(c.status, c.kv...))
		if got.Name != checkDate || got.Result != c.want || !strings.Contains(got.Seen, c.seen) {
			t.Errorf("%d %q: %s %q, want %s and %q", c.status, c.kv, got.Result, got.Seen, c.want, c.seen)
		}
	}
}

// TestLeapSecondIsIMFFixdate: IMF-fixdate's time of day runs to 23:59:60 (RFC 9110, 5.6.7), so
// "Sat, 31 Dec 2016 23:59:60 GMT", the leap second that ended 2016, is an IMF-fixdate a sender
// may write. The date and retry-after checks failed it, saying its day name did not match.
func TestLeapSecondIsIMFFixdate(t *testing.T) {
	const leap = "Sat, 31 Dec 2016 23:59:60 GMT"
	// The probe's clock (no leap seconds) read 2017-01-01T00:00:00.1Z on receipt.
	recv := time.Date(2017, 1, 1, 0, 0, 0, 100e6, time.UTC)
	e := &exchange{n: 1, method: http.MethodGet, sent: recv.Add(-100 * time.Millisecond), received: recv,
		status: http.StatusTooManyRequests, header: http.Header{"Date": {leap}, "Retry-After": {"5"}}}
	if c := checkDateField(e); c.Result != Pass {
		t.Errorf("Date %q: %s %q, want pass", leap, c.Result, c.Seen)
	}

	e2 := &exchange{n: 1, method: http.MethodGet, sent: recv.Add(-10*time.Second - 100*time.Millisecond), received: recv.Add(-10 * time.Second),
		status: http.StatusServiceUnavailable, header: http.Header{"Date": {"Sat, 31 Dec 2016 23:59:50 GMT"}, "Retry-After": {leap}}}
	if c := checkRetryAfterField(e2, readTold(e2)); c.Result != Pass {
		t.Errorf("Retry-After %q: %s %q, want pass", leap, c.Result, c.Seen)
	}
}
