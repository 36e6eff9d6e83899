package retryafter_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"golang.org/x/time/rate"

	"github.com/retryafter/retryafter"
)

// Plans by API key: a client with a known key (X-API-Key) is counted by its key, on that key's
// plan; anyone else by its address, on the free plan, so that inventing keys buys nothing. The
// policy function is asked on every request, so a key's plan may change while the server runs.
func ExampleWithPolicyFunc() {
	clock := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	now := func() time.Time { return clock }

	plans := map[string]retryafter.Policy{ // a real service reads them from its accounts
		"k-pro": {Name: "pro", Limit: 10, Burst: 4},
	}
	free := retryafter.Policy{Name: "free", Limit: rate.Every(5 * time.Second), Burst: 2}
	clientIP := retryafter.ClientIP()
	key := func(r *http.Request) (string, error) {
		if k := r.Header.Get("X-API-Key"); k != "" {
			if _, ok := plans[k]; ok {
				return "key:" + k, nil
			}
		}
		return clientIP(r)
	}
	planOf := func(key string) retryafter.Policy {
		if k, ok := strings.CutPrefix(key, "key:"); ok {
			return plans[k]
		}
		return free
	}

	limiter := retryafter.NewTokenBucket(free.Limit, free.Burst, retryafter.WithPolicyFunc(planOf))
	h := retryafter.LimitWith(limiter, retryafter.WithKeyFunc(key), retryafter.WithClock(now),
		retryafter.WithRateLimitFields(""))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))

	for _, apiKey := range []string{"", "k-made-up", "k-pro"} {
		fmt.Printf("%q:", apiKey)
		for range 5 {
			r := httptest.NewRequest("GET", "/", nil)
			if apiKey != "" {
				r.Header.Set("X-API-Key", apiKey)
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			fmt.Print(" ", w.Code)
			if ra := w.Header().Get("Retry-After"); ra != "" {
				fmt.Print(" (Retry-After: ", ra, ")")
			}
		}
		fmt.Println()
	}

	// The pro key's plan as the fields tell it.
	r := httptest.NewRequest("GET", "/", nil)
	r.Header.Set("X-API-Key", "k-pro")
	clock = clock.Add(time.Second)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	fmt.Println(w.Code, w.Header().Get("RateLimit-Policy"))
	// Output:
	// "": 200 200 429 (Retry-After: 5) 429 (Retry-After: 5) 429 (Retry-After: 5)
	// "k-made-up": 429 (Retry-After: 5) 429 (Retry-After: 5) 429 (Retry-After: 5) 429 (Retry-After: 5) 429 (Retry-After: 5)
	// "k-pro": 200 200 200 200 429 (Retry-After: 1)
	// 200 "pro";q=4;w=1
}
