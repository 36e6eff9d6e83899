package overload_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"time"

	"github.com/retryafter/retryafter"
	"github.com/retryafter/retryafter/overload"
)

// ExampleConcurrency lets one request run at a time, and refuses the one that arrives while
// it runs with 503, a Retry-After from what the limit measured and a Date from the same clock
// reading.
//
// How the spread Retry-After does against a herd, from the deterministic simulation in
// overload_sim_test.go (go test -run Simulation -v): 1,000 clients arrive within one second at
// a service of 10 slots of 100 ms (100 requests a second) behind a Concurrency with a queue of
// 100, and retry until served, each as its strategy says; "no Retry-After" clients back off
// exponentially with full jitter, a uniform wait below min(32 s, 1 s × 2^(n-1)) after the nth
// refusal.
//
//	| clients wait                        | first retries admitted | peak return rate | all served after | requests |
//	|-------------------------------------|-----------------------:|-----------------:|-----------------:|---------:|
//	| Retry-After as sent                 |                 100.0% |            1.00× |           10.9 s |     1800 |
//	| fixed Retry-After: 1                |                  12.5% |            8.00× |           10.0 s |     4600 |
//	| no Retry-After: full-jitter backoff |                  10.2% |            8.05× |           35.8 s |     3560 |
//
// The same service behind a one-minute [retryafter.Maintenance], 1,000 clients arriving over
// the minute:
//
//	| clients wait                                | first retries admitted | peak return rate | all served after | requests |
//	|---------------------------------------------|-----------------------:|-----------------:|-----------------:|---------:|
//	| Retry-After as sent, ReturnRate 100         |                 100.0% |            1.00× |           70.1 s |     2000 |
//	| Retry-After as sent, no ReturnRate          |                  20.0% |           10.00× |           70.9 s |     2800 |
//	| fixed Retry-After: 1                        |                   0.2% |           10.00× |           70.0 s |    35120 |
//	| no Retry-After: full-jitter backoff         |                   1.0% |            1.27× |           91.2 s |     7325 |
func ExampleConcurrency() {
	clock := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	c := &overload.Concurrency{
		Max: 1,
		Now: func() time.Time { return clock },
		OnShed: func(r *http.Request, s overload.Shed) {
			fmt.Println("shed:", s.Reason, "running", s.Running, "retry after", s.RetryAfter)
		},
	}
	var h http.Handler
	h = c.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			// While this request holds the only slot, another arrives.
			w2 := httptest.NewRecorder()
			h.ServeHTTP(w2, httptest.NewRequest("GET", "/", nil))
			fmt.Println(w2.Code, "Retry-After:", w2.Header().Get("Retry-After"), "Date:", w2.Header().Get("Date"))
		}
		fmt.Fprint(w, "ok")
	}))
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", "/slow", nil))
	fmt.Println(w.Code, w.Body)
	// Output:
	// shed: full running 1 retry after 1s
	// 503 Retry-After: 1 Date: Sun, 29 Nov 2026 12:00:00 GMT
	// 200 ok
}

// ExampleSpread gives a limit for the whole service, 2 requests a second, beside each
// client's own: the clients it refuses at the same instant are told different seconds, two a
// second, rather than all the same one.
func ExampleSpread() {
	clock := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	service := retryafter.NewTokenBucket(2, 2)
	h := retryafter.LimitWith(
		retryafter.All(
			retryafter.NewTokenBucket(10, 10), // each client's
			retryafter.Spread(retryafter.Shared(service, "all"), 2, 2),
		),
		retryafter.WithClock(func() time.Time { return clock }),
	)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))

	for i := range 6 {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = "192.0.2." + strconv.Itoa(i+1) + ":1234"
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if ra := w.Header().Get("Retry-After"); ra != "" {
			fmt.Println(w.Code, ra)
		} else {
			fmt.Println(w.Code)
		}
	}
	// Output:
	// 200
	// 200
	// 429 1
	// 429 1
	// 429 2
	// 429 2
}

// ExampleMaintenance_returnRate announces the end of a maintenance in 10 seconds, to a service
// that can take 2 of the clients back each second: those refused are told the end and the
// seconds after it, two each.
func ExampleMaintenance_returnRate() {
	clock := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	m := &retryafter.Maintenance{ReturnRate: 2, Now: func() time.Time { return clock }}
	h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	m.Start(clock.Add(10 * time.Second))
	for range 5 {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
		fmt.Println(w.Code, w.Header().Get("Retry-After"))
	}
	// Output:
	// 503 10
	// 503 10
	// 503 11
	// 503 11
	// 503 12
}
