package retryafter

import (
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/retryafter/retryafter/internal/header"
)

// exposedNames returns the names listed in h's Access-Control-Expose-Headers, in order.
func exposedNames(h http.Header) []string {
	var names []string
	for _, line := range h.Values("Access-Control-Expose-Headers") {
		for _, n := range strings.Split(line, ",") {
			if n = strings.Trim(n, " \t"); n != "" {
				names = append(names, n)
			}
		}
	}
	return names
}

func TestExpose(t *testing.T) {
	tests := []struct {
		name  string
		have  []string
		creds string
		want  []string // nil: the header is left as it was
	}{
		{"none yet", nil, "", []string{"Retry-After", "Date"}},
		{"appended to CORS middleware's", []string{"X-Request-Id"}, "", []string{"X-Request-Id", "Retry-After", "Date"}},
		{"case-insensitive: no duplicate", []string{"retry-after"}, "", []string{"retry-after", "Date"}},
		{"several lines and odd spacing", []string{"X-A ,", " DATE\t, X-B"}, "", []string{"X-A", "DATE", "X-B", "Retry-After"}},
		{"all there already", []string{"Date, Retry-After"}, "", nil},
		{"wildcard already exposes everything", []string{"*"}, "", nil},
		{"wildcard with credentials is a plain name", []string{"*"}, "true", []string{"*", "Retry-After", "Date"}},
		{"a name that merely contains ours does not count", []string{"X-Retry-After-Date"}, "", []string{"X-Retry-After-Date", "Retry-After", "Date"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			if tt.have != nil {
				h["Access-Control-Expose-Headers"] = slices.Clone(tt.have)
			}
			if tt.creds != "" {
				h.Set("Access-Control-Allow-Credentials", tt.creds)
			}
			refusalExposed.expose(h, nil)
			got := h["Access-Control-Expose-Headers"]
			if tt.want == nil {
				if !slices.Equal(got, tt.have) {
					t.Fatalf("changed %q to %q", tt.have, got)
				}
				return
			}
			if names := exposedNames(h); !slices.Equal(names, tt.want) {
				t.Fatalf("exposes %q, want %q", names, tt.want)
			}
		})
	}
}

// TestExposeProperty merges into random lists drawn from a pool of names in random case: what
// was there stays, in order; each of ours is then listed exactly once; nothing else is added.
func TestExposeProperty(t *testing.T) {
	pool := []string{"Retry-After", "Date", "RateLimit", "RateLimit-Policy", "X-Request-Id", "ETag", "Link"}
	l := newExposeList("Retry-After", "Date", "RateLimit", "RateLimit-Policy")
	rng := rand.New(rand.NewPCG(7, 8))
	for i := range 5000 {
		var have []string
		for range rng.IntN(3) {
			var items []string
			for range rng.IntN(4) {
				n := pool[rng.IntN(len(pool))]
				items = append(items, []string{n, strings.ToLower(n), strings.ToUpper(n)}[rng.IntN(3)])
			}
			have = append(have, strings.Join(items, ", "))
		}
		h := http.Header{}
		if len(have) > 0 {
			h["Access-Control-Expose-Headers"] = slices.Clone(have)
		}
		before := exposedNames(h)
		l.expose(h, nil)
		after := exposedNames(h)
		if !slices.Equal(after[:len(before)], before) {
			t.Fatalf("%d: %q became %q", i, have, after)
		}
		for _, n := range l.names {
			count := 0
			for _, a := range after {
				if strings.EqualFold(a, n) {
					count++
				}
			}
			if count < 1 || (count > 1 && count != countFold(before, n)) {
				t.Fatalf("%d: %q became %q: %s listed %d times", i, have, after, n, count)
			}
		}
		for _, a := range after[len(before):] {
			if !slices.Contains(l.names, a) || countFold(before, a) > 0 {
				t.Fatalf("%d: %q became %q: added %q", i, have, after, a)
			}
		}
	}
}

func countFold(names []string, n string) int {
	c := 0
	for _, m := range names {
		if strings.EqualFold(m, n) {
			c++
		}
	}
	return c
}

// cors is a stand-in for CORS middleware such as github.com/go-chi/cors: it answers the actual
// request's CORS headers, with Set, before calling next.
func cors(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Origin") != "" {
			w.Header().Set("Access-Control-Allow-Origin", "*")
			w.Header().Set("Access-Control-Expose-Headers", "X-Request-Id")
		}
		next.ServeHTTP(w, r)
	})
}

func serveFrom(h http.Handler, origin string) *httptest.ResponseRecorder {
	return serveWith(h, "GET", "192.0.2.1:1", "Origin", origin)
}

// TestExposeMiddleware checks, for each response the package writes, what a browser script may
// read: with CORS middleware mounted before the limiter, refusals expose Retry-After and Date,
// and, with the rate-limit fields on, every response exposes them; without an Origin nothing is
// added.
func TestExposeMiddleware(t *testing.T) {
	allowed := &fakeLimiter{d: Decision{Allowed: true, Limit: 5, Remaining: 4, Reset: time.Second}}
	refused := &fakeLimiter{d: Decision{RetryAfter: time.Second, Limit: 5, Reset: 5 * time.Second}}
	fields := []Option{WithRateLimitFields(""), WithLegacyRateLimitFields(true)}
	all := []string{"X-Request-Id", "Retry-After", "Date", "RateLimit", "RateLimit-Policy", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"}
	tests := []struct {
		name   string
		h      http.Handler
		origin string
		status int
		want   []string
	}{
		{"refusal, fields off", cors(LimitWith(refused)(ok)), "https://app.example", 429, []string{"X-Request-Id", "Retry-After", "Date"}},
		{"refusal, fields on", cors(LimitWith(refused, fields...)(ok)), "https://app.example", 429, all},
		{"admitted, fields on", cors(LimitWith(allowed, fields...)(ok)), "https://app.example", 200, []string{"X-Request-Id", "RateLimit", "RateLimit-Policy", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"}},
		{"admitted, fields off: untouched", cors(LimitWith(allowed)(ok)), "https://app.example", 200, []string{"X-Request-Id"}},
		{"no CORS middleware", LimitWith(refused)(ok), "null", 429, []string{"Retry-After", "Date"}},
		{"no Origin", cors(LimitWith(refused, fields...)(ok)), "", 429, nil},
		{"limiter error fails closed", cors(LimitWith(failingLimiter{errTest})(ok)), "https://app.example", 503, []string{"X-Request-Id", "Retry-After", "Date"}},
		{"a handler that adds keeps ours", cors(LimitWith(allowed, fields...)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Add("Access-Control-Expose-Headers", "ETag")
		}))), "https://app.example", 200, []string{"X-Request-Id", "RateLimit", "RateLimit-Policy", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "ETag"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := serveFrom(tt.h, tt.origin)
			if w.Code != tt.status {
				t.Fatalf("status %d, want %d", w.Code, tt.status)
			}
			if got := exposedNames(w.Header()); !slices.Equal(got, tt.want) {
				t.Fatalf("exposes %q, want %q", got, tt.want)
			}
		})
	}
}

var errTest = errorString("backend down")

type errorString string

func (e errorString) Error() string { return string(e) }

// TestExposeLineIsPerResponse checks that the value formatted ahead is copied into each
// response: a handler that writes to one response's value changes no other response.
func TestExposeLineIsPerResponse(t *testing.T) {
	l := newExposeList("Retry-After", "Date")
	h1, h2 := http.Header{}, http.Header{}
	l.expose(h1, nil)
	l.expose(h2, new(header.Few))
	h1["Access-Control-Expose-Headers"][0] = "X-Mine"
	h3 := http.Header{}
	l.expose(h3, nil)
	for _, h := range []http.Header{h2, h3} {
		if got := h.Get("Access-Control-Expose-Headers"); got != "Retry-After, Date" {
			t.Fatalf("another response's value became %q", got)
		}
	}
}

func TestExposeAllocs(t *testing.T) {
	h := http.Header{}
	lines := new(header.Few)
	allocs := testing.AllocsPerRun(100, func() {
		*lines = header.Few{}
		delete(h, "Access-Control-Expose-Headers")
		refusalExposed.expose(h, lines)
		refusalExposed.expose(h, lines) // everything already there
	})
	if allocs != 0 {
		t.Fatalf("%v allocations", allocs)
	}
}

// FuzzExpose checks the merge on arbitrary existing values: what was listed stays listed, in
// order, and each of the package's names ends up listed unless a wildcard already covers it.
func FuzzExpose(f *testing.F) {
	for _, s := range []string{"", "*", "X-A, retry-after", " , ,DATE,,", "Retry-After, Date", "\t*\t"} {
		f.Add(s, false)
		f.Add(s, true)
	}
	f.Fuzz(func(t *testing.T, have string, creds bool) {
		h := http.Header{}
		if have != "" {
			h["Access-Control-Expose-Headers"] = []string{have}
		}
		if creds {
			h.Set("Access-Control-Allow-Credentials", "true")
		}
		before := exposedNames(h)
		refusalExposed.expose(h, nil)
		after := exposedNames(h)
		if len(after) < len(before) || !slices.Equal(after[:len(before)], before) {
			t.Fatalf("%q became %q", before, after)
		}
		wild := slices.Contains(before, "*") && !creds
		for _, n := range refusalExposed.names {
			if !wild && countFold(after, n) == 0 {
				t.Fatalf("%q became %q: %s missing", before, after, n)
			}
			if countFold(after, n) > max(1, countFold(before, n)) {
				t.Fatalf("%q became %q: %s duplicated", before, after, n)
			}
		}
	})
}

// TestNoExposeWithoutOrigin checks that a response to a request without Origin, admitted or
// refused, with the rate-limit fields on or off, gets no Access-Control-Expose-Headers: only a
// cross-origin request needs it.
func TestNoExposeWithoutOrigin(t *testing.T) {
	for _, opts := range [][]Option{nil, {WithRateLimitFields(""), WithLegacyRateLimitFields(true)}} {
		h := LimitWith(NewTokenBucket(rate.Every(time.Minute), 1), append(opts, WithClock(func() time.Time { return t0 }))...)(ok)
		for i, want := range []int{http.StatusOK, http.StatusTooManyRequests} {
			w := serve(h, "GET", "192.0.2.1:1")
			if w.Code != want {
				t.Fatalf("request %d: %d, want %d", i, w.Code, want)
			}
			if v, ok := w.Header()["Access-Control-Expose-Headers"]; ok {
				t.Fatalf("request %d (%d) without Origin got Access-Control-Expose-Headers %q", i, w.Code, v)
			}
		}
	}
}
