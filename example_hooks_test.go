package retryafter_test

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"time"

	"golang.org/x/time/rate"

	"github.com/retryafter/retryafter"
)

// ExampleWithLimitedHook logs every refusal and every limiter error through log/slog.
func ExampleWithLimitedHook() {
	logger := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey && len(groups) == 0 {
				return slog.Attr{} // no time, so that the output is the same on every run
			}
			return a
		},
	}))
	clock := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

	h := retryafter.Limit(rate.Every(2*time.Second), 1,
		retryafter.WithClock(func() time.Time { return clock }),
		retryafter.WithLimitedHook(func(r *http.Request, key string, d retryafter.Decision) {
			logger.Info("rate limited", "client", key, "path", r.URL.Path, "wait", d.RetryAfter.Round(time.Millisecond))
		}),
		retryafter.WithErrorHook(func(r *http.Request, err error) {
			logger.Error("rate limiter failed", "path", r.URL.Path, "err", err)
		}),
	)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))

	for _, path := range []string{"/a", "/b", "/c"} {
		clock = clock.Add(500 * time.Millisecond)
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", path, nil))
	}
	// Output:
	// level=INFO msg="rate limited" client=192.0.2.1 path=/b wait=1.5s
	// level=INFO msg="rate limited" client=192.0.2.1 path=/c wait=1s
}
