package retryafter_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/retryafter/retryafter"
)

// Maintenance for the next 15 minutes, with the health check left open.
func ExampleMaintenance() {
	clock := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	now := func() time.Time { return clock }

	m := &retryafter.Maintenance{
		Now:    now,
		Exempt: func(r *http.Request) bool { return r.URL.Path == "/healthz" },
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "hello") })
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "healthy") })
	r := m.Handler(mux) // before any rate limiter, so that a 503 costs no quota

	get := func(path string) {
		w := httptest.NewRecorder()
		r.ServeHTTP(w, httptest.NewRequest("GET", path, nil))
		printResponse(w)
	}

	m.Start(now().Add(15 * time.Minute))
	get("/")
	get("/healthz")
	clock = clock.Add(10*time.Minute + 500*time.Millisecond)
	get("/")
	// The work runs late: Retry-After is how late it is so far, from one second up to Wait
	// (60 s by default), so that a short overrun costs returning clients a short wait.
	clock = clock.Add(5*time.Minute + 2*time.Second)
	get("/")
	clock = clock.Add(5 * time.Minute)
	get("/")
	m.Stop()
	get("/")
	// Output:
	// 503 Retry-After: 900 Date: Sun, 29 Nov 2026 12:00:00 GMT
	// 200 healthy
	// 503 Retry-After: 300 Date: Sun, 29 Nov 2026 12:10:00 GMT
	// 503 Retry-After: 3 Date: Sun, 29 Nov 2026 12:15:02 GMT
	// 503 Retry-After: 60 Date: Sun, 29 Nov 2026 12:20:02 GMT
	// 200 hello
}

// Maintenance until 14:00 UTC, announced as an HTTP-date.
func ExampleMaintenance_httpDate() {
	clock := time.Date(2026, 11, 29, 12, 0, 0, 500_000_000, time.UTC)
	now := func() time.Time { return clock }

	m := &retryafter.Maintenance{Now: now, HTTPDate: true}
	m.Start(time.Date(2026, 11, 29, 14, 0, 0, 0, time.UTC))

	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "hello") })
	h := m.Handler(mux)

	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
	printResponse(w)
	// A client measures the date against Date, so its own clock plays no part.
	wait, ok := retryafter.ParseRetryAfter(w.Header(), time.Now())
	fmt.Println(wait, ok)
	// Output:
	// 503 Retry-After: Sun, 29 Nov 2026 14:00:00 GMT Date: Sun, 29 Nov 2026 12:00:00 GMT
	// 2h0m0s true
}
