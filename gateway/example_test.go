package gateway_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"time"

	"github.com/retryafter/retryafter/gateway"
)

// A gateway in front of an upstream whose clock is an hour fast, and which answers 503 with a
// Retry-After date measured on that clock, 429 with Retry-After: 0 (a wait under a second,
// truncated) and 429 with a date in time.RFC1123's UTC zone, as sethvargo/go-limiter does. The
// client gets delay-seconds and the gateway's Date, which depend on nobody's clock. A date is
// read to the end of the second it names, since upstreams cut it to the second; what did not
// conform is reported with what the gateway understood.
func ExampleNormalizer() {
	gatewayClock := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	upstreamClock := gatewayClock.Add(time.Hour)

	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Date", upstreamClock.Format(http.TimeFormat))
		switch r.URL.Path {
		case "/zero":
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(http.StatusTooManyRequests)
		case "/utc":
			w.Header().Set("Retry-After", upstreamClock.Add(10*time.Second).Format(time.RFC1123))
			w.WriteHeader(http.StatusTooManyRequests)
		default:
			w.Header().Set("Retry-After", upstreamClock.Add(90*time.Second).Format(http.TimeFormat))
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer upstream.Close()
	target, _ := url.Parse(upstream.URL)

	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.ModifyResponse = (&gateway.Normalizer{
		Now: func() time.Time { return gatewayClock },
		OnRepair: func(r gateway.Repair) {
			fmt.Printf("%s (%s) from %d %s: Retry-After %q read as %v, sent as %v\n",
				r.Kind, r.Leniency, r.Status, r.Request.URL.Path, r.UpstreamRetryAfter, r.Understood, r.ClientRetryAfter)
		},
	}).ModifyResponse
	gw := httptest.NewServer(proxy)
	defer gw.Close()

	for _, path := range []string{"/maintenance", "/zero", "/utc"} {
		resp, err := http.Get(gw.URL + path)
		if err != nil {
			fmt.Println(err)
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		fmt.Println(resp.Status, "Retry-After:", resp.Header.Get("Retry-After"), "Date:", resp.Header.Get("Date"))
	}
	// Output:
	// 503 Service Unavailable Retry-After: 91 Date: Sun, 29 Nov 2026 12:00:00 GMT
	// understood (zero) from 429 /zero: Retry-After ["0"] read as 1s, sent as 1s
	// 429 Too Many Requests Retry-After: 1 Date: Sun, 29 Nov 2026 12:00:00 GMT
	// understood (zone) from 429 /utc: Retry-After ["Sun, 29 Nov 2026 13:00:10 UTC"] read as 11s, sent as 11s
	// 429 Too Many Requests Retry-After: 11 Date: Sun, 29 Nov 2026 12:00:00 GMT
}

// ModifyResponse works on any *http.Response, so it can be called directly, here on 429s. A
// Retry-After of 0 is what a limiter that truncates sends for a wait under a second: the client
// gets 1, the smallest honest wait, rather than retrying at once; "1.5" is rounded up; a value
// that means nothing gets the Fallback.
func ExampleNormalizer_ModifyResponse() {
	n := &gateway.Normalizer{
		Now:      func() time.Time { return time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC) },
		Fallback: 3 * time.Second,
	}
	for _, v := range []string{"0", "1.5", "soon"} {
		resp := &http.Response{StatusCode: http.StatusTooManyRequests, Header: http.Header{}}
		resp.Header.Set("Retry-After", v)
		n.ModifyResponse(resp)
		fmt.Printf("%-6q %s %s\n", v, resp.Header.Get("Retry-After"), resp.Header.Get("Date"))
	}
	// Output:
	// "0"    1 Sun, 29 Nov 2026 12:00:00 GMT
	// "1.5"  2 Sun, 29 Nov 2026 12:00:00 GMT
	// "soon" 3 Sun, 29 Nov 2026 12:00:00 GMT
}

// An upstream that says no Retry-After but when its limit resets in another field: ulule/limiter,
// GitHub and Tyk send X-RateLimit-Reset as a Unix time (here 10 s after the upstream's Date, read
// to the end of that second), Azure and OpenAI retry-after-ms, the rate-limit drafts RateLimit's
// t. The client gets the wait as Retry-After, and the repair names the field.
func ExampleNormalizer_resetFields() {
	n := &gateway.Normalizer{
		Now: func() time.Time { return time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC) },
		OnRepair: func(r gateway.Repair) {
			fmt.Printf("%s from %s: %v, sent as %v\n", r.Kind, r.Field, r.Understood, r.ClientRetryAfter)
		},
	}
	for _, h := range []http.Header{
		{"X-Ratelimit-Reset": {"1795953610"}, "Date": {"Sun, 29 Nov 2026 12:00:00 GMT"}},
		{"Retry-After-Ms": {"1500"}},
		{"Ratelimit": {`"default";r=0;t=30`}},
	} {
		n.ModifyResponse(&http.Response{StatusCode: http.StatusTooManyRequests, Header: h})
		fmt.Println("Retry-After:", h.Get("Retry-After"))
	}
	// Output:
	// derived from X-Ratelimit-Reset: 11s, sent as 11s
	// Retry-After: 11
	// derived from Retry-After-Ms: 1.5s, sent as 2s
	// Retry-After: 2
	// derived from Ratelimit: 30s, sent as 30s
	// Retry-After: 30
}
