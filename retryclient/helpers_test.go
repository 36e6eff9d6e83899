package retryclient

import (
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// t0 is the instant the tests start their clocks at.
var t0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

// The three HTTP-date layouts of RFC 9110 §5.6.7, as time.Format writes them
// for a UTC instant.
const (
	layoutIMF    = http.TimeFormat                  // Sun, 06 Nov 1994 08:49:37 GMT
	layoutRFC850 = "Monday, 02-Jan-06 15:04:05 GMT" // Sunday, 06-Nov-94 08:49:37 GMT
	layoutASC    = time.ANSIC                       // Sun Nov  6 08:49:37 1994
)

var dateLayouts = []struct{ name, layout string }{
	{"IMF-fixdate", layoutIMF},
	{"RFC 850", layoutRFC850},
	{"asctime", layoutASC},
}

// ok is a handler that answers 200 "ok".
var ok = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	w.Write([]byte("ok"))
})

// constRand returns a Rand that always returns r.
func constRand(r float64) func() float64 { return func() float64 { return r } }

// respWith returns a response with status and header lines given as
// alternating names and values.
func respWith(status int, kv ...string) *http.Response {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return &http.Response{StatusCode: status, Header: h, Body: io.NopCloser(strings.NewReader(""))}
}

// spyBody is a response body that records how much was read and whether
// it was closed.
type spyBody struct {
	mu     sync.Mutex
	r      io.Reader
	read   int
	closed bool
}

func (b *spyBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return 0, errors.New("read after close")
	}
	n, err := b.r.Read(p)
	b.read += n
	return n, err
}

func (b *spyBody) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	return nil
}

func (b *spyBody) state() (read int, closed bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.read, b.closed
}

// triedRequest is what the fake server saw of one try.
type triedRequest struct {
	at     time.Duration // since the fake was made
	req    *http.Request
	body   string
	status int
	resp   *spyBody
}

// scriptedServer is an http.RoundTripper that answers with a script of
// responses, one per try, the last one repeated, and records every try. Its
// clock is whatever time.Now says, which inside a synctest bubble is fake.
type scriptedServer struct {
	start   time.Time
	script  []func(now time.Time) *http.Response
	bodyLen int // length of each response body
	err     error

	mu    sync.Mutex
	tries []triedRequest
}

func newScriptedServer(script ...func(now time.Time) *http.Response) *scriptedServer {
	return &scriptedServer{start: time.Now(), script: script, bodyLen: 100}
}

func (f *scriptedServer) RoundTrip(req *http.Request) (*http.Response, error) {
	now := time.Now()
	var body []byte
	if req.Body != nil {
		body, _ = io.ReadAll(req.Body)
		req.Body.Close()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		f.tries = append(f.tries, triedRequest{at: now.Sub(f.start), req: req, body: string(body)})
		return nil, f.err
	}
	resp := f.script[min(len(f.tries), len(f.script)-1)](now)
	tb := &spyBody{r: strings.NewReader(strings.Repeat("x", f.bodyLen))}
	resp.Body = tb
	resp.Request = req
	f.tries = append(f.tries, triedRequest{at: now.Sub(f.start), req: req, body: string(body), status: resp.StatusCode, resp: tb})
	return resp, nil
}

func (f *scriptedServer) log() []triedRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]triedRequest(nil), f.tries...)
}

// answerTooMany answers 429 with Retry-After: secs and a Date from the fake clock.
func answerTooMany(secs int) func(time.Time) *http.Response {
	return func(now time.Time) *http.Response {
		return respWith(http.StatusTooManyRequests,
			"Date", now.UTC().Format(http.TimeFormat),
			"Retry-After", strconv.Itoa(secs))
	}
}

// answerUnavailableUntil answers 503 with Retry-After: now+d as an HTTP-date in
// layout, and a Date in the same layout.
func answerUnavailableUntil(d time.Duration, layout string) func(time.Time) *http.Response {
	return func(now time.Time) *http.Response {
		now = now.UTC()
		return respWith(http.StatusServiceUnavailable,
			"Date", now.Format(layout),
			"Retry-After", now.Add(d).Format(layout))
	}
}

func answer(code int) func(time.Time) *http.Response {
	return func(time.Time) *http.Response { return respWith(code) }
}

func tryOffsets(tries []triedRequest) []time.Duration {
	var at []time.Duration
	for _, a := range tries {
		at = append(at, a.at)
	}
	return at
}

func sameDurations(a, b []time.Duration) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

type transportFunc func(*http.Request) (*http.Response, error)

func (f transportFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func newTestRequest(t *testing.T, method string, body io.Reader) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, "http://example.test/", body)
	if err != nil {
		t.Fatal(err)
	}
	return req
}
