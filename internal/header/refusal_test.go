package header

import (
	"net/http"
	"strings"
	"testing"
)

// TestIsRefusal checks which responses are refusals: 429 and 503 always, GitHub's rate-limited
// 403 too, and no other 403.
func TestIsRefusal(t *testing.T) {
	for _, tt := range []struct {
		status int
		h      http.Header
		want   bool
	}{
		{429, nil, true},
		{503, nil, true},
		{403, http.Header{"X-Ratelimit-Remaining": {"0"}, "X-Ratelimit-Reset": {"1377013266"}}, true},
		{403, http.Header{"X-Ratelimit-Remaining": {"4990"}, "Retry-After": {"60"}}, true},
		{403, nil, false},
		{403, http.Header{"X-Ratelimit-Remaining": {"4990"}, "X-Ratelimit-Reset": {"1377013266"}}, false},
		{403, http.Header{"Retry-After": {"60"}}, false},
		{403, http.Header{"X-Ratelimit-Remaining": {"0", "1"}}, false},
		{403, http.Header{"X-Ratelimit-Remaining": {"none"}}, false},
		{401, http.Header{"X-Ratelimit-Remaining": {"0"}}, false},
		{200, http.Header{"X-Ratelimit-Remaining": {"0"}}, false},
	} {
		if got := IsRefusal(tt.status, tt.h); got != tt.want {
			t.Errorf("IsRefusal(%d, %v) = %v; want %v", tt.status, tt.h, got, tt.want)
		}
	}
}

// FuzzIsRefusal checks, for any status and values of X-RateLimit-Remaining and Retry-After: no
// panic; 429 and 503 always refusals; no status but 403, 429 and 503 ever one; and a 403 one
// only with an X-RateLimit-Remaining of a single value.
func FuzzIsRefusal(f *testing.F) {
	f.Add(403, "0", "")
	f.Add(403, "4990", "60")
	f.Add(403, "", "60")
	f.Add(429, "", "")
	f.Fuzz(func(t *testing.T, status int, remaining, retryAfter string) {
		h := http.Header{}
		if remaining != "" {
			h[XRateLimitRemaining] = strings.Split(remaining, "\n")
		}
		if retryAfter != "" {
			h[RetryAfter] = []string{retryAfter}
		}
		got := IsRefusal(status, h)
		switch status {
		case 429, 503:
			if !got {
				t.Fatalf("IsRefusal(%d, %v) = false", status, h)
			}
		case 403:
			if _, ok := singleFieldValue(h[XRateLimitRemaining]); got && !ok {
				t.Fatalf("IsRefusal(%d, %v) = true without a single X-RateLimit-Remaining", status, h)
			}
		default:
			if got {
				t.Fatalf("IsRefusal(%d, %v) = true", status, h)
			}
		}
	})
}
