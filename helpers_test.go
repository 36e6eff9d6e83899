package retryafter

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// t0 is the instant the tests start their clocks at.
var t0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

// fakeClock is a clock the test moves by hand. It is safe for concurrent use.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock(t time.Time) *fakeClock { return &fakeClock{t: t} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// ok is a handler that answers 200 "ok".
var ok = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	w.Write([]byte("ok"))
})

// serve sends one request from remote (host:port) through h and returns what h answered.
func serve(h http.Handler, method, remote string) *httptest.ResponseRecorder {
	return serveWith(h, method, remote, "", "")
}

// serveWith is serve with one request header field, name: value, unless value is empty.
func serveWith(h http.Handler, method, remote, name, value string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, "/", nil)
	r.RemoteAddr = remote
	if value != "" {
		r.Header.Set(name, value)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// wantRefusal checks that w is a refusal with status, a Date of now and a Retry-After that
// ParseRetryAfter reads, and returns the wait it states.
func wantRefusal(t *testing.T, w *httptest.ResponseRecorder, status int, now time.Time) time.Duration {
	t.Helper()
	if w.Code != status {
		t.Fatalf("status = %d, want %d", w.Code, status)
	}
	if got, want := w.Header().Get("Date"), now.UTC().Format(http.TimeFormat); got != want {
		t.Fatalf("Date = %q, want %q", got, want)
	}
	wait, ok := ParseRetryAfter(w.Header(), now)
	if !ok {
		t.Fatalf("Retry-After %q does not parse", w.Header().Get("Retry-After"))
	}
	if wait < time.Second || wait%time.Second != 0 {
		t.Fatalf("Retry-After %q is not a whole number of seconds >= 1", w.Header().Get("Retry-After"))
	}
	return wait
}

// withQuota turns on the Decision's quota fields, as the RateLimit field options do.
func withQuota() Option { return func(c *config) { c.quota = true } }

// wantPanics runs each function and checks that it panics with a message that starts with the
// package's prefix, as every construction-time misuse must.
func wantPanics(t *testing.T, tests map[string]func()) {
	t.Helper()
	for name, f := range tests {
		func() {
			defer func() {
				v := recover()
				if msg, _ := v.(string); !strings.HasPrefix(msg, "retryafter: ") {
					t.Errorf("%s: recovered %#v, want a panic starting %q", name, v, "retryafter: ")
				}
			}()
			f()
		}()
	}
}
