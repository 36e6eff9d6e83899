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
	"github.com/retryafter/retryafter/internal/testkit"
)

// echo mounts the middleware of retryafter.Limit with echo.WrapMiddleware, with no adapter of
// ours: these tests hold that it answers as Limit answers, on an injected clock.

// echoAPI returns an echo server with limit mounted by echo.WrapMiddleware and routes / and /x
// that answer 200 "ok" and count the requests that reach them.
func echoAPI(limit func(http.Handler) http.Handler, reached *int) *echo.Echo {
	e := echo.New()
	e.Use(echo.WrapMiddleware(limit))
	route := func(c echo.Context) error {
		*reached++
		return c.String(http.StatusOK, "ok")
	}
	e.GET("/x", route)
	e.GET("/", route)
	return e
}

func echoGet(h http.Handler, remote string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodGet, "/x", nil)
	r.RemoteAddr = remote
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// TestEchoRoundTrip: through echo, over random policies and arrivals, every refusal has a Date
// of the clock's reading and a Retry-After of whole seconds; a client that waits exactly that
// long is admitted, and one that waits a second less is not (testkit.RoundTrip).
func TestEchoRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(58, 2))
	refusals := 0
	for range 100 {
		limit := rate.Limit(0.01 + rng.Float64()*rng.Float64()*200)
		clk := testkit.NewClock(testkit.T0.Add(time.Duration(rng.Int64N(int64(time.Hour)))))
		e := echoAPI(retryafter.Limit(limit, 1+rng.IntN(5), retryafter.WithClock(clk.Now)), new(int))
		gap := time.Duration(float64(time.Second) / float64(limit) / 4)
		refusals += testkit.RoundTrip(t, e, clk, 12, func() time.Duration { return time.Duration(rng.Int64N(int64(gap) + 1)) })
	}
	if refusals < 100 {
		t.Fatalf("%d refusals checked, want at least 100", refusals)
	}
}

// TestEchoRoundTripLoopback: a real HTTP client on loopback that waits Retry-After gets through.
func TestEchoRoundTripLoopback(t *testing.T) {
	clk := testkit.NewClock(testkit.T0)
	reached := 0
	testkit.RoundTripLoopback(t, echoAPI(retryafter.Limit(rate.Every(1500*time.Millisecond), 1, retryafter.WithClock(clk.Now)), &reached), clk, "/x")
	if reached != 2 {
		t.Fatalf("route reached %d times, want the 2 admitted requests", reached)
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
	t0 := testkit.T0
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
			opts := append([]retryafter.Option{retryafter.WithClock(testkit.NewClock(t0).Now)}, tc.opts...)
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

// TestEchoPreflightShaped wires the limiter into echo as the README does (WrapMiddleware, which
// wraps it anew for each request): requests shaped as CORS preflights to a route of every
// method, over a limit of 1, run its handler once, as through net/http, and the one that runs
// is charged what it reports in a layer charged afterwards. Each ran the handler before it was
// decided, and none was charged.
func TestEchoPreflightShaped(t *testing.T) {
	clk := testkit.NewClock(testkit.T0)
	tokens := retryafter.NewTokenBucket(rate.Every(time.Hour), 100)
	l := retryafter.All(retryafter.NewTokenBucket(rate.Every(time.Hour), 1), retryafter.ChargedAfter(tokens))
	e := echo.New()
	e.Use(echo.WrapMiddleware(retryafter.LimitWith(l, retryafter.WithClock(clk.Now))))
	runs := 0
	e.Any("/x", func(c echo.Context) error {
		runs++
		c.Response().WriteHeader(http.StatusOK) // decided here, the first time
		retryafter.Charge(c.Request(), 10)
		return nil
	})
	refused := 0
	for range 10 {
		r := httptest.NewRequest(http.MethodOptions, "/x", nil)
		r.RemoteAddr = "192.0.2.1:1234"
		r.Header.Set("Origin", "https://page.test")
		r.Header.Set("Access-Control-Request-Method", "DELETE")
		w := httptest.NewRecorder()
		e.ServeHTTP(w, r)
		if w.Code == http.StatusTooManyRequests {
			refused++
		}
	}
	if runs != 1 || refused != 9 {
		t.Fatalf("the handler ran %d times and %d of 10 were refused, over a limit of 1; want 1 and 9", runs, refused)
	}
	if d, _ := tokens.Decide(context.Background(), "192.0.2.1", 0, clk.Now()); d.Remaining != 90 {
		t.Fatalf("the layer charged afterwards holds %d of 100, want 90", d.Remaining)
	}
}
