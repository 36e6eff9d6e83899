package retryafter_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/retryafter/retryafter"
)

// ParseRetryAfter reads both forms of Retry-After. A date is measured from the
// response's own Date, so the client's clock (here a day off) plays no part,
// and all three HTTP-date formats are read.
func ExampleParseRetryAfter_allForms() {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC) // the local clock, wrong by a day
	for _, h := range []http.Header{
		{"Retry-After": {"120"}},
		{"Retry-After": {"Sun, 29 Nov 2026 12:01:30 GMT"}, "Date": {"Sun, 29 Nov 2026 12:00:00 GMT"}},
		{"Retry-After": {"Sunday, 29-Nov-26 12:05:00 GMT"}, "Date": {"Sun, 29 Nov 2026 12:00:00 GMT"}},
		{"Retry-After": {"Sun Nov 29 12:00:10 2026"}, "Date": {"Sun Nov 29 12:00:00 2026"}},
		{"Retry-After": {"Sun, 29 Nov 2026 11:59:00 GMT"}, "Date": {"Sun, 29 Nov 2026 12:00:00 GMT"}},
		{"Retry-After": {"-1"}},
	} {
		d, ok := retryafter.ParseRetryAfter(h, now)
		fmt.Printf("%-34q %v %v\n", h.Get("Retry-After"), d, ok)
	}
	// Output:
	// "120"                              2m0s true
	// "Sun, 29 Nov 2026 12:01:30 GMT"    1m30s true
	// "Sunday, 29-Nov-26 12:05:00 GMT"   5m0s true
	// "Sun Nov 29 12:00:10 2026"         10s true
	// "Sun, 29 Nov 2026 11:59:00 GMT"    0s false
	// "-1"                               0s false
}

// A Transport in an http.Client retries 429 and 503 answers, waiting as the
// server's Retry-After says (here 0 seconds, to keep the example quick),
// capped, and with a backoff of its own when the server gives no usable wait.
func ExampleTransport() {
	tries := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tries++
		if tries < 3 {
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		fmt.Fprintln(w, "done")
	}))
	defer srv.Close()

	client := &http.Client{Transport: &retryafter.Transport{
		// A Retry-After of 0 says "now", which is how retry storms start: it gets the
		// client's own backoff instead, here 1 ms doubling per try (Rand fixed at its
		// top so that the output is stable).
		Backoff:     &retryafter.Backoff{Base: time.Millisecond, Rand: func() float64 { return 1 }},
		MaxAttempts: 5,
		OnRetry: func(resp *http.Response, attempt int, wait time.Duration) {
			fmt.Printf("try %d: %d, Retry-After %q, waiting %v\n", attempt, resp.StatusCode, resp.Header.Get("Retry-After"), wait)
		},
	}}
	resp, err := client.Get(srv.URL)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Printf("try %d: %d %s", tries, resp.StatusCode, body)
	// Output:
	// try 1: 429, Retry-After "0", waiting 1ms
	// try 2: 429, Retry-After "0", waiting 2ms
	// try 3: 200 done
}
