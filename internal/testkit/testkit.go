// Package testkit holds what the tests of several packages of this repository share: a clock
// the test moves by hand, and the round trip every refusal of the middleware is held to.
package testkit

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/retryafter/retryafter/internal/header"
)

// T0 is the instant the tests start their clocks at.
var T0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

// A Clock is a clock the test moves by hand. It is safe for concurrent use.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// NewClock returns a Clock that reads t.
func NewClock(t time.Time) *Clock { return &Clock{t: t} }

// Now returns the clock's reading.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Set sets the clock to t.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

// Advance moves the clock by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// Serve sends one request from remote (host:port) through h and returns what h answered.
func Serve(h http.Handler, method, remote string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, "/", nil)
	r.RemoteAddr = remote
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// WantRefusal checks that w is a refusal with status, a Date of now and a Retry-After that the
// strict parser reads as whole seconds, at least one, and returns the wait it states.
func WantRefusal(t testing.TB, w *httptest.ResponseRecorder, status int, now time.Time) time.Duration {
	t.Helper()
	if w.Code != status {
		t.Fatalf("status = %d, want %d", w.Code, status)
	}
	if got, want := w.Header().Get("Date"), now.UTC().Format(http.TimeFormat); got != want {
		t.Fatalf("Date = %q, want %q", got, want)
	}
	wait, ok := header.ParseRetryAfter(w.Header(), now)
	if !ok {
		t.Fatalf("Retry-After %q does not parse", w.Header().Get("Retry-After"))
	}
	if wait < time.Second || wait%time.Second != 0 {
		t.Fatalf("Retry-After %q is not a whole number of seconds >= 1", w.Header().Get("Retry-After"))
	}
	return wait
}

// RoundTrip drives one client through h on clk with the arrival pattern next and checks the
// promise on every 429: Date is the clock reading, Retry-After parses to whole seconds, a retry
// exactly that much later is admitted, and one a second earlier is not. It returns how many
// refusals it checked.
func RoundTrip(t testing.TB, h http.Handler, clk *Clock, requests int, next func() time.Duration) int {
	t.Helper()
	const client = "192.0.2.1:1234"
	refusals := 0
	for range requests {
		clk.Advance(next())
		w := Serve(h, "GET", client)
		if w.Code == http.StatusOK {
			continue
		}
		now := clk.Now()
		wait := WantRefusal(t, w, http.StatusTooManyRequests, now)
		refusals++

		clk.Set(now.Add(wait - time.Second))
		if w := Serve(h, "GET", client); w.Code != http.StatusTooManyRequests {
			t.Fatalf("refused at %v with Retry-After %v, but admitted %v later: the header is padded",
				now, wait, wait-time.Second)
		}
		clk.Set(now.Add(wait))
		if w := Serve(h, "GET", client); w.Code != http.StatusOK {
			t.Fatalf("refused at %v with Retry-After %v, and refused again (%d, Retry-After %q) after waiting exactly that",
				now, wait, w.Code, w.Header().Get("Retry-After"))
		}
	}
	return refusals
}

// RoundTripLoopback serves h on loopback, where a limit of one request every 1.5 s (a burst of
// one) on clk binds, and holds the round trip over a real connection: the first GET of path is
// admitted, the second refused 429 with a Retry-After of 2 s and a Date of clk's reading, and a
// GET once clk has moved on by exactly that wait is admitted.
func RoundTripLoopback(t testing.TB, h http.Handler, clk *Clock, path string) {
	t.Helper()
	srv := httptest.NewServer(h)
	defer srv.Close()
	get := func() *http.Response {
		t.Helper()
		resp, err := srv.Client().Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	if resp := get(); resp.StatusCode != http.StatusOK {
		t.Fatalf("first: %d", resp.StatusCode)
	}
	resp := get()
	wait, ok := header.ParseRetryAfter(resp.Header, clk.Now())
	if resp.StatusCode != http.StatusTooManyRequests || !ok || wait != 2*time.Second || resp.Header.Get("Date") != clk.Now().UTC().Format(http.TimeFormat) {
		t.Fatalf("second: %d, Retry-After %q, Date %q", resp.StatusCode, resp.Header.Get("Retry-After"), resp.Header.Get("Date"))
	}
	clk.Advance(wait)
	if resp := get(); resp.StatusCode != http.StatusOK {
		t.Fatalf("after Retry-After: %d", resp.StatusCode)
	}
}

// OK is a handler that answers 200 "ok".
var OK = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	w.Write([]byte("ok"))
})

// WantPanics runs each function and checks that it panics with a message that starts with
// prefix, as every construction-time misuse must.
func WantPanics(t testing.TB, prefix string, tests map[string]func()) {
	t.Helper()
	for name, f := range tests {
		func() {
			defer func() {
				v := recover()
				if msg, _ := v.(string); !strings.HasPrefix(msg, prefix) {
					t.Errorf("%s: recovered %#v, want a panic starting %q", name, v, prefix)
				}
			}()
			f()
		}()
	}
}

// CORS is a stand-in for CORS middleware such as github.com/go-chi/cors, allowing every origin:
// it answers a preflight itself with 204 (or, with passthrough, sets its headers and calls next,
// as go-chi/cors's OptionsPassthrough does), and sets Access-Control-Allow-Origin and
// Access-Control-Expose-Headers on the actual request before calling next.
func CORS(passthrough bool) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			origin := r.Header.Get("Origin")
			if origin == "" {
				next.ServeHTTP(w, r)
				return
			}
			h := w.Header()
			h.Set("Access-Control-Allow-Origin", origin)
			if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
				h.Set("Access-Control-Allow-Methods", r.Header.Get("Access-Control-Request-Method"))
				if passthrough {
					next.ServeHTTP(w, r)
					return
				}
				w.WriteHeader(http.StatusNoContent)
				return
			}
			h.Set("Access-Control-Expose-Headers", "X-Request-Id")
			next.ServeHTTP(w, r)
		})
	}
}

// DumpResponse returns w's status, header fields in order of name, and body, for a golden file.
func DumpResponse(w *httptest.ResponseRecorder) string {
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

// Golden compares got with the golden file, or, when update is set, writes got to it.
func Golden(t testing.TB, golden, got string, update bool) {
	t.Helper()
	if update {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		gl, wl := strings.Split(got, "\n"), strings.Split(string(want), "\n")
		for i := range min(len(gl), len(wl)) {
			if gl[i] != wl[i] {
				t.Fatalf("responses differ from %s at line %d:\n got %q\nwant %q", golden, i+1, gl[i], wl[i])
			}
		}
		t.Fatalf("responses differ from %s in length: %d lines, want %d", golden, len(gl), len(wl))
	}
}
