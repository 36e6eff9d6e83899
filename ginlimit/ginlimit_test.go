package ginlimit_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"golang.org/x/time/rate"

	"github.com/retryafter/retryafter"
	"github.com/retryafter/retryafter/ginlimit"
	"github.com/retryafter/retryafter/internal/testkit"
)

func init() { gin.SetMode(gin.TestMode) }

var t0 = testkit.T0

// engine returns a gin engine, as gin.New makes it, with ginlimit.New(m) in front of every route
// and routes / and /x that answer 200 "ok" and count the requests that reach them.
func engine(m *retryafter.Middleware, reached *int) *gin.Engine {
	r := gin.New()
	r.Use(ginlimit.New(m))
	route := func(c *gin.Context) {
		*reached++
		c.String(http.StatusOK, "ok")
	}
	r.Any("/x", route)
	r.Any("/", route)
	return r
}

// serve sends r to h and returns the response.
func serve(h http.Handler, r *http.Request) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func get(remote string) *http.Request {
	r := httptest.NewRequest(http.MethodGet, "/x", nil)
	r.RemoteAddr = remote
	return r
}

// TestRoundTrip: over random policies and arrivals, every refusal through gin has a Date of
// the clock's reading and a Retry-After of whole seconds; a client that waits exactly that long
// is admitted, and one that waits a second less is not (testkit.RoundTrip).
func TestRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(58, 1))
	refusals := 0
	for range 100 {
		limit := rate.Limit(0.01 + rng.Float64()*rng.Float64()*200) // 0.01 to 200 a second
		clk := testkit.NewClock(testkit.T0.Add(time.Duration(rng.Int64N(int64(time.Hour)))))
		m := retryafter.NewMiddleware(retryafter.NewTokenBucket(limit, 1+rng.IntN(5)), retryafter.WithClock(clk.Now))
		gap := time.Duration(float64(time.Second) / float64(limit) / 4)
		refusals += testkit.RoundTrip(t, engine(m, new(int)), clk, 12, func() time.Duration { return time.Duration(rng.Int64N(int64(gap) + 1)) })
	}
	if refusals < 100 {
		t.Fatalf("%d refusals checked, want at least 100", refusals)
	}
}

// TestRoundTripLoopback: a real HTTP client, on loopback, that reads Retry-After and waits that
// long on the server's clock gets through.
func TestRoundTripLoopback(t *testing.T) {
	clk := testkit.NewClock(t0)
	reached := 0
	m := retryafter.NewMiddleware(retryafter.NewTokenBucket(rate.Every(1500*time.Millisecond), 1), retryafter.WithClock(clk.Now))
	testkit.RoundTripLoopback(t, engine(m, &reached), clk, "/x")
	if reached != 2 {
		t.Fatalf("route reached %d times, want the 2 admitted requests", reached)
	}
}

// TestKeyNotFromGinsHeaders: gin.New believes X-Forwarded-For and X-Real-IP from any peer (its
// ClientIP tells each request apart here), but the key is the Middleware's: one peer sending
// other addresses in those headers is still one client.
func TestKeyNotFromGinsHeaders(t *testing.T) {
	m := retryafter.NewMiddleware(retryafter.NewTokenBucket(rate.Every(time.Hour), 1), retryafter.WithClock(testkit.NewClock(t0).Now))
	r := gin.New()
	r.Use(ginlimit.New(m))
	var seen []string
	r.GET("/x", func(c *gin.Context) { seen = append(seen, c.ClientIP()) })
	for i, h := range []string{"X-Forwarded-For", "X-Real-IP", "X-Forwarded-For"} {
		req := get("192.0.2.1:1234")
		req.Header.Set(h, "198.51.100."+strconv.Itoa(i+1))
		w := serve(r, req)
		if want := []int{http.StatusOK, http.StatusTooManyRequests, http.StatusTooManyRequests}[i]; w.Code != want {
			t.Fatalf("request %d with %s: %d, want %d", i, h, w.Code, want)
		}
	}
	if len(seen) != 1 || seen[0] != "198.51.100.1" {
		t.Fatalf("gin's ClientIP: %q; want gin to believe the header (else the test shows nothing)", seen)
	}
}

// down is a Limiter that cannot decide: a store that is down.
type down struct{}

func (down) Decide(context.Context, string, int, time.Time) (retryafter.Decision, error) {
	return retryafter.Decision{}, errors.New("store down")
}

// TestAnsweredAsLimit: a key function that fails, a store that is down and a refusal, failing
// closed and open, are answered through gin byte for byte as retryafter.LimitWith answers them,
// the hooks are told the same, and the route is reached exactly when LimitWith's next is.
func TestAnsweredAsLimit(t *testing.T) {
	badKey := retryafter.WithKeyFunc(func(*http.Request) (string, error) { return "", errors.New("no key") })
	full := retryafter.NewTokenBucket(rate.Every(time.Minute), 1)
	full.Decide(context.Background(), "192.0.2.1", 1, t0)
	cases := []struct {
		name string
		l    retryafter.Limiter
		opts []retryafter.Option
	}{
		{"key fails", retryafter.NewTokenBucket(1, 1), []retryafter.Option{badKey}},
		{"key fails, open", retryafter.NewTokenBucket(1, 1), []retryafter.Option{badKey, retryafter.WithFailOpen(true)}},
		{"store down", down{}, nil},
		{"store down, open", down{}, []retryafter.Option{retryafter.WithFailOpen(true)}},
		{"refused", full, []retryafter.Option{retryafter.WithRateLimitFields("p"), retryafter.WithProblemDetails(retryafter.ProblemDetails{})}},
		{"refused, dry run", full, []retryafter.Option{retryafter.WithDryRun(true), retryafter.WithRateLimitFields("p")}},
		{"exempt", down{}, []retryafter.Option{retryafter.WithExempt(func(*http.Request) bool { return true })}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var told [2][]string
			opts := func(i int) []retryafter.Option {
				return append([]retryafter.Option{
					retryafter.WithClock(testkit.NewClock(t0).Now),
					retryafter.WithErrorHook(func(_ *http.Request, err error) { told[i] = append(told[i], "error "+err.Error()) }),
					retryafter.WithDecisionHook(func(_ *http.Request, o retryafter.Outcome, _ retryafter.Decision) {
						told[i] = append(told[i], o.String())
					}),
				}, tc.opts...)
			}
			reached := 0
			want := serve(retryafter.LimitWith(tc.l, opts(0)...)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				reached++
				w.Header().Set("Content-Type", "text/plain; charset=utf-8")
				w.Write([]byte("ok"))
			})), get("192.0.2.1:1234"))
			limitReached := reached
			reached = 0
			got := serve(engine(retryafter.NewMiddleware(tc.l, opts(1)...), &reached), get("192.0.2.1:1234"))
			if got.Code != want.Code || !reflect.DeepEqual(got.Header(), want.Header()) || got.Body.String() != want.Body.String() {
				t.Fatalf("gin answered %d %v %q\nLimit answered %d %v %q", got.Code, got.Header(), got.Body, want.Code, want.Header(), want.Body)
			}
			if reached != limitReached || !reflect.DeepEqual(told[0], told[1]) {
				t.Fatalf("gin's route reached %d times, told %q; Limit's next %d, told %q", reached, told[1], limitReached, told[0])
			}
		})
	}
}

// TestChainAborted: a refusal stops gin's chain, handlers after the limiter and the route alike;
// handlers before it run, and see the refusal's status.
func TestChainAborted(t *testing.T) {
	m := retryafter.NewMiddleware(retryafter.NewTokenBucket(rate.Every(time.Hour), 1), retryafter.WithClock(testkit.NewClock(t0).Now))
	var trace []string
	r := gin.New()
	r.Use(func(c *gin.Context) {
		c.Next()
		trace = append(trace, "before:"+strconv.Itoa(c.Writer.Status())+":"+strconv.FormatBool(c.IsAborted()))
	})
	r.Use(ginlimit.New(m))
	r.Use(func(c *gin.Context) { trace = append(trace, "after") })
	r.GET("/x", func(c *gin.Context) { trace = append(trace, "route") })
	serve(r, get("192.0.2.1:1234"))
	serve(r, get("192.0.2.1:1234"))
	want := []string{"after", "route", "before:200:false", "before:429:true"}
	if !reflect.DeepEqual(trace, want) {
		t.Fatalf("trace %q, want %q", trace, want)
	}
}

// TestRequestPassedOn: the route sees the request the Middleware passes on in c.Request, so
// that retryafter.Charge charges a limiter charged afterwards what the route reports.
func TestRequestPassedOn(t *testing.T) {
	clk := testkit.NewClock(t0)
	m := retryafter.NewMiddleware(retryafter.ChargedAfter(retryafter.NewTokenBucket(1, 10)), retryafter.WithClock(clk.Now))
	r := gin.New()
	r.Use(ginlimit.New(m))
	charged := false
	r.GET("/x", func(c *gin.Context) { charged = retryafter.Charge(c.Request, 30) })
	if w := serve(r, get("192.0.2.1:1234")); w.Code != http.StatusOK || !charged {
		t.Fatalf("first: %d, charged %v", w.Code, charged)
	}
	w := serve(r, get("192.0.2.1:1234"))
	if wait, _ := retryafter.ParseRetryAfter(w.Header(), clk.Now()); w.Code != http.StatusTooManyRequests || wait != 20*time.Second {
		t.Fatalf("after a charge of 30 on a burst of 10 at 1/s: %d, Retry-After %q; want 429, 20", w.Code, w.Header().Get("Retry-After"))
	}
}

// preflight returns a request shaped as a CORS preflight.
func preflight() *http.Request {
	r := httptest.NewRequest(http.MethodOptions, "/x", nil)
	r.RemoteAddr = "192.0.2.1:1234"
	r.Header.Set("Origin", "https://app.example")
	r.Header.Set("Access-Control-Request-Method", "PUT")
	return r
}

// TestPreflightShaped: a request shaped as a CORS preflight that the route does not answer as
// one is limited as any other, the first (which the Middleware probes by holding back its
// answer) included: it is not a way around the limit. One that the route answers as a preflight
// passes uncounted, its answer written through.
func TestPreflightShaped(t *testing.T) {
	clk := testkit.NewClock(t0)
	for _, answers := range []bool{false, true} {
		m := retryafter.NewMiddleware(retryafter.NewTokenBucket(rate.Every(time.Hour), 1), retryafter.WithClock(clk.Now))
		r := gin.New()
		r.Use(ginlimit.New(m))
		r.GET("/x", func(*gin.Context) {})
		r.OPTIONS("/x", func(c *gin.Context) {
			if answers {
				c.Header("Access-Control-Allow-Methods", "PUT")
				c.AbortWithStatus(http.StatusNoContent)
				return
			}
			c.String(http.StatusOK, "options")
		})
		serve(r, get("192.0.2.1:1234")) // spends the client's one request: a preflight probed now is decided
		var codes []int
		for range 3 {
			w := serve(r, preflight())
			codes = append(codes, w.Code)
			if answers && w.Header().Get("Access-Control-Allow-Methods") != "PUT" {
				t.Fatalf("the route's preflight answer lost its header: %v", w.Header())
			}
		}
		want := []int{http.StatusTooManyRequests, http.StatusTooManyRequests, http.StatusTooManyRequests}
		if answers {
			want = []int{http.StatusNoContent, http.StatusNoContent, http.StatusNoContent}
		}
		if !reflect.DeepEqual(codes, want) {
			t.Fatalf("route answers preflights %v: %v, want %v", answers, codes, want)
		}
	}
}

func TestNewNil(t *testing.T) {
	defer func() {
		if r := recover(); r != "ginlimit: nil Middleware" {
			t.Fatalf("recovered %v", r)
		}
	}()
	ginlimit.New(nil)
}
