package retryclient_test

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/retryafter/retryafter"
	"github.com/retryafter/retryafter/retryclient"
)

// The strict reader, retryafter.ParseRetryAfter, reads both forms of Retry-After. A date is
// measured from the response's own Date, so the client's clock (here a day off) plays no part,
// and all three HTTP-date formats are read. A Backoff reads the same values, and more: see
// ExampleBackoff_Wait.
func Example_allForms() {
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

// A Transport in an http.Client retries 429 and 503 answers, waiting as the server's
// Retry-After says, capped, and with a backoff of its own when the server gives no usable wait:
// here a Retry-After that means nothing, then none at all, to keep the example quick.
func ExampleTransport() {
	tries := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tries++
		switch tries {
		case 1:
			w.Header().Set("Retry-After", "soon")
			w.WriteHeader(http.StatusTooManyRequests)
		case 2:
			w.WriteHeader(http.StatusServiceUnavailable)
		default:
			fmt.Fprintln(w, "done")
		}
	}))
	defer srv.Close()

	client := &http.Client{Transport: &retryclient.Transport{
		// The client's own backoff: 1 ms doubling per try (Rand fixed at its top so that
		// the output is stable).
		Backoff:     &retryclient.Backoff{Base: time.Millisecond, Rand: func() float64 { return 1 }},
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
	// try 1: 429, Retry-After "soon", waiting 1ms
	// try 2: 503, Retry-After "", waiting 2ms
	// try 3: 200 done
}

// What a client waits for each kind of answer: the server's wait when it gave a usable one,
// measured against the response's Date, capped; otherwise a backoff of its own, never 0. What
// real servers send is read the way they meant it: a date in UTC (Go's time.RFC1123), "1.5", a
// 0 that stands for less than a second. A date is read to the end of the second it names,
// since most servers cut it to the second (Backoff.ExactDates turns that off). Rand is fixed at
// its top so that the fallback is the ceiling of its range: 500 ms doubling per try.
func ExampleBackoff_Wait() {
	b := &retryclient.Backoff{
		Rand: func() float64 { return 1 },
		Now:  func() time.Time { return time.Date(2026, 11, 29, 13, 0, 0, 0, time.UTC) }, // an hour fast
	}
	date := "Sun, 29 Nov 2026 12:00:00 GMT"
	for _, tc := range []struct {
		status  int
		retry   string
		attempt int
	}{
		{429, "120", 1},
		{503, "Sun, 29 Nov 2026 12:01:30 GMT", 1}, // measured against Date, not the local clock
		{429, "Sun, 29 Nov 2026 12:00:10 UTC", 1}, // time.RFC1123, as sethvargo/go-limiter sends
		{429, "0", 1},                             // a wait under a second, truncated: one second
		{429, "1.5", 1},                           // rounded up
		{429, "86400", 1},                         // a day: capped at 5 minutes
		{429, "9223372037", 1},                    // beyond a Duration: saturated, then capped
		{429, "Sun, 29 Nov 2026 11:59:00 GMT", 1}, // before Date: unusable
		{429, "-1", 2},                            // negative: the second try's backoff
		{429, "soon", 3},                          // garbage: the third try's backoff
		{503, "", 2},                              // none: the second try's backoff
		{500, "120", 1},                           // honoured on 429 and 503 only
	} {
		resp := &http.Response{StatusCode: tc.status, Header: http.Header{"Date": {date}}}
		if tc.retry != "" {
			resp.Header.Set("Retry-After", tc.retry)
		}
		fmt.Printf("%d %-32q try %d: wait %v\n", tc.status, tc.retry, tc.attempt, b.Wait(resp, tc.attempt))
	}
	// Output:
	// 429 "120"                            try 1: wait 2m0s
	// 503 "Sun, 29 Nov 2026 12:01:30 GMT"  try 1: wait 1m31s
	// 429 "Sun, 29 Nov 2026 12:00:10 UTC"  try 1: wait 11s
	// 429 "0"                              try 1: wait 1s
	// 429 "1.5"                            try 1: wait 2s
	// 429 "86400"                          try 1: wait 5m0s
	// 429 "9223372037"                     try 1: wait 5m0s
	// 429 "Sun, 29 Nov 2026 11:59:00 GMT"  try 1: wait 500ms
	// 429 "-1"                             try 2: wait 1s
	// 429 "soon"                           try 3: wait 2s
	// 503 ""                               try 2: wait 1s
	// 500 "120"                            try 1: wait 500ms
}

// A server that asks for a wait above Cap is not retried early, into a refusal it announced:
// the Transport hands its response back after that one try, and Delay says why. The reset
// fields that some servers send instead of Retry-After are read too.
func ExampleBackoff_Delay() {
	b := &retryclient.Backoff{Cap: time.Minute}
	for _, h := range []http.Header{
		{"Retry-After": {"30"}},
		{"Retry-After": {"3600"}},
		{"Retry-After-Ms": {"1500"}},
		{"Ratelimit": {`"day";r=0;t=86400`}},
		{"X-Ratelimit-Reset": {"1795953610"}, "Date": {"Sun, 29 Nov 2026 12:00:00 GMT"}}, // a Unix time, 10 s after Date
	} {
		d, err := b.Delay(&http.Response{StatusCode: http.StatusTooManyRequests, Header: h}, 1)
		fmt.Printf("%v: %v", h, d)
		var tooLong *retryclient.WaitTooLongError
		if errors.As(err, &tooLong) {
			fmt.Printf(", above the cap of %v: returned at once", tooLong.Cap)
		}
		fmt.Println()
	}
	// Output:
	// map[Retry-After:[30]]: 30s
	// map[Retry-After:[3600]]: 1h0m0s, above the cap of 1m0s: returned at once
	// map[Retry-After-Ms:[1500]]: 1.5s
	// map[Ratelimit:["day";r=0;t=86400]]: 24h0m0s, above the cap of 1m0s: returned at once
	// map[Date:[Sun, 29 Nov 2026 12:00:00 GMT] X-Ratelimit-Reset:[1795953610]]: 11s
}

// Without Retry-After, the resets that the APIs most programs call send give the wait: OpenAI's
// Go durations, Anthropic's RFC 3339 instants measured against Date (the local clock is an hour
// fast), and GitHub's epoch reset on the 403 of its primary limit. Of several limits, the spent
// one's reset decides; a wait above Cap (5 minutes by default) is the caller's to know. A 403
// that is not a rate limit gets the client's own backoff.
func ExampleBackoff_apiResets() {
	b := &retryclient.Backoff{
		Rand: func() float64 { return 1 },
		Now:  func() time.Time { return time.Date(2026, 11, 29, 13, 0, 0, 0, time.UTC) },
	}
	date := "Sun, 29 Nov 2026 12:00:00 GMT"
	for _, tc := range []struct {
		name   string
		status int
		kv     []string
	}{
		{"OpenAI", 429, []string{"X-Ratelimit-Reset-Requests", "6m0s"}},
		{"OpenAI, tokens spent", 429, []string{"X-Ratelimit-Remaining-Requests", "59", "X-Ratelimit-Reset-Requests", "1s",
			"X-Ratelimit-Remaining-Tokens", "0", "X-Ratelimit-Reset-Tokens", "20ms"}},
		{"Anthropic", 429, []string{"Anthropic-Ratelimit-Tokens-Remaining", "0", "Anthropic-Ratelimit-Tokens-Reset", "2026-11-29T12:02:51Z"}},
		{"GitHub", 403, []string{"X-Ratelimit-Remaining", "0", "X-Ratelimit-Reset", "1795953840"}},
		{"GitHub, secondary", 403, []string{"Retry-After", "60", "X-Ratelimit-Remaining", "4990"}},
		{"Forbidden", 403, []string{"Retry-After", "60"}},
	} {
		resp := &http.Response{StatusCode: tc.status, Header: http.Header{"Date": {date}}}
		for i := 0; i+1 < len(tc.kv); i += 2 {
			resp.Header.Set(tc.kv[i], tc.kv[i+1])
		}
		d, err := b.Delay(resp, 1)
		if err != nil {
			fmt.Printf("%-20s %d: %v\n", tc.name, tc.status, err)
			continue
		}
		fmt.Printf("%-20s %d: wait %v\n", tc.name, tc.status, d)
	}
	// Output:
	// OpenAI               429: retryclient: X-Ratelimit-Reset-Requests asks for a wait of 6m0s, above the cap of 5m0s
	// OpenAI, tokens spent 429: wait 20ms
	// Anthropic            429: wait 2m52s
	// GitHub               403: wait 4m1s
	// GitHub, secondary    403: wait 1m0s
	// Forbidden            403: wait 500ms
}
