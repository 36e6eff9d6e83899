package retryafter

import (
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/time/rate"
)

var updateRefusals = flag.Bool("update-refusals", false, "rewrite testdata/refusals.golden from the code under test")

// TestRefusalsUnchanged writes every kind of refusal the package makes (the limiter's 429, a
// request that can never be admitted, a limiter and a key function that fail, a Concurrency at
// its limit, a Maintenance), each to a plain request, to one that asks for problem details from
// a cross-origin script, and to a HEAD, through the default responder and through
// ProblemDetails, and compares the whole responses (status, every header field, body) with
// testdata/refusals.golden, which the code before the Refusal type wrote: what clients receive
// did not change with it.
func TestRefusalsUnchanged(t *testing.T) {
	now := func() time.Time { return t0 }
	pd := ProblemDetails{}
	typed := ProblemDetails{Type: func(status int) (string, string) {
		if status == http.StatusTooManyRequests {
			return "https://example.com/probs/quota", "Quota exceeded"
		}
		return "", ""
	}}
	tb := func(limit rate.Limit, burst int) Limiter { return NewTokenBucket(limit, burst) }
	named := func(name string, limit rate.Limit, burst int) Limiter {
		return NewTokenBucket(limit, burst, WithPolicyFunc(func(string) Policy {
			return Policy{Name: name, Limit: limit, Burst: burst}
		}))
	}
	badKey := func(*http.Request) (string, error) { return "", errors.New("no key") }
	limit := func(l Limiter, opts ...Option) http.Handler {
		return LimitWith(l, append([]Option{WithClock(now)}, opts...)...)(ok)
	}
	cases := []struct {
		name  string
		h     func() http.Handler
		first bool // a first request spends the burst before the refused one
	}{
		{"limit plain", func() http.Handler { return limit(tb(rate.Every(10*time.Second), 1)) }, true},
		{"limit long wait", func() http.Handler { return limit(tb(rate.Every(time.Hour), 1)) }, true},
		{"limit problem fields", func() http.Handler {
			return limit(tb(rate.Every(10*time.Second), 2), WithProblemDetails(pd), WithRateLimitFields("api"), WithLegacyRateLimitFields(true))
		}, true},
		{"limit problem typed", func() http.Handler {
			return limit(tb(rate.Every(10*time.Second), 1), WithProblemDetails(typed))
		}, true},
		{"all problem fields", func() http.Handler {
			return limit(All(named("second", 1, 1), named("minute", rate.Every(time.Minute), 1)), WithProblemDetails(ProblemDetails{AcceptAny: true}), WithRateLimitFields(""))
		}, true},
		{"never plain", func() http.Handler { return limit(tb(0, 1)) }, true},
		{"never problem", func() http.Handler { return limit(tb(0, 1), WithProblemDetails(pd)) }, true},
		{"limiter error plain", func() http.Handler { return limit(failingLimiter{errTest}) }, false},
		{"limiter error problem", func() http.Handler { return limit(failingLimiter{errTest}, WithProblemDetails(pd)) }, false},
		{"key error plain", func() http.Handler { return limit(tb(1, 1), WithKeyFunc(badKey)) }, false},
		{"key error problem", func() http.Handler { return limit(tb(1, 1), WithKeyFunc(badKey), WithProblemDetails(pd)) }, false},
		{"concurrency plain", func() http.Handler { return concurrencyRefusal(&Concurrency{Max: 1, Now: now}) }, false},
		{"concurrency problem", func() http.Handler {
			return concurrencyRefusal(&Concurrency{Max: 1, Now: now, Respond: pd.Respond})
		}, false},
		{"concurrency key error", func() http.Handler {
			return (&Concurrency{Max: 1, MaxPerKey: 1, Key: badKey, Now: now, Respond: pd.Respond}).Handler(ok)
		}, false},
		{"maintenance plain", func() http.Handler { return maintenanceRefusal(&Maintenance{Now: now}) }, false},
		{"maintenance problem", func() http.Handler { return maintenanceRefusal(&Maintenance{Now: now, Respond: pd.Respond}) }, false},
		{"maintenance date", func() http.Handler {
			return maintenanceRefusal(&Maintenance{Now: now, HTTPDate: true, Respond: pd.Respond})
		}, false},
	}
	variants := []struct {
		name string
		req  func() *http.Request
	}{
		{"GET", func() *http.Request { return newRequest(http.MethodGet, "192.0.2.1:1234") }},
		{"GET problem cross-origin", func() *http.Request {
			return newRequest(http.MethodGet, "192.0.2.1:1234", "Accept", "application/problem+json", "Origin", "https://app.example")
		}},
		{"HEAD", func() *http.Request { return newRequest(http.MethodHead, "192.0.2.1:1234") }},
	}
	var b strings.Builder
	for _, c := range cases {
		for _, v := range variants {
			h := c.h()
			if c.first {
				serveRequest(h, v.req())
			}
			fmt.Fprintf(&b, "=== %s, %s\n%s\n", c.name, v.name, dumpResponse(serveRequest(h, v.req())))
		}
	}
	const golden = "testdata/refusals.golden"
	if *updateRefusals {
		if err := os.WriteFile(golden, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if got := b.String(); got != string(want) {
		gl, wl := strings.Split(got, "\n"), strings.Split(string(want), "\n")
		for i := range min(len(gl), len(wl)) {
			if gl[i] != wl[i] {
				t.Fatalf("responses differ from %s at line %d:\n got %q\nwant %q", golden, i+1, gl[i], wl[i])
			}
		}
		t.Fatalf("responses differ from %s in length: %d lines, want %d", golden, len(gl), len(wl))
	}
}

// concurrencyRefusal returns a handler whose request, admitted by c with its one slot, makes a
// second one that c refuses, and answers with the refusal.
func concurrencyRefusal(c *Concurrency) http.Handler {
	var h http.Handler
	h = c.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Inner") != "" {
			w.WriteHeader(http.StatusOK)
			return
		}
		inner := r.Clone(r.Context())
		inner.Header.Set("X-Inner", "1")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, inner)
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		w.Write(rec.Body.Bytes())
	}))
	return h
}

// maintenanceRefusal returns m's handler, in maintenance for an hour from t0.
func maintenanceRefusal(m *Maintenance) http.Handler {
	m.Start(t0.Add(time.Hour))
	return m.Handler(ok)
}

// dumpResponse returns w's status, header fields in order of name, and body.
func dumpResponse(w *httptest.ResponseRecorder) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d\n", w.Code)
	names := make([]string, 0, len(w.Header()))
	for k := range w.Header() {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		fmt.Fprintf(&b, "%s: %q\n", k, w.Header()[k])
	}
	fmt.Fprintf(&b, "body %q\n", w.Body.String())
	return b.String()
}

// TestResponderToldRefusal checks what a Responder of the user's is told: the status, the wait
// Retry-After states, the problem type of a Concurrency at its limit, and the policies a
// refusal of the limiter violated, which only WithProblemDetails was told before.
func TestResponderToldRefusal(t *testing.T) {
	now := func() time.Time { return t0 }
	var got Refusal
	record := func(w http.ResponseWriter, r *http.Request, f Refusal) {
		got = f
		w.WriteHeader(f.Status)
	}
	named := func(name string, limit rate.Limit) Limiter {
		return NewTokenBucket(limit, 1, WithPolicyFunc(func(string) Policy { return Policy{Name: name} }))
	}
	h := LimitWith(All(named("second", 1), named("minute", rate.Every(time.Minute))), WithClock(now), WithResponder(record))(ok)
	serve(h, "GET", "192.0.2.1:1")
	serve(h, "GET", "192.0.2.1:1")
	if want := []string{"second", "minute"}; got.Status != 429 || got.RetryAfter != time.Minute || got.Type != "" || !slices.Equal(got.Violated, want) {
		t.Errorf("limiter's refusal: %+v, want 429, 1m0s, no type, violated %q", got, want)
	}
	serveRequest(concurrencyRefusal(&Concurrency{Max: 1, Now: now, Respond: record}), newRequest("GET", "192.0.2.1:1"))
	if got.Status != 503 || got.RetryAfter != time.Second || got.Type != ProblemReducedCapacity || got.Violated != nil {
		t.Errorf("Concurrency's refusal: %+v, want 503, 1s, %s, none violated", got, ProblemReducedCapacity)
	}
	serve(maintenanceRefusal(&Maintenance{Now: now, Respond: record}), "GET", "192.0.2.1:1")
	if got.Status != 503 || got.RetryAfter != time.Hour || got.Type != "" || got.Violated != nil {
		t.Errorf("Maintenance's refusal: %+v, want 503, 1h0m0s, no type, none violated", got)
	}
}
