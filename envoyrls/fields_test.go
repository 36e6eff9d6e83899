package envoyrls

import (
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// TestHeaders: the RateLimit fields and the X-RateLimit headers of the binding rule when asked,
// on admission and refusal; only Retry-After, on a refusal, when not.
func TestHeaders(t *testing.T) {
	c := &clock{now: t0}
	_, plain := newService(t, shapes, c)
	_, asked := newService(t, shapes, c, WithRateLimitFields(true), WithXRateLimitHeaders(true))
	req := request("shapes", 0, descriptor("minute", "c"), descriptor("hour", "c"))
	// Admitted, the hour binds: 4 of 5 left, the next in 12 minutes.
	admitted := map[string]string{"X-RateLimit-Limit": "5", "X-RateLimit-Remaining": "4", "X-RateLimit-Reset": "720",
		"RateLimit-Policy": `"shapes.hour";q=5;w=3600`, "RateLimit": `"shapes.hour";r=4;t=720`}
	resp := ask(t, asked, req)
	for name, v := range admitted {
		if got, n := headerValue(resp, name); n != 1 || got != v {
			t.Errorf("admitted: %s: %q (%d), want %q", name, got, n, v)
		}
	}
	if len(ask(t, plain, req).GetResponseHeadersToAdd()) != 0 {
		t.Error("headers on an admission, none asked for")
	}
	for range 4 {
		ask(t, asked, req)
		ask(t, plain, req)
	}
	refused := map[string]string{"Retry-After": "720", "X-RateLimit-Limit": "5", "X-RateLimit-Remaining": "0",
		"X-RateLimit-Reset": "720", "RateLimit": `"shapes.hour";r=0;t=720`}
	for i, tc := range []struct {
		cl   rlsv3.RateLimitServiceClient
		want map[string]string
		n    int
	}{
		{asked, refused, 6},
		{plain, map[string]string{"Retry-After": "720"}, 1},
	} {
		resp := ask(t, tc.cl, req)
		if len(resp.GetResponseHeadersToAdd()) != tc.n {
			t.Errorf("%d: %d headers, want %d: %v", i, len(resp.GetResponseHeadersToAdd()), tc.n, resp.GetResponseHeadersToAdd())
		}
		for name, v := range tc.want {
			if got, n := headerValue(resp, name); n != 1 || got != v {
				t.Errorf("%d: %s: %q (%d), want %q", i, name, got, n, v)
			}
		}
	}
}
