package retryafter_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/retryafter/retryafter"
	"github.com/retryafter/retryafter/edge"
)

// ExampleWithWait serves requests a little early at their place, as nginx's limit_req delays
// them: at 100 per second with bursts of 1, the second and third requests of an instant wait
// 10 and 20 ms and are served; the fourth, whose place is 30 ms away, beyond the 25 ms it may
// wait, is refused at once.
func ExampleWithWait() {
	clock := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC) // stands still: every request is of one instant
	h := retryafter.Limit(100, 1,
		retryafter.WithWait(25*time.Millisecond),
		retryafter.WithClock(func() time.Time { return clock }),
		retryafter.WithDecisionHook(func(_ *http.Request, o retryafter.Outcome, d retryafter.Decision) {
			if o == edge.Waited {
				fmt.Printf("waited %v, ", d.RetryAfter.Round(time.Millisecond))
			}
		}),
	)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))

	for range 4 {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
		if ra := w.Header().Get("Retry-After"); ra != "" {
			fmt.Println(w.Code, "Retry-After:", ra)
		} else {
			fmt.Println(w.Code)
		}
	}
	// Output:
	// 200
	// waited 10ms, 200
	// waited 20ms, 200
	// 429 Retry-After: 1
}
