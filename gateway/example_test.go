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
// Retry-After date measured on that clock, and 429 with Retry-After: 0. The client gets
// delay-seconds and the gateway's Date, which depend on nobody's clock.
func ExampleNormalizer() {
	gatewayClock := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	upstreamClock := gatewayClock.Add(time.Hour)

	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/zero" {
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		w.Header().Set("Date", upstreamClock.Format(http.TimeFormat))
		w.Header().Set("Retry-After", upstreamClock.Add(90*time.Second).Format(http.TimeFormat))
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer upstream.Close()
	target, _ := url.Parse(upstream.URL)

	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.ModifyResponse = (&gateway.Normalizer{
		Now: func() time.Time { return gatewayClock },
		OnRepair: func(r gateway.Repair) {
			fmt.Printf("repaired %s from %d %s: Retry-After %q became %v\n",
				r.Kind, r.Status, r.Request.URL.Path, r.UpstreamRetryAfter, r.ClientRetryAfter)
		},
	}).ModifyResponse
	gw := httptest.NewServer(proxy)
	defer gw.Close()

	for _, path := range []string{"/maintenance", "/zero"} {
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
	// 503 Service Unavailable Retry-After: 90 Date: Sun, 29 Nov 2026 12:00:00 GMT
	// repaired invalid from 429 /zero: Retry-After ["0"] became 5s
	// 429 Too Many Requests Retry-After: 5 Date: Sun, 29 Nov 2026 12:00:00 GMT
}

// ModifyResponse works on any *http.Response, so it can be called directly, here on a 429
// whose Retry-After is 0: the client is sent the fallback instead of being told to retry at once.
func ExampleNormalizer_ModifyResponse() {
	n := &gateway.Normalizer{
		Now:      func() time.Time { return time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC) },
		Fallback: 2 * time.Second,
	}
	resp := &http.Response{StatusCode: http.StatusTooManyRequests, Header: http.Header{}}
	resp.Header.Set("Retry-After", "0")
	n.ModifyResponse(resp)
	fmt.Println(resp.Header.Get("Retry-After"), resp.Header.Get("Date"))
	// Output:
	// 2 Sun, 29 Nov 2026 12:00:00 GMT
}
