package retryafter_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"golang.org/x/time/rate"

	"github.com/retryafter/retryafter"
)

func ExampleLimit() {
	clock := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	now := func() time.Time { return clock }

	mux := http.NewServeMux()
	mux.HandleFunc("GET /", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "hello") })
	r := retryafter.Limit(rate.Every(2*time.Second), 1, retryafter.WithClock(now))(mux) // with chi: r.Use(...)

	for _, wait := range []time.Duration{0, 500 * time.Millisecond, 1500 * time.Millisecond} {
		clock = clock.Add(wait)
		w := httptest.NewRecorder()
		r.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
		printResponse(w)
	}
	// Output:
	// 200 hello
	// 429 Retry-After: 2 Date: Sun, 29 Nov 2026 12:00:00 GMT
	// 200 hello
}

func printResponse(w *httptest.ResponseRecorder) {
	if w.Code == http.StatusOK {
		fmt.Println(w.Code, w.Body.String())
		return
	}
	fmt.Println(w.Code, "Retry-After:", w.Header().Get("Retry-After"), "Date:", w.Header().Get("Date"))
}

func ExampleLimit_serveMux() {
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "hello") })
	h := retryafter.Limit(rate.Every(time.Second), 1)(mux)

	for range 2 {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
		fmt.Println(w.Code, w.Header().Values("Retry-After"))
	}
	// Output:
	// 200 []
	// 429 [1]
}

func ExampleParseRetryAfter() {
	h := http.Header{}
	h.Set("Date", "Sun, 29 Nov 2026 12:00:00 GMT")
	h.Set("Retry-After", "Sun, 29 Nov 2026 12:01:30 GMT")
	// The date is measured against the response's own Date, so the local clock plays no part.
	wait, ok := retryafter.ParseRetryAfter(h, time.Now())
	fmt.Println(wait, ok)
	// Output:
	// 1m30s true
}

// The RateLimit fields of draft-ietf-httpapi-ratelimit-headers on every response the limiter
// decides: a bucket of 10 refilling one token every 200 ms, from which a client spends 10 at once.
func ExampleWithRateLimitFields() {
	clock := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	h := retryafter.Limit(rate.Every(200*time.Millisecond), 10,
		retryafter.WithClock(func() time.Time { return clock }),
		retryafter.WithRateLimitFields(""),
	)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "hello") }))

	for i := range 11 {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
		if i == 2 || i >= 9 {
			fmt.Println(w.Code, "RateLimit-Policy:", w.Header().Get("RateLimit-Policy"),
				"RateLimit:", w.Header().Get("RateLimit"), w.Header().Values("Retry-After"))
		}
	}
	// Output:
	// 200 RateLimit-Policy: "default";q=10;w=2 RateLimit: "default";r=7;t=1 []
	// 200 RateLimit-Policy: "default";q=10;w=2 RateLimit: "default";r=0;t=1 []
	// 429 RateLimit-Policy: "default";q=10;w=2 RateLimit: "default";r=0;t=1 [1]
}

// RFC 9457 problem details for the clients that ask for them, plain text for the others.
func ExampleWithProblemDetails() {
	clock := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	h := retryafter.Limit(rate.Every(8*time.Second), 1,
		retryafter.WithClock(func() time.Time { return clock }),
		retryafter.WithProblemDetails(retryafter.ProblemDetails{}),
	)(http.NotFoundHandler())

	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil)) // spends the burst
	for _, accept := range []string{"application/problem+json", "text/html, */*;q=0.8"} {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("Accept", accept)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Print(w.Code, " ", w.Header().Get("Content-Type"), " Retry-After: ", w.Header().Get("Retry-After"), "\n", w.Body)
	}
	// Output:
	// 429 application/problem+json Retry-After: 8
	// {"type":"about:blank","title":"Too Many Requests","status":429,"detail":"Too many requests from this client; retry in 8 seconds.","retry-after":8,"violated-policies":["default"]}
	// 429 text/plain; charset=utf-8 Retry-After: 8
	// Too Many Requests
}

// A status endpoint that reports a client's quota without spending any: a cost of 0 is a peek.
// Peek puts the same quota in the RateLimit fields of a route that is not limited.
func ExampleLimiter_status() {
	clock := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	now := func() time.Time { return clock }
	perClient := retryafter.NewTokenBucket(rate.Every(time.Second), 5)

	mux := http.NewServeMux()
	mux.Handle("GET /work", retryafter.LimitWith(perClient, retryafter.WithClock(now))(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "done") })))
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, r *http.Request) {
		key, _ := retryafter.ClientIP()(r)
		d, _ := perClient.Decide(r.Context(), key, 0, now())
		fmt.Fprintf(w, "limit %d, remaining %d, full again in %v", d.Limit, d.Remaining, d.Reset)
	})
	mux.Handle("GET /read", retryafter.LimitWith(retryafter.Peek(perClient), retryafter.WithClock(now),
		retryafter.WithRateLimitFields(""))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})))

	for _, path := range []string{"/work", "/work", "/status", "/status", "/read"} {
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, httptest.NewRequest("GET", path, nil))
		fmt.Println(path, w.Code, w.Body.String(), w.Header().Values("RateLimit"))
	}
	// Output:
	// /work 200 done []
	// /work 200 done []
	// /status 200 limit 5, remaining 3, full again in 2s []
	// /status 200 limit 5, remaining 3, full again in 2s []
	// /read 200  ["default";r=3;t=1]
}
