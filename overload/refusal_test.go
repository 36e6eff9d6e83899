package overload

import (
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/retryafter/retryafter"
	"github.com/retryafter/retryafter/internal/testkit"
)

var updateRefusals = flag.Bool("update-refusals", false, "rewrite testdata/refusals.golden from the code under test")

// TestRefusalsUnchanged writes the refusals of a Concurrency at its limit and of its key
// function failing, each to a plain request, to one that asks for problem details from a
// cross-origin script, and to a HEAD, through the default responder and through
// ProblemDetails, and compares the whole responses with testdata/refusals.golden, which the
// code wrote before Concurrency left the root package: what clients receive did not change.
func TestRefusalsUnchanged(t *testing.T) {
	now := func() time.Time { return t0 }
	pd := retryafter.ProblemDetails{}
	badKey := func(*http.Request) (string, error) { return "", errors.New("no key") }
	cases := []struct {
		name string
		h    func() http.Handler
	}{
		{"concurrency plain", func() http.Handler { return concurrencyRefusal(&Concurrency{Max: 1, Now: now}) }},
		{"concurrency problem", func() http.Handler {
			return concurrencyRefusal(&Concurrency{Max: 1, Now: now, Respond: pd.Respond})
		}},
		{"concurrency key error", func() http.Handler {
			return (&Concurrency{Max: 1, MaxPerKey: 1, Key: badKey, Now: now, Respond: pd.Respond}).Handler(ok)
		}},
	}
	variants := []struct {
		name string
		req  func() *http.Request
	}{
		{"GET", func() *http.Request { return request(http.MethodGet) }},
		{"GET problem cross-origin", func() *http.Request {
			r := request(http.MethodGet)
			r.Header.Set("Accept", "application/problem+json")
			r.Header.Set("Origin", "https://app.example")
			return r
		}},
		{"HEAD", func() *http.Request { return request(http.MethodHead) }},
	}
	var b strings.Builder
	for _, c := range cases {
		for _, v := range variants {
			w := httptest.NewRecorder()
			c.h().ServeHTTP(w, v.req())
			fmt.Fprintf(&b, "=== %s, %s\n%s\n", c.name, v.name, testkit.DumpResponse(w))
		}
	}
	testkit.Golden(t, "testdata/refusals.golden", b.String(), *updateRefusals)
}

// request returns a request for http://api.test/ from 192.0.2.1:1234.
func request(method string) *http.Request {
	r := httptest.NewRequest(method, "http://api.test/", nil)
	r.RemoteAddr = "192.0.2.1:1234"
	return r
}

// TestResponderToldRefusal checks what a Responder of the user's is told of a Concurrency's
// refusal: the status, the wait Retry-After states and the problem type, with no policy
// violated.
func TestResponderToldRefusal(t *testing.T) {
	var got retryafter.Refusal
	record := func(w http.ResponseWriter, r *http.Request, f retryafter.Refusal) {
		got = f
		w.WriteHeader(f.Status)
	}
	concurrencyRefusal(&Concurrency{Max: 1, Now: func() time.Time { return t0 }, Respond: record}).ServeHTTP(httptest.NewRecorder(), request("GET"))
	if got.Status != 503 || got.RetryAfter != time.Second || got.Type != retryafter.ProblemReducedCapacity || got.Violated != nil {
		t.Errorf("Concurrency's refusal: %+v, want 503, 1s, %s, none violated", got, retryafter.ProblemReducedCapacity)
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
