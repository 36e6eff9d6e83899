package retryafter

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/time/rate"
)

func TestAcceptsProblem(t *testing.T) {
	tests := []struct {
		accept string // "-" for no Accept field
		anyOK  bool
		want   bool
	}{
		{"application/problem+json", false, true},
		{"Application/Problem+JSON", false, true},
		{"application/*", false, true},
		{"application/json, application/problem+json;q=0.9", false, true},
		{"application/json", false, false},
		{"text/plain", false, false},
		{"text/html, application/problem+json;q=0.5", false, true},
		{"text/plain, application/problem+json;q=0.5", false, false},
		{"text/plain;q=0.5, application/problem+json", false, true},
		{"text/plain, application/problem+json", false, true}, // a tie goes to the named type
		{"application/problem+json;q=0", false, false},
		{"application/problem+json;q=0, */*", true, false}, // the most specific range decides
		{"application/*;q=0.2, application/problem+json;q=0", false, false},
		{"application/*;q=0, application/problem+json;q=0.2", false, true},
		{"application/problem+json; charset=utf-8; q=0.8", false, true},
		{"application/problem+json;Q=0.8", false, true},
		{"application/problem+json;q=2", false, false}, // not a qvalue: ignored
		{"application/problem+json;q=0.1234", false, false},
		{"application/problem+json;q=1.000", false, true},
		{"application/problem+json;q=1.001", false, false},
		{"*/*", false, false},
		{"*/*", true, true},
		{"*/*, text/plain", true, true},
		{"*/*;q=0.1, text/plain", true, false},
		{"-", false, false},
		{"-", true, true},
		{"", false, false},
		{",,, ;q=1, application", false, false},
		{"text/plain;q=0.5, , application/problem+json", false, true},   // an empty element is skipped
		{"text/plain;q=2, application/problem+json;q=0.5", false, true}, // so is a range with a bad q
		{"application/problem+json;charset=utf-8;q=0", false, false},    // q after another parameter
		{"application/problem+json;q=0.00:", false, false},
		// A range named twice counts with its first weight (RFC 9110 leaves it open).
		{"application/problem+json;q=0, application/problem+json", false, false},
		{"text/plain, text/plain;q=0, application/problem+json;q=0.5", false, false},
	}
	for _, tt := range tests {
		var lines []string
		if tt.accept != "-" {
			lines = []string{tt.accept}
		}
		if got := acceptsProblem(lines, tt.anyOK); got != tt.want {
			t.Errorf("acceptsProblem(%q, anyOK=%v) = %v, want %v", tt.accept, tt.anyOK, got, tt.want)
		}
	}
	// Several Accept lines are one list.
	if !acceptsProblem([]string{"text/html", "application/problem+json"}, false) {
		t.Error("a second Accept line was not read")
	}
}

func TestQvalue(t *testing.T) {
	for v, want := range map[string]int{"0": 0, "1": 1000, "0.5": 500, "0.05": 50, "0.001": 1, "1.0": 1000, "0.": 0, "1.": 1000} {
		if got, ok := qvalue(v); !ok || got != want {
			t.Errorf("qvalue(%q) = %d, %v, want %d", v, got, ok, want)
		}
	}
	for _, v := range []string{"", "2", "-1", ".5", "0.5000", "1.5", "0,5", "0.a", "1e0", "00", "0.00/", "0.00:"} {
		if _, ok := qvalue(v); ok {
			t.Errorf("qvalue(%q) accepted", v)
		}
	}
}

func TestAcceptsProblemAllocs(t *testing.T) {
	accept := []string{"text/html, application/xhtml+xml, application/xml;q=0.9, */*;q=0.8"}
	if n := testing.AllocsPerRun(100, func() { acceptsProblem(accept, false) }); n != 0 {
		t.Fatalf("%v allocations", n)
	}
}

type problemBody struct {
	Type       string   `json:"type"`
	Title      string   `json:"title"`
	Status     int      `json:"status"`
	Detail     string   `json:"detail"`
	RetryAfter *int64   `json:"retry-after"`
	Violated   []string `json:"violated-policies"`
}

func decodeProblem(t *testing.T, w *httptest.ResponseRecorder) problemBody {
	t.Helper()
	if ct := w.Header().Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type = %q, body %q", ct, w.Body.String())
	}
	var p problemBody
	dec := json.NewDecoder(w.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		t.Fatalf("body is not a problem object: %v", err)
	}
	if p.Status != w.Code {
		t.Fatalf("status member %d, response %d", p.Status, w.Code)
	}
	return p
}

func serveAccept(h http.Handler, method, accept string) *httptest.ResponseRecorder {
	return serveWith(h, method, "192.0.2.1:1", "Accept", accept)
}

// TestProblemDetailsMiddleware checks each refusal the middleware writes as a problem object:
// the retry-after member is the Retry-After field, the error text never shows, and a client that
// does not ask gets the plain text it got before.
func TestProblemDetailsMiddleware(t *testing.T) {
	secret := errors.New("secret: redis at 10.0.0.1 said NOAUTH")
	badKey := WithKeyFunc(func(*http.Request) (string, error) { return "", secret })
	tests := []struct {
		name       string
		limiter    Limiter
		opts       []Option
		status     int
		retryAfter int64 // 0: none
		detail     string
	}{
		{"429", &fakeLimiter{d: Decision{RetryAfter: 7200 * time.Millisecond}}, nil, 429, 8, "retry in 8 seconds"},
		{"429 of one second", &fakeLimiter{d: Decision{RetryAfter: time.Millisecond}}, nil, 429, 1, "retry in 1 second."},
		{"429 never admitted", &fakeLimiter{d: Decision{RetryAfter: rate.InfDuration}}, nil, 429, 0, "never be admitted"},
		{"503 from a limiter that failed", failingLimiter{secret}, nil, 503, 1, "unavailable; retry in 1 second"},
		{"500 from a key function that failed", &fakeLimiter{}, []Option{badKey}, 500, 0, "could not be processed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newClock(t0)
			opts := append([]Option{WithClock(clk.Now), WithProblemDetails(ProblemDetails{})}, tt.opts...)
			h := LimitWith(tt.limiter, opts...)(ok)

			w := serveAccept(h, "GET", "application/problem+json")
			p := decodeProblem(t, w)
			if w.Code != tt.status || p.Type != "about:blank" || p.Title != http.StatusText(tt.status) {
				t.Fatalf("got %d %+v", w.Code, p)
			}
			if !strings.Contains(p.Detail, tt.detail) || strings.Contains(w.Body.String(), "secret") {
				t.Fatalf("detail %q, want it to say %q and nothing of the error", p.Detail, tt.detail)
			}
			if want := map[bool][]string{true: {"default"}}[tt.status == 429]; !slices.Equal(p.Violated, want) {
				t.Fatalf("violated-policies %q, want %q", p.Violated, want)
			}
			if tt.retryAfter == 0 {
				if p.RetryAfter != nil || w.Header().Get("Retry-After") != "" {
					t.Fatalf("retry-after %v, Retry-After %q, want neither", p.RetryAfter, w.Header().Get("Retry-After"))
				}
			} else {
				wait := wantRefusal(t, w, tt.status, clk.Now())
				if p.RetryAfter == nil || *p.RetryAfter != tt.retryAfter || time.Duration(*p.RetryAfter)*time.Second != wait {
					t.Fatalf("retry-after member %v, Retry-After %v, want %d both", p.RetryAfter, wait, tt.retryAfter)
				}
			}
			if v := w.Header().Values("Vary"); len(v) != 1 || v[0] != "Accept" {
				t.Fatalf("Vary = %q", v)
			}

			w = serveAccept(h, "GET", "text/html,*/*;q=0.8")
			if w.Code != tt.status || w.Header().Get("Content-Type") != "text/plain; charset=utf-8" ||
				w.Body.String() != http.StatusText(tt.status)+"\n" {
				t.Fatalf("a browser got %d %q %q", w.Code, w.Header().Get("Content-Type"), w.Body.String())
			}

			w = serveAccept(h, "HEAD", "application/problem+json")
			if w.Code != tt.status || w.Body.Len() != 0 || w.Header().Get("Content-Type") != "application/problem+json" {
				t.Fatalf("HEAD got %d %q", w.Code, w.Body.String())
			}
		})
	}
}

func TestProblemDetailsOptions(t *testing.T) {
	quota := func(status int) (string, string) {
		if status == http.StatusTooManyRequests {
			return "https://iana.org/assignments/http-problem-types#quota-exceeded", "Quota Exceeded"
		}
		return "", ""
	}
	fl := &fakeLimiter{d: Decision{RetryAfter: 2 * time.Second}}

	h := LimitWith(fl, WithProblemDetails(ProblemDetails{Always: true, Type: quota}))(ok)
	w := serveAccept(h, "GET", "text/plain")
	p := decodeProblem(t, w)
	if p.Type != "https://iana.org/assignments/http-problem-types#quota-exceeded" || p.Title != "Quota Exceeded" {
		t.Fatalf("Always with a Type: %+v", p)
	}
	if v := w.Header().Get("Vary"); v != "" {
		t.Fatalf("Always varies on nothing, but Vary = %q", v)
	}

	h = LimitWith(failingLimiter{errTest}, WithProblemDetails(ProblemDetails{Type: quota}))(ok)
	if p := decodeProblem(t, serveAccept(h, "GET", "application/*")); p.Type != "about:blank" || p.Title != "Service Unavailable" {
		t.Fatalf("a status Type leaves alone: %+v", p)
	}

	h = LimitWith(fl, WithProblemDetails(ProblemDetails{AcceptAny: true}))(ok)
	decodeProblem(t, serveAccept(h, "GET", ""))
	decodeProblem(t, serveAccept(h, "GET", "*/*"))

	// The Responder seam: the last of WithResponder and WithProblemDetails wins.
	h = LimitWith(fl, WithProblemDetails(ProblemDetails{Always: true}), WithResponder(writeRefusal))(ok)
	if w := serveAccept(h, "GET", "application/problem+json"); w.Header().Get("Content-Type") != "text/plain; charset=utf-8" {
		t.Fatalf("WithResponder after WithProblemDetails did not win")
	}
}

// TestProblemDetailsJSONEscaping checks that a Type with characters JSON must escape still
// yields valid JSON.
func TestProblemDetailsJSONEscaping(t *testing.T) {
	odd := func(int) (string, string) { return `https://example.com/p?a="b"&c=\d`, "Ti\"tle\n<x>" }
	h := LimitWith(&fakeLimiter{d: Decision{RetryAfter: time.Second}}, WithProblemDetails(ProblemDetails{Always: true, Type: odd}))(ok)
	p := decodeProblem(t, serveAccept(h, "GET", ""))
	if uri, title := odd(0); p.Type != uri || p.Title != title {
		t.Fatalf("round trip: %+v", p)
	}
}

// TestPlainTextAllocs checks that the default Responder, and ProblemDetails falling back to it
// for a client that does not ask for problem details, allocate only the one array that holds
// the response's own header values; and so does a whole refusal, with a wait of up to an hour.
func TestPlainTextAllocs(t *testing.T) {
	w := newTestWriter()
	r := httptest.NewRequest("GET", "/", nil)
	r.Header.Set("Accept", "text/html, */*;q=0.8")
	pd := ProblemDetails{}
	for name, respond := range map[string]Responder{"default": writeRefusal, "ProblemDetails fallback": pd.Respond} {
		respond(w, r, Refusal{Status: 429, RetryAfter: time.Second}) // let Vary be set once
		if n := testing.AllocsPerRun(100, func() { respond(w, r, Refusal{Status: 429, RetryAfter: time.Second}) }); n > 1 {
			t.Errorf("%s: %v allocations", name, n)
		}
	}
	for _, wait := range []time.Duration{time.Second, 99 * time.Second, 100 * time.Second, time.Hour} {
		w := newTestWriter()
		if n := testing.AllocsPerRun(100, func() { Refuse(w, r, Refusal{Status: 429, RetryAfter: wait}, nil, t0) }); n > 1 {
			t.Errorf("a refusal with a wait of %v: %v allocations", wait, n)
		}
	}
}

// TestProblemDetailsWithoutWait checks the problem object of a refusal that has no Retry-After:
// it has no retry-after member, and its detail does not tell the client to retry in 0 seconds.
func TestProblemDetailsWithoutWait(t *testing.T) {
	pd := ProblemDetails{Always: true}
	for _, status := range []int{http.StatusTooManyRequests, http.StatusServiceUnavailable, http.StatusInternalServerError, http.StatusForbidden} {
		w := httptest.NewRecorder()
		pd.Respond(w, httptest.NewRequest("GET", "/", nil), Refusal{Status: status})
		if p := decodeProblem(t, w); p.RetryAfter != nil || strings.Contains(p.Detail, "retry in") {
			t.Fatalf("status %d without a wait: %+v", status, p)
		}
	}
}
