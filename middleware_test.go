package retryafter

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/time/rate"
)

// arrival patterns: each returns the gap before a client's next request.
var patterns = map[string]func(rng *rand.Rand, limit rate.Limit) time.Duration{
	"bursty": func(rng *rand.Rand, limit rate.Limit) time.Duration {
		if rng.IntN(5) > 0 {
			return 0
		}
		return time.Duration(rng.ExpFloat64() / float64(limit) * float64(time.Second))
	},
	"uniform": func(rng *rand.Rand, limit rate.Limit) time.Duration {
		return time.Duration(rng.Float64() * 2 / float64(limit) * float64(time.Second))
	},
	"poisson": func(rng *rand.Rand, limit rate.Limit) time.Duration {
		return time.Duration(rng.ExpFloat64() / float64(limit) * float64(time.Second))
	},
	// "aligned" lands on whole seconds and whole token intervals, where the float arithmetic of
	// the bucket yields waits of exactly n seconds that it may then miss by a nanosecond.
	"aligned": func(rng *rand.Rand, limit rate.Limit) time.Duration {
		switch rng.IntN(3) {
		case 0:
			return 0
		case 1:
			return time.Duration(rng.IntN(5)) * time.Second
		}
		return time.Duration(float64(rng.IntN(4)) / float64(limit) * float64(time.Second))
	},
	"jittery": func(rng *rand.Rand, limit rate.Limit) time.Duration {
		return time.Duration(rng.Int64N(int64(time.Second))) // odd nanoseconds
	},
}

func TestRoundTripProperty(t *testing.T) {
	limits := []rate.Limit{0.3, 1, 2.5, 7, rate.Every(time.Minute), rate.Every(200 * time.Millisecond), rate.Every(3 * time.Second)}
	bursts := []int{1, 3, 10}
	for _, limit := range limits {
		for _, burst := range bursts {
			for name, pattern := range patterns {
				t.Run(fmt.Sprintf("%v/%d/%s", limit, burst, name), func(t *testing.T) {
					refusals := 0
					for seed := range uint64(5) {
						rng := rand.New(rand.NewPCG(seed, uint64(burst)))
						clk := newClock(t0.Add(time.Duration(rng.Int64N(int64(time.Second)))))
						h := Limit(limit, burst, WithClock(clk.Now))(ok)
						refusals += checkRoundTrip(t, h, clk, 100, func() time.Duration { return pattern(rng, limit) })
					}
					if refusals == 0 && name == "bursty" {
						t.Fatal("no request was refused, so nothing was checked")
					}
				})
			}
		}
	}
}

// TestRoundTripRandomConfigs checks the promise for limits and bursts drawn at random, so that
// the float arithmetic of the bucket meets rates that are not round numbers.
func TestRoundTripRandomConfigs(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	refusals := 0
	for i := range 300 {
		limit := rate.Limit(math.Pow(10, rng.Float64()*4-2)) // 0.01/s to 100/s
		burst := 1 + rng.IntN(20)
		clk := newClock(t0.Add(time.Duration(rng.Int64N(int64(time.Hour)))))
		h := Limit(limit, burst, WithClock(clk.Now))(ok)
		refusals += checkRoundTrip(t, h, clk, 40, func() time.Duration { return patterns[[]string{"bursty", "aligned"}[i%2]](rng, limit) })
	}
	if refusals < 1000 {
		t.Fatalf("only %d refusals checked", refusals)
	}
}

func TestLimitFixedInstants(t *testing.T) {
	type step struct {
		at         time.Duration // since t0
		status     int
		retryAfter string
	}
	tests := []struct {
		name  string
		limit rate.Limit
		burst int
		steps []step
	}{
		{"100ms of wait says 1, never 0", 1, 1, []step{
			{0, 200, ""},
			{900 * time.Millisecond, 429, "1"},
			{1900 * time.Millisecond, 200, ""},
		}},
		{"the time left, not the whole interval", rate.Every(time.Minute), 1, []step{
			{0, 200, ""},
			{55 * time.Second, 429, "5"},
			{60 * time.Second, 200, ""},
		}},
		{"a whole-second wait is not rounded past itself", rate.Every(time.Minute), 1, []step{
			{0, 200, ""},
			{0, 429, "60"},
			{60 * time.Second, 200, ""},
			{60 * time.Second, 429, "60"},
			{120 * time.Second, 200, ""},
		}},
		{"refusals cost no quota", 1, 2, []step{
			{0, 200, ""},
			{0, 200, ""},
			{0, 429, "1"},
			{100 * time.Millisecond, 429, "1"},
			{500 * time.Millisecond, 429, "1"},
			{999 * time.Millisecond, 429, "1"},
			{time.Second, 200, ""},
			{time.Second, 429, "1"},
		}},
		{"slow rate with a burst", 0.3, 3, []step{
			{0, 200, ""},
			{0, 200, ""},
			{0, 200, ""},
			{0, 429, "4"}, // 3.33 s
			{3 * time.Second, 429, "1"},
			{3334 * time.Millisecond, 200, ""},
		}},
		{"zero rate: the burst, then never", 0, 2, []step{
			{0, 200, ""},
			{time.Hour, 200, ""},
			{2 * time.Hour, 429, ""},
		}},
		{"infinite rate admits everything", rate.Inf, 1, []step{
			{0, 200, ""}, {0, 200, ""}, {0, 200, ""}, {0, 200, ""},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newClock(t0.Add(123456789))
			start := clk.Now()
			h := Limit(tt.limit, tt.burst, WithClock(clk.Now))(ok)
			for i, s := range tt.steps {
				clk.Set(start.Add(s.at))
				w := serve(h, http.MethodGet, "198.51.100.7:40000")
				if w.Code != s.status || w.Header().Get("Retry-After") != s.retryAfter {
					t.Fatalf("step %d at %v: got %d Retry-After %q, want %d %q",
						i, s.at, w.Code, w.Header().Get("Retry-After"), s.status, s.retryAfter)
				}
				if s.status == 429 {
					if got, want := w.Header().Get("Date"), clk.Now().UTC().Format(http.TimeFormat); got != want {
						t.Fatalf("step %d: Date %q, want %q", i, got, want)
					}
				}
			}
		})
	}
}

func TestLimitKeysAreSeparate(t *testing.T) {
	clk := newClock(t0)
	h := Limit(1, 1, WithClock(clk.Now))(ok)
	if w := serve(h, "GET", "192.0.2.1:1"); w.Code != 200 {
		t.Fatalf("first client: %d", w.Code)
	}
	if w := serve(h, "GET", "192.0.2.1:2"); w.Code != 429 {
		t.Fatalf("first client from another port: %d, want 429 (the port is not part of the key)", w.Code)
	}
	if w := serve(h, "GET", "192.0.2.2:1"); w.Code != 200 {
		t.Fatalf("second client: %d, want 200", w.Code)
	}
}

func TestLimitResponse(t *testing.T) {
	clk := newClock(t0.Add(1500 * time.Millisecond))
	h := Limit(1, 1, WithClock(clk.Now))(ok)
	serve(h, "GET", "192.0.2.1:1")

	w := serve(h, "GET", "192.0.2.1:1")
	wantRefusal(t, w, 429, clk.Now())
	if got := w.Header().Get("Content-Type"); got != "text/plain; charset=utf-8" {
		t.Errorf("Content-Type = %q", got)
	}
	if body := w.Body.String(); body != "Too Many Requests\n" {
		t.Errorf("body = %q", body)
	}

	w = serve(h, "HEAD", "192.0.2.1:1")
	wantRefusal(t, w, 429, clk.Now())
	if w.Body.Len() != 0 {
		t.Errorf("HEAD got a body: %q", w.Body.String())
	}
}

func TestLimitResponder(t *testing.T) {
	clk := newClock(t0)
	var gotWait time.Duration
	json := func(w http.ResponseWriter, r *http.Request, f Refusal) {
		status, retryAfter := f.Status, f.RetryAfter
		gotWait = retryAfter
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		fmt.Fprintf(w, `{"status":%d,"retry_after":%d}`, status, retryAfter/time.Second)
	}
	h := Limit(rate.Every(10*time.Second), 1, WithClock(clk.Now), WithResponder(json))(ok)
	serve(h, "GET", "192.0.2.1:1")
	clk.Advance(2500 * time.Millisecond)
	w := serve(h, "GET", "192.0.2.1:1")
	wait := wantRefusal(t, w, 429, clk.Now())
	if wait != 8*time.Second || gotWait != wait {
		t.Fatalf("header says %v, responder was told %v, want 8s both", wait, gotWait)
	}
	if got, want := w.Body.String(), `{"status":429,"retry_after":8}`; got != want {
		t.Fatalf("body = %s, want %s", got, want)
	}
}

type failingLimiter struct{ err error }

func (f failingLimiter) Decide(context.Context, string, int, time.Time) (Decision, error) {
	return Decision{}, f.err
}

func TestLimitErrors(t *testing.T) {
	secret := errors.New("secret detail: redis at 10.0.0.1 said NOAUTH")
	badKey := WithKeyFunc(func(*http.Request) (string, error) { return "", secret })
	good := NewTokenBucket(1, 1)
	tests := []struct {
		name       string
		limiter    Limiter
		opts       []Option
		status     int
		retryAfter string
	}{
		{"key error fails closed with 500", good, []Option{badKey}, 500, ""},
		{"limiter error fails closed with 503", failingLimiter{secret}, nil, 503, "1"},
		{"key error fails open", good, []Option{badKey, WithFailOpen(true)}, 200, ""},
		{"limiter error fails open", failingLimiter{secret}, []Option{WithFailOpen(true)}, 200, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newClock(t0)
			var hooked []error
			opts := append([]Option{WithClock(clk.Now), WithErrorHook(func(r *http.Request, err error) {
				hooked = append(hooked, err)
			})}, tt.opts...)
			w := serve(LimitWith(tt.limiter, opts...)(ok), "GET", "192.0.2.1:1")
			if w.Code != tt.status || w.Header().Get("Retry-After") != tt.retryAfter {
				t.Fatalf("got %d Retry-After %q, want %d %q", w.Code, w.Header().Get("Retry-After"), tt.status, tt.retryAfter)
			}
			if strings.Contains(w.Body.String(), "secret") {
				t.Fatalf("the error reached the client: %q", w.Body.String())
			}
			if len(hooked) != 1 || !errors.Is(hooked[0], secret) {
				t.Fatalf("error hook saw %v, want the one error", hooked)
			}
			if w.Code != 200 && w.Header().Get("Date") != t0.Format(http.TimeFormat) {
				t.Fatalf("Date = %q", w.Header().Get("Date"))
			}
		})
	}
}

func TestLimitPassesThroughUntouched(t *testing.T) {
	h := Limit(1, 5)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Handler", "yes")
		w.WriteHeader(http.StatusTeapot)
	}))
	w := serve(h, "GET", "192.0.2.1:1")
	if w.Code != http.StatusTeapot || w.Header().Get("X-Handler") != "yes" {
		t.Fatalf("got %d %v", w.Code, w.Header())
	}
	if len(w.Header()) != 1 {
		t.Fatalf("middleware added headers to an admitted response: %v", w.Header())
	}
}

func TestConstructionPanics(t *testing.T) {
	tests := map[string]func(){
		"burst 0":        func() { Limit(1, 0) },
		"negative burst": func() { Limit(1, -1) },
		"negative limit": func() { Limit(-1, 1) },
		"NaN limit":      func() { Limit(rate.Limit(math.NaN()), 1) }, // rate.Limit(n / d), n = d = 0
		"NaN bucket":     func() { NewTokenBucket(rate.Limit(math.NaN()), 1) },
		"-Inf limit":     func() { NewTokenBucket(rate.Limit(math.Inf(-1)), 1) },
		"nil limiter":    func() { LimitWith(nil) },
		"nil clock":      func() { WithClock(nil) },
		"nil key func":   func() { WithKeyFunc(nil) },
		"nil responder":  func() { WithResponder(nil) },
		"max memory 0":   func() { WithMaxMemory(0) },
		"nil option":     func() { Limit(1, 1, nil) },
		"nil cost":       func() { WithCost(nil) },
		"policy name":    func() { WithRateLimitFields("r\u00e9sum\u00e9") },
	}
	wantPanics(t, tests)
}

// TestOnTheWire runs the middleware behind a real server on loopback: Date and Retry-After are
// the middleware's (the server adds Date only when the handler did not), and a Go client reads
// them with ParseRetryAfter.
func TestOnTheWire(t *testing.T) {
	clk := newClock(t0.Add(250 * time.Millisecond))
	mux := http.NewServeMux()
	mux.Handle("/", ok)
	srv := httptest.NewServer(Limit(rate.Every(30*time.Second), 1, WithClock(clk.Now))(mux))
	defer srv.Close()

	get := func() *http.Response {
		t.Helper()
		resp, err := srv.Client().Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	if resp := get(); resp.StatusCode != 200 {
		t.Fatalf("first request: %d", resp.StatusCode)
	}
	clk.Advance(10 * time.Second)
	resp := get()
	if resp.StatusCode != 429 {
		t.Fatalf("second request: %d", resp.StatusCode)
	}
	if got, want := resp.Header.Get("Date"), "Sun, 29 Nov 2026 12:00:10 GMT"; got != want {
		t.Fatalf("Date on the wire = %q, want the middleware's clock %q", got, want)
	}
	if got := resp.Header.Values("Retry-After"); len(got) != 1 || got[0] != "20" {
		t.Fatalf("Retry-After on the wire = %q, want [20]", got)
	}
	wait, ok := ParseRetryAfter(resp.Header, time.Now())
	if !ok || wait != 20*time.Second {
		t.Fatalf("ParseRetryAfter = %v, %v", wait, ok)
	}
	clk.Advance(wait)
	if resp := get(); resp.StatusCode != 200 {
		t.Fatalf("after waiting Retry-After: %d", resp.StatusCode)
	}
}

// TestRoundTripFloatEdge replays an arrival sequence on which x/time/rate's float arithmetic
// computes a wait of exactly one second and then, one second later, finds 0.99999999 tokens.
func TestRoundTripFloatEdge(t *testing.T) {
	gaps := []time.Duration{10 * time.Second, 0, 6666666666, 0, 2 * time.Second, 3333333333, 0, 3 * time.Second, 2 * time.Second}
	clk := newClock(t0)
	h := Limit(0.3, 3, WithClock(clk.Now))(ok)
	i := 0
	n := checkRoundTrip(t, h, clk, len(gaps), func() time.Duration { i++; return gaps[i-1] })
	if n != 2 {
		t.Fatalf("%d refusals, want the 2 of the sequence", n)
	}
}

func TestCost(t *testing.T) {
	tests := []struct {
		name string
		cost func(*http.Request) int
		want int
	}{
		{"default", nil, 1},
		{"several tokens", func(*http.Request) int { return 7 }, 7},
		{"zero counts as one", func(*http.Request) int { return 0 }, 1},
		{"negative counts as one", func(*http.Request) int { return -5 }, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fl := &fakeLimiter{d: Decision{Allowed: true}}
			var opts []Option
			if tt.cost != nil {
				opts = append(opts, WithCost(tt.cost))
			}
			serve(LimitWith(fl, opts...)(ok), "GET", "192.0.2.1:1")
			if len(fl.costs) != 1 || fl.costs[0] != tt.want {
				t.Fatalf("limiter asked for %v, want [%d]", fl.costs, tt.want)
			}
		})
	}
}

// TestCostRoundTrip checks the Retry-After promise for requests that cost several tokens: a
// request of the same cost retried exactly Retry-After later is admitted, a second earlier not.
func TestCostRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	refusals := 0
	for i := range 200 {
		limit := rate.Limit(math.Pow(10, rng.Float64()*3-1)) // 0.1/s to 100/s
		burst := 1 + rng.IntN(10)
		cost := 1 + rng.IntN(burst)
		clk := newClock(t0.Add(time.Duration(rng.Int64N(int64(time.Hour)))))
		h := Limit(limit, burst, WithClock(clk.Now), WithCost(func(*http.Request) int { return cost }))(ok)
		refusals += checkRoundTrip(t, h, clk, 30, func() time.Duration { return patterns[[]string{"bursty", "aligned"}[i%2]](rng, limit) })
	}
	if refusals < 500 {
		t.Fatalf("only %d refusals checked", refusals)
	}
}

// TestCostAboveBurst checks what a request that can never be admitted is answered: 429 with a
// Date and no Retry-After, and it costs the client nothing.
func TestCostAboveBurst(t *testing.T) {
	clk := newClock(t0)
	var limited []Decision
	expensive := func(r *http.Request) int {
		if r.URL.Path == "/export" {
			return 6
		}
		return 1
	}
	h := Limit(1, 5, WithClock(clk.Now), WithCost(expensive), WithLimitedHook(func(_ *http.Request, _ string, d Decision) {
		limited = append(limited, d)
	}))(ok)
	for range 3 {
		r := httptest.NewRequest("GET", "/export", nil)
		r.RemoteAddr = "192.0.2.1:1"
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") != "" || w.Header().Get("Date") != t0.Format(http.TimeFormat) {
			t.Fatalf("got %d Retry-After %q Date %q", w.Code, w.Header().Get("Retry-After"), w.Header().Get("Date"))
		}
	}
	if len(limited) != 3 || limited[0].RetryAfter != rate.InfDuration {
		t.Fatalf("limited hook saw %+v", limited)
	}
	for i := range 5 {
		if w := serve(h, "GET", "192.0.2.1:1"); w.Code != http.StatusOK {
			t.Fatalf("cheap request %d refused: the refused expensive ones spent quota", i)
		}
	}
}

func TestLimitedHook(t *testing.T) {
	type call struct {
		key string
		d   Decision
	}
	var calls []call
	hook := WithLimitedHook(func(r *http.Request, key string, d Decision) { calls = append(calls, call{key, d}) })
	clk := newClock(t0)
	h := Limit(1, 1, WithClock(clk.Now), hook)(ok)
	serve(h, "GET", "192.0.2.1:1")
	clk.Advance(300 * time.Millisecond)
	serve(h, "GET", "192.0.2.1:2")
	serve(h, "GET", "192.0.2.2:1")
	if len(calls) != 1 || calls[0].key != "192.0.2.1" || calls[0].d.Allowed || calls[0].d.RetryAfter <= 699*time.Millisecond || calls[0].d.RetryAfter > 700*time.Millisecond {
		t.Fatalf("hook calls %+v, want the one refusal of 192.0.2.1 with its exact wait", calls)
	}

	calls = nil
	h = LimitWith(failingLimiter{errTest}, hook)(ok)
	serve(h, "GET", "192.0.2.1:1")
	if len(calls) != 0 {
		t.Fatalf("limited hook told of an error: %+v", calls)
	}
}

// TestAllowedPathAllocs checks that an admitted request costs the middleware no allocation when
// none of the optional features is on (the key function is a constant here: the default one
// formats the address).
func TestAllowedPathAllocs(t *testing.T) {
	h := Limit(1e9, 1e9, WithKeyFunc(func(*http.Request) (string, error) { return "k", nil }))(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	r := httptest.NewRequest("GET", "/", nil)
	r.Header.Set("Origin", "https://app.example")
	w := newTestWriter()
	h.ServeHTTP(w, r)
	if n := testing.AllocsPerRun(1000, func() { h.ServeHTTP(w, r) }); n != 0 {
		t.Fatalf("%v allocations per admitted request", n)
	}
	if len(w.h) != 0 {
		t.Fatalf("headers added to an admitted response: %v", w.h)
	}
}

func BenchmarkAllowedOptions(b *testing.B) {
	constKey := WithKeyFunc(func(*http.Request) (string, error) { return "192.0.2.1", nil })
	for _, bm := range []struct {
		name string
		opts []Option
	}{
		{"options-off", []Option{constKey}},
		{"default-key", nil},
		{"cost+hook", []Option{constKey, WithCost(func(*http.Request) int { return 1 }), WithLimitedHook(func(*http.Request, string, Decision) {})}},
		{"ratelimit-fields", []Option{constKey, WithRateLimitFields("")}},
	} {
		b.Run(bm.name, func(b *testing.B) {
			h := Limit(1e9, 1e9, bm.opts...)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
			r := httptest.NewRequest("GET", "/", nil)
			r.RemoteAddr = "192.0.2.1:1234"
			w := newTestWriter()
			b.ReportAllocs()
			for b.Loop() {
				h.ServeHTTP(w, r)
			}
		})
	}
}

func BenchmarkRefusedBodies(b *testing.B) {
	constKey := WithKeyFunc(func(*http.Request) (string, error) { return "192.0.2.1", nil })
	for _, bm := range []struct {
		name   string
		opts   []Option
		accept string
	}{
		{"plain", []Option{constKey}, ""},
		{"problem-fallback", []Option{constKey, WithProblemDetails(ProblemDetails{})}, "text/html"},
		{"problem-json", []Option{constKey, WithProblemDetails(ProblemDetails{})}, "application/problem+json"},
	} {
		b.Run(bm.name, func(b *testing.B) {
			clk := newClock(t0)
			h := Limit(rate.Every(time.Hour), 1, append(bm.opts, WithClock(clk.Now))...)(ok)
			r := httptest.NewRequest("GET", "/", nil)
			if bm.accept != "" {
				r.Header.Set("Accept", bm.accept)
			}
			w := newTestWriter()
			h.ServeHTTP(w, r)
			b.ReportAllocs()
			for b.Loop() {
				h.ServeHTTP(w, r)
			}
		})
	}
}

// TestDefaultKeyIgnoresForwardingHeaders plays a client that writes a new forwarding header on
// every request, hoping to be counted as someone else each time: with the default key it is one
// client, its RemoteAddr, and is limited after its burst.
func TestDefaultKeyIgnoresForwardingHeaders(t *testing.T) {
	clk := newClock(t0)
	h := Limit(rate.Every(time.Minute), 3, WithClock(clk.Now))(ok)
	admitted := 0
	for i := range 100 {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = "203.0.113.9:" + fmt.Sprint(1024+i)
		spoof := fmt.Sprintf("198.51.100.%d", i%250)
		r.Header.Set("X-Forwarded-For", spoof)
		r.Header.Set("X-Real-IP", spoof)
		r.Header.Set("Forwarded", "for="+spoof)
		r.Header.Set("True-Client-IP", spoof)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code == http.StatusOK {
			admitted++
		}
	}
	if admitted != 3 {
		t.Fatalf("%d of 100 requests with rotating forwarding headers admitted, want the burst of 3", admitted)
	}
}

// blockingLimiter is a store that answers only when the request's context ends, with its error,
// as a Redis round trip does when the client hangs up.
type blockingLimiter struct{}

func (blockingLimiter) Decide(ctx context.Context, _ string, _ int, _ time.Time) (Decision, error) {
	<-ctx.Done()
	return Decision{}, ctx.Err()
}

// TestEndedRequestNotAdmitted checks that a request whose own context ended while the limiter
// decided (the client hung up, or a deadline passed) is never admitted by failing open, and is
// not reported to the error hook as the store's failure.
func TestEndedRequestNotAdmitted(t *testing.T) {
	for _, open := range []bool{false, true} {
		var served, hooked atomic.Int64
		h := LimitWith(blockingLimiter{}, WithFailOpen(open), WithErrorHook(func(*http.Request, error) { hooked.Add(1) }))(
			http.HandlerFunc(func(http.ResponseWriter, *http.Request) { served.Add(1) }))
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		r := httptest.NewRequest("POST", "/", strings.NewReader("x")).WithContext(ctx)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if served.Load() != 0 || hooked.Load() != 0 {
			t.Fatalf("fail open %v: served %d, error hook %d, want neither", open, served.Load(), hooked.Load())
		}
		if w.Code != http.StatusServiceUnavailable {
			t.Fatalf("fail open %v: status %d, want 503", open, w.Code)
		}
	}
}

// TestHangUpOverTheWire sends POSTs over loopback and closes each connection while the limiter
// waits, as a client over its limit that hangs up does: none reaches the handler.
func TestHangUpOverTheWire(t *testing.T) {
	var served atomic.Int64
	entered := make(chan struct{}, 1)
	lim := limiterFunc(func(ctx context.Context) (Decision, error) {
		entered <- struct{}{}
		<-ctx.Done()
		return Decision{}, ctx.Err()
	})
	srv := httptest.NewServer(LimitWith(lim, WithFailOpen(true))(
		http.HandlerFunc(func(http.ResponseWriter, *http.Request) { served.Add(1) })))
	defer srv.Close()
	for range 20 {
		conn, err := net.Dial("tcp", srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(conn, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
		<-entered
		conn.Close()
	}
	srv.Close() // waits for the handlers
	if n := served.Load(); n != 0 {
		t.Fatalf("%d of 20 requests whose client hung up reached the handler", n)
	}
}

// limiterFunc is a Limiter from a function of the request's context.
type limiterFunc func(ctx context.Context) (Decision, error)

func (f limiterFunc) Decide(ctx context.Context, _ string, _ int, _ time.Time) (Decision, error) {
	return f(ctx)
}

// TestUserPanicsHoldNoLock makes each function of a user's that the middleware calls panic once,
// recovers the panic as net/http does, and checks that the next requests, on the same key and
// on every other, are decided as before: no user code runs under a lock of the package.
func TestUserPanicsHoldNoLock(t *testing.T) {
	for _, where := range []string{"key", "cost", "limited hook", "responder", "error hook"} {
		t.Run(where, func(t *testing.T) {
			var armed atomic.Bool
			armed.Store(true)
			boom := func(at string) {
				if at == where && armed.CompareAndSwap(true, false) {
					panic("user code panicked in " + at)
				}
			}
			clk := newClock(t0)
			opts := []Option{
				WithClock(clk.Now),
				WithKeyFunc(func(r *http.Request) (string, error) {
					boom("key")
					if where == "error hook" {
						return "", errors.New("no key")
					}
					return r.RemoteAddr, nil
				}),
				WithCost(func(*http.Request) int { boom("cost"); return 1 }),
				WithLimitedHook(func(*http.Request, string, Decision) { boom("limited hook") }),
				WithErrorHook(func(*http.Request, error) { boom("error hook") }),
				WithResponder(func(w http.ResponseWriter, r *http.Request, f Refusal) {
					boom("responder")
					w.WriteHeader(f.Status)
				}),
			}
			h := Limit(rate.Every(time.Minute), 1, opts...)(ok)
			done := make(chan struct{})
			go func() {
				defer close(done)
				for range 3 {
					func() {
						defer func() { recover() }()
						serve(h, "GET", "192.0.2.1:1")
					}()
				}
				for i := range 200 { // every part of the table
					serve(h, "GET", fmt.Sprintf("192.0.2.%d:1", i))
				}
			}()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatalf("requests hang after user code panicked in the %s", where)
			}
			if armed.Load() {
				t.Fatalf("the %s was never called", where)
			}
		})
	}
}
