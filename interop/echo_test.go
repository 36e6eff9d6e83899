package interop

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"golang.org/x/time/rate"

	"github.com/retryafter/retryafter"
)

// echo mounts the middleware of retryafter.Limit with echo.WrapMiddleware, with no adapter of
// ours: these tests hold that it answers as Limit answers, on an injected clock.

// echoClock is a test's clock, set by the test.
type echoClock struct{ now time.Time }

func (c *echoClock) Now() time.Time { return c.now }

// echoAPI returns an echo server with limit mounted by echo.WrapMiddleware and a route /x that
// answers 200 "ok" and counts the requests that reach it.
func echoAPI(limit func(http.Handler) http.Handler, reached *int) *echo.Echo {
	e := echo.New()
	e.Use(echo.WrapMiddleware(limit))
	e.GET("/x", func(c echo.Context) error {
		*reached++
		return c.String(http.StatusOK, "ok")
	})
	return e
}

func echoGet(h http.Handler, remote string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodGet, "/x", nil)
	r.RemoteAddr = remote
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// TestEchoRoundTrip: through echo, over random policies, the request after the burst is
// refused 429 with a Retry-After that ParseRetryAfter reads and Date from the same clock
// reading, and never reaches the route; a client that waits exactly Retry-After is admitted, one
// that waits a second less is not.
func TestEchoRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(58, 2))
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	for i := range 200 {
		limit := rate.Limit(0.01 + rng.Float64()*rng.Float64()*200)
		burst := 1 + rng.IntN(5)
		clk := &echoClock{now: t0.Add(time.Duration(rng.Int64N(int64(time.Hour))))}
		reached := 0
		e := echoAPI(retryafter.Limit(limit, burst, retryafter.WithClock(clk.Now)), &reached)
		for range burst {
			if w := echoGet(e, "192.0.2.1:1234"); w.Code != http.StatusOK {
				t.Fatalf("policy %d (%v/s, burst %d): within the burst: %d", i, limit, burst, w.Code)
			}
		}
		w := echoGet(e, "192.0.2.1:1234")
		if w.Code != http.StatusTooManyRequests || reached != burst {
			t.Fatalf("policy %d (%v/s, burst %d): after the burst: %d, route reached %d times", i, limit, burst, w.Code, reached)
		}
		if got, want := w.Header().Get("Date"), clk.now.Format(http.TimeFormat); got != want {
			t.Fatalf("policy %d: Date %q, want %q", i, got, want)
		}
		wait, ok := retryafter.ParseRetryAfter(w.Header(), clk.now)
		if !ok || wait < time.Second {
			t.Fatalf("policy %d: Retry-After %q", i, w.Header().Get("Retry-After"))
		}
		start := clk.now
		clk.now = start.Add(wait - time.Second)
		if w := echoGet(e, "192.0.2.1:1234"); w.Code != http.StatusTooManyRequests {
			t.Fatalf("policy %d (%v/s, burst %d): a second before Retry-After %v: %d", i, limit, burst, wait, w.Code)
		}
		clk.now = start.Add(wait)
		if w := echoGet(e, "192.0.2.1:1234"); w.Code != http.StatusOK {
			t.Fatalf("policy %d (%v/s, burst %d): waited Retry-After %v: %d", i, limit, burst, wait, w.Code)
		}
	}
}

// TestEchoRoundTripLoopback: a real HTTP client on loopback that waits Retry-After gets through.
func TestEchoRoundTripLoopback(t *testing.T) {
	clk := &echoClock{now: time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)}
	reached := 0
	srv := httptest.NewServer(echoAPI(retryafter.Limit(rate.Every(1500*time.Millisecond), 1, retryafter.WithClock(clk.Now)), &reached))
	defer srv.Close()
	do := func() *http.Response {
		t.Helper()
		resp, err := srv.Client().Get(srv.URL + "/x")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	do()
	resp := do()
	wait, ok := retryafter.ParseRetryAfter(resp.Header, clk.now)
	if resp.StatusCode != http.StatusTooManyRequests || !ok || wait != 2*time.Second || resp.Header.Get("Date") != clk.now.Format(http.TimeFormat) {
		t.Fatalf("second: %d, Retry-After %q, Date %q", resp.StatusCode, resp.Header.Get("Retry-After"), resp.Header.Get("Date"))
	}
	clk.now = clk.now.Add(wait)
	if resp := do(); resp.StatusCode != http.StatusOK || reached != 2 {
		t.Fatalf("after Retry-After: %d, route reached %d times", resp.StatusCode, reached)
	}
}

// echoDown is a Limiter that cannot decide: a store that is down.
type echoDown struct{}

func (echoDown) Decide(context.Context, string, int, time.Time) (retryafter.Decision, error) {
	return retryafter.Decision{}, errors.New("store down")
}

// TestEchoAnsweredAsLimit: a key function that fails and a store that is down, failing closed
// and open, and a refusal are answered through echo as LimitWith answers them in net/http,
// status, header and body, and the route is reached exactly when LimitWith's next is. The key is
// the middleware's: X-Real-IP and X-Forwarded-For, which echo's RealIP reads, play no part.
func TestEchoAnsweredAsLimit(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	badKey := retryafter.WithKeyFunc(func(*http.Request) (string, error) { return "", errors.New("no key") })
	full := retryafter.NewTokenBucket(rate.Every(time.Minute), 1)
	full.Decide(context.Background(), "192.0.2.1", 1, t0)
	for _, tc := range []struct {
		name string
		l    retryafter.Limiter
		opts []retryafter.Option
	}{
		{"key fails", retryafter.NewTokenBucket(1, 1), []retryafter.Option{badKey}},
		{"key fails, open", retryafter.NewTokenBucket(1, 1), []retryafter.Option{badKey, retryafter.WithFailOpen(true)}},
		{"store down", echoDown{}, nil},
		{"store down, open", echoDown{}, []retryafter.Option{retryafter.WithFailOpen(true)}},
		{"refused", full, []retryafter.Option{retryafter.WithRateLimitFields("p"), retryafter.WithProblemDetails(retryafter.ProblemDetails{})}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := append([]retryafter.Option{retryafter.WithClock((&echoClock{now: t0}).Now)}, tc.opts...)
			reached := 0
			want := echoGet(retryafter.LimitWith(tc.l, opts...)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				reached++
				w.Header().Set("Content-Type", "text/plain; charset=UTF-8")
				w.Write([]byte("ok"))
			})), "192.0.2.1:1234")
			limitReached := reached
			reached = 0
			r := httptest.NewRequest(http.MethodGet, "/x", nil)
			r.RemoteAddr = "192.0.2.1:1234"
			r.Header.Set("X-Real-IP", "198.51.100.9")
			r.Header.Set("X-Forwarded-For", "198.51.100.9")
			got := httptest.NewRecorder()
			echoAPI(retryafter.LimitWith(tc.l, opts...), &reached).ServeHTTP(got, r)
			if got.Code != want.Code || !reflect.DeepEqual(got.Header(), want.Header()) || got.Body.String() != want.Body.String() {
				t.Fatalf("echo answered %d %v %q\nLimit answered %d %v %q", got.Code, got.Header(), got.Body, want.Code, want.Header(), want.Body)
			}
			if reached != limitReached {
				t.Fatalf("echo's route reached %d times, Limit's next %d", reached, limitReached)
			}
		})
	}
}
