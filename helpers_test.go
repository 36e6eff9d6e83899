package retryafter

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/retryafter/retryafter/internal/header"
	"github.com/retryafter/retryafter/internal/testkit"
)

// The clock and the round trip are shared with the other packages' tests.
var (
	t0             = testkit.T0
	newClock       = testkit.NewClock
	wantRefusal    = testkit.WantRefusal
	checkRoundTrip = testkit.RoundTrip
)

// ok is a handler that answers 200 "ok".
var ok = testkit.OK

// writeRefusal is the default plain text as a [Responder].
func writeRefusal(w http.ResponseWriter, r *http.Request, f Refusal) {
	writePlain(w, w.Header(), r, f.Status, new(header.Few))
}

// serve sends one request from remote (host:port) through h and returns what h answered.
func serve(h http.Handler, method, remote string) *httptest.ResponseRecorder {
	return serveWith(h, method, remote, "", "")
}

// serveWith is serve with one request header field, name: value, unless value is empty.
func serveWith(h http.Handler, method, remote, name, value string) *httptest.ResponseRecorder {
	if value == "" {
		return serveRequest(h, newRequest(method, remote))
	}
	return serveRequest(h, newRequest(method, remote, name, value))
}

// newRequest is the tests' one request builder: a request for http://api.test/ from remote
// (host:port) with the given header name/value pairs, added in order, so that a name given twice
// makes two header lines.
func newRequest(method, remote string, kv ...string) *http.Request {
	r := httptest.NewRequest(method, "http://api.test/", nil)
	r.RemoteAddr = remote
	for i := 0; i+1 < len(kv); i += 2 {
		r.Header.Add(kv[i], kv[i+1])
	}
	return r
}

// serveRequest sends r through h and returns what h answered.
func serveRequest(h http.Handler, r *http.Request) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// wantPanics runs each function and checks that it panics with a message that starts with the
// package's prefix, as every construction-time misuse must.
func wantPanics(t *testing.T, tests map[string]func()) {
	t.Helper()
	testkit.WantPanics(t, "retryafter: ", tests)
}

// testWriter is the one ResponseWriter double of the tests and benchmarks: it records the
// status, discards the body, and keeps its header map between requests unless reset, so that a
// benchmark measures the middleware and not the writer.
type testWriter struct {
	h    http.Header
	code int
}

func newTestWriter() *testWriter { return &testWriter{h: make(http.Header)} }

func (w *testWriter) Header() http.Header { return w.h }

func (w *testWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	return len(p), nil
}

// WriteString is there because net/http's own ResponseWriter has it: io.WriteString then
// writes a string without converting it to a []byte.
func (w *testWriter) WriteString(s string) (int, error) { return w.Write(nil) }

// reset forgets the last response's header and status.
func (w *testWriter) reset() {
	clear(w.h)
	w.code = 0
}

// plain returns d without its layers, for comparing Decisions by value.
func plain(d Decision) Decision {
	return Decision{Allowed: d.Allowed, RetryAfter: d.RetryAfter, Limit: d.Limit, Remaining: d.Remaining, Reset: d.Reset, Policy: d.Policy}
}
