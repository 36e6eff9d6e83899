package httpratestore_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/retryafter/retryafter"
	"github.com/retryafter/retryafter/httpratestore"
)

// httprate's sliding window of 3 requests per 10 seconds. The fourth request, a second in, is
// told 11, not httprate's 10: the three requests of this window still weigh on the next one,
// and a client that came back after 10 s would be refused again.
func ExampleNew() {
	clock := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	now := func() time.Time { return clock }

	limiter := httpratestore.New(3, 10*time.Second, nil) // httprate's in-memory counter
	h := retryafter.LimitWith(limiter, retryafter.WithClock(now))(http.HandlerFunc(
		func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "hello") }))

	for _, wait := range []time.Duration{0, 0, 0, time.Second, 10 * time.Second, time.Second} {
		clock = clock.Add(wait)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
		if w.Code == http.StatusOK {
			fmt.Println(w.Code, w.Body.String())
		} else {
			fmt.Println(w.Code, "Retry-After:", w.Header().Get("Retry-After"), "Date:", w.Header().Get("Date"))
		}
	}
	// Output:
	// 200 hello
	// 200 hello
	// 200 hello
	// 429 Retry-After: 11 Date: Sun, 29 Nov 2026 12:00:01 GMT
	// 429 Retry-After: 1 Date: Sun, 29 Nov 2026 12:00:11 GMT
	// 200 hello
}
