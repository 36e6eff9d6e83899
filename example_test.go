package retryafter_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/go-chi/chi/v5"
	"golang.org/x/time/rate"

	"github.com/retryafter/retryafter"
)

func ExampleLimit() {
	clock := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	now := func() time.Time { return clock }

	r := chi.NewRouter()
	r.Use(retryafter.Limit(rate.Every(2*time.Second), 1, retryafter.WithClock(now)))
	r.Get("/", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "hello") })

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
