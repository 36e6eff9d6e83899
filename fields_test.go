package retryafter

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/retryafter/retryafter/edge"
	"golang.org/x/time/rate"
)

// maxSFInt is the largest Integer a Structured Field may carry (RFC 9651 §3.3.1).
const maxSFInt = 999_999_999_999_999

// fakeLimiter is a Limiter that answers every request with the Decision d and records what it
// was asked. It is safe for concurrent use.
type fakeLimiter struct {
	mu    sync.Mutex
	d     Decision
	keys  []string
	costs []int
}

func (f *fakeLimiter) Decide(_ context.Context, key string, cost int, _ time.Time) (Decision, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.keys = append(f.keys, key)
	f.costs = append(f.costs, cost)
	return f.d, nil
}

// sfItem parses one Structured Field Item of the form "name";k=int;k=int, as the RateLimit
// fields use it, and fails t when it is not of that form.
func sfItem(t *testing.T, v string) (name string, params map[string]int64) {
	t.Helper()
	parts := strings.Split(v, ";")
	n := parts[0]
	if len(n) < 2 || n[0] != '"' || n[len(n)-1] != '"' {
		t.Fatalf("%q: item value is not an sf-string", v)
	}
	params = map[string]int64{}
	for _, p := range parts[1:] {
		k, val, ok := strings.Cut(p, "=")
		if !ok || k == "" || k != strings.ToLower(k) {
			t.Fatalf("%q: bad parameter %q", v, p)
		}
		if _, dup := params[k]; dup {
			t.Fatalf("%q: parameter %q twice", v, k)
		}
		i, err := strconv.ParseInt(val, 10, 64)
		if err != nil || i < 0 || i > maxSFInt || (len(val) > 1 && val[0] == '0') {
			t.Fatalf("%q: parameter %q is not a non-negative sf-integer", v, p)
		}
		params[k] = i
	}
	return n[1 : len(n)-1], params
}

func TestQuotaFieldsWrite(t *testing.T) {
	fields := func(set fieldSet, name string) *quotaFields {
		return &quotaFields{set: set, Fields: edge.NewFields(name)}
	}
	bucket := fields(fieldsDraft|fieldsLegacy, "default")
	other := fields(fieldsDraft|fieldsLegacy, "api")
	inf := rate.InfDuration
	b5x10 := Policy{Limit: rate.Every(200 * time.Millisecond), Burst: 10}
	// The largest int, clamped to the largest sf-integer where it is larger (64-bit platforms).
	huge := strconv.FormatInt(min(int64(math.MaxInt), maxSFInt), 10)
	twoLayers := edge.Binding(
		Decision{Allowed: true, Limit: 10, Remaining: 7, Reset: 520 * time.Millisecond, Policy: b5x10},
		Decision{Allowed: true, Limit: 1000, Remaining: 990, Reset: 36 * time.Second, Policy: Policy{Name: "hour", Limit: rate.Every(3600 * time.Millisecond), Burst: 1000}},
	)
	tests := []struct {
		name string
		f    *quotaFields
		d    Decision
		want map[string]string // header -> value; "" means absent
	}{
		{"allowed: r is what is left, t the time until one more token, rounded up", bucket,
			Decision{Allowed: true, Limit: 10, Remaining: 7, Reset: 520 * time.Millisecond, Policy: b5x10},
			map[string]string{"RateLimit-Policy": `"default";q=10;w=2`, "RateLimit": `"default";r=7;t=1`,
				"X-RateLimit-Limit": "10", "X-RateLimit-Remaining": "7", "X-RateLimit-Reset": "1"}},
		{"an empty bucket of 100 at 1/s: t is 1 s, when a token is back, not the 100 s until full", bucket,
			Decision{Allowed: true, Limit: 100, Remaining: 0, Reset: 100 * time.Second, Policy: Policy{Limit: 1, Burst: 100}},
			map[string]string{"RateLimit-Policy": `"default";q=100;w=100`, "RateLimit": `"default";r=0;t=1`, "X-RateLimit-Reset": "1"}},
		{"a whole-second wait for the next token is not rounded past itself", bucket,
			Decision{Allowed: true, Limit: 10, Remaining: 0, Reset: 20 * time.Second, Policy: Policy{Limit: 0.5, Burst: 10}},
			map[string]string{"RateLimit": `"default";r=0;t=2`, "X-RateLimit-Reset": "2"}},
		{"refused: t is the Retry-After", bucket,
			Decision{RetryAfter: 2300 * time.Millisecond, Limit: 10, Remaining: 0, Reset: 9500 * time.Millisecond, Policy: Policy{Limit: 1, Burst: 10}},
			map[string]string{"RateLimit": `"default";r=0;t=3`, "X-RateLimit-Reset": "3"}},
		{"refused for ever (cost above the burst): t is the time until one more token", bucket,
			Decision{RetryAfter: inf, Limit: 10, Remaining: 4, Reset: 5500 * time.Millisecond, Policy: Policy{Limit: 1, Burst: 10}},
			map[string]string{"RateLimit": `"default";r=4;t=1`, "X-RateLimit-Reset": "1"}},
		{"never refills: no t, no reset and no w", bucket,
			Decision{RetryAfter: inf, Limit: 10, Remaining: 0, Reset: inf, Policy: Policy{Burst: 10}},
			map[string]string{"RateLimit-Policy": `"default";q=10`, "RateLimit": `"default";r=0`, "X-RateLimit-Reset": ""}},
		{"full bucket: t=0", bucket,
			Decision{Allowed: true, Limit: 10, Remaining: 10, Policy: b5x10},
			map[string]string{"RateLimit": `"default";r=10;t=0`}},
		{"negative remaining is 0", bucket,
			Decision{RetryAfter: time.Second, Limit: 10, Remaining: -3, Reset: time.Second},
			map[string]string{"RateLimit": `"default";r=0;t=1`, "X-RateLimit-Remaining": "0"}},
		{"a limiter that reports no quota gets no fields", bucket,
			Decision{Allowed: true},
			map[string]string{"RateLimit": "", "RateLimit-Policy": "", "X-RateLimit-Limit": ""}},
		{"a limiter that knows no rate: q from the Decision, no w, t the time until full", other,
			Decision{Allowed: true, Limit: 100, Remaining: 99, Reset: time.Minute},
			map[string]string{"RateLimit-Policy": `"api";q=100`, "RateLimit": `"api";r=99;t=60`}},
		{"a policy of its own name", bucket,
			Decision{Allowed: true, Limit: 10, Remaining: 10, Policy: Policy{Name: "pro", Limit: 1, Burst: 10}},
			map[string]string{"RateLimit-Policy": `"pro";q=10;w=10`, "RateLimit": `"pro";r=10;t=0`}},
		{"a bucket whose burst changed is not sent the cached policy", bucket,
			Decision{Allowed: true, Limit: 20, Remaining: 19, Reset: 100 * time.Millisecond, Policy: Policy{Limit: 5, Burst: 20}},
			map[string]string{"RateLimit-Policy": `"default";q=20;w=4`}},
		{"two layers: both policies, each under its own name; the legacy fields the binding one's", bucket, twoLayers,
			map[string]string{"RateLimit-Policy": `"default";q=10;w=2, "hour";q=1000;w=3600`, "RateLimit": `"default";r=7;t=1, "hour";r=990;t=4`,
				"X-RateLimit-Limit": "10", "X-RateLimit-Remaining": "7"}},
		{"huge values are clamped to sf-integers", other,
			Decision{Allowed: true, Limit: math.MaxInt, Remaining: math.MaxInt, Reset: inf - 1},
			map[string]string{"RateLimit-Policy": `"api";q=` + huge, "RateLimit": `"api";r=` + huge + `;t=9223372037`}},
		{"only the legacy fields", fields(fieldsLegacy, "x"),
			Decision{Allowed: true, Limit: 5000, Remaining: 4000, Reset: time.Hour},
			map[string]string{"RateLimit": "", "RateLimit-Policy": "", "X-RateLimit-Limit": "5000", "X-RateLimit-Remaining": "4000", "X-RateLimit-Reset": "3600"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{"X-Ratelimit-Reset": {"stale"}}
			if tt.d.Limit == 0 {
				h = http.Header{}
			}
			tt.f.write(h, tt.d, nil)
			for k, want := range tt.want {
				if got := h.Get(k); got != want {
					t.Errorf("%s = %q, want %q", k, got, want)
				}
				if want != "" && len(h.Values(k)) != 1 {
					t.Errorf("%s has %d lines", k, len(h.Values(k)))
				}
			}
			for _, k := range []string{"RateLimit", "RateLimit-Policy"} {
				if v := h.Get(k); v != "" {
					for _, item := range strings.Split(v, ", ") {
						sfItem(t, item)
					}
				}
			}
		})
	}
}

func TestSFString(t *testing.T) {
	bad := map[string]func(){}
	for _, name := range []string{"caf\u00e9", "tab\there", "nl\n"} {
		bad[fmt.Sprintf("WithRateLimitFields(%q)", name)] = func() { WithRateLimitFields(name) }
	}
	wantPanics(t, bad)
}

// TestRateLimitFieldsMiddleware checks over many Decisions, through the middleware, that the
// fields are set on admitted responses before next runs and on refusals, and that on a refusal
// t is never earlier than Retry-After nor Retry-After earlier than t.
func TestRateLimitFieldsMiddleware(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	fl := &fakeLimiter{}
	var seen http.Header
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = w.Header().Clone()
		w.WriteHeader(http.StatusNoContent)
	})
	clk := newClock(t0)
	h := LimitWith(fl, WithClock(clk.Now), WithRateLimitFields("burst"), WithLegacyRateLimitFields(true))(next)
	for i := range 5000 {
		clk.Advance(time.Duration(rng.Int64N(int64(time.Second))))
		limit := 1 + rng.IntN(100)
		d := Decision{Allowed: rng.IntN(2) == 0, Limit: limit, Remaining: rng.IntN(limit + 1),
			Reset: time.Duration(rng.Int64N(int64(time.Hour)))}
		if !d.Allowed {
			d.RetryAfter = time.Duration(rng.Int64N(int64(d.Reset) + 1))
			switch rng.IntN(10) {
			case 0:
				d.RetryAfter = rate.InfDuration
			case 1:
				d.RetryAfter = 0 // a limiter that does not know the wait: no Retry-After
			}
		}
		fl.d = d
		seen = nil
		w := serve(h, "GET", "192.0.2.1:1")
		hdr := w.Header()
		if d.Allowed {
			if w.Code != http.StatusNoContent || seen == nil {
				t.Fatalf("%d: %+v: got %d", i, d, w.Code)
			}
			hdr = seen // what next saw is what it was given
		} else if w.Code != http.StatusTooManyRequests {
			t.Fatalf("%d: %+v: got %d", i, d, w.Code)
		}
		name, p := sfItem(t, hdr.Get("RateLimit"))
		pname, pp := sfItem(t, hdr.Get("RateLimit-Policy"))
		if name != "burst" || pname != "burst" || pp["q"] != int64(limit) || p["r"] != int64(d.Remaining) {
			t.Fatalf("%d: %+v: RateLimit %q, RateLimit-Policy %q", i, d, hdr.Get("RateLimit"), hdr.Get("RateLimit-Policy"))
		}
		if _, ok := pp["w"]; ok {
			t.Fatalf("%d: a window was made up for a limiter that does not state one: %q", i, hdr.Get("RateLimit-Policy"))
		}
		tt, hasT := p["t"]
		if !hasT {
			t.Fatalf("%d: %+v: no t in %q", i, d, hdr.Get("RateLimit"))
		}
		if x := hdr.Get("X-RateLimit-Reset"); x != strconv.FormatInt(tt, 10) {
			t.Fatalf("%d: X-RateLimit-Reset %q, t=%d", i, x, tt)
		}
		// A refusal with no wait is told the least (see TestRefusalWithoutWait).
		if ra := hdr.Get("Retry-After"); !d.Allowed && d.RetryAfter != rate.InfDuration {
			wait := wantRefusal(t, w, http.StatusTooManyRequests, clk.Now())
			if time.Duration(tt)*time.Second != wait {
				t.Fatalf("%d: %+v: t=%d but Retry-After %q", i, d, tt, ra)
			}
		} else {
			if ra != "" {
				t.Fatalf("%d: %+v: Retry-After %q", i, d, ra)
			}
			if got := time.Duration(tt) * time.Second; got < d.Reset || got-d.Reset >= time.Second {
				t.Fatalf("%d: %+v: t=%d is not Reset rounded up", i, d, tt)
			}
		}
	}
}

// TestRateLimitFieldsOff checks that without the options no field appears, on either path.
func TestRateLimitFieldsOff(t *testing.T) {
	for _, allowed := range []bool{true, false} {
		fl := &fakeLimiter{d: Decision{Allowed: allowed, RetryAfter: time.Second, Limit: 5, Remaining: 1, Reset: time.Second}}
		w := serve(LimitWith(fl, WithLegacyRateLimitFields(true), WithLegacyRateLimitFields(false))(ok), "GET", "192.0.2.1:1")
		for k := range w.Header() {
			if strings.Contains(strings.ToLower(k), "ratelimit") {
				t.Fatalf("allowed=%v: %s sent while off", allowed, k)
			}
		}
	}
}

// TestRateLimitFieldsTokenBucket runs the fields over the real token bucket: the policy is the
// bucket's, and a client that spends r within t and then waits t is admitted q more times.
func TestRateLimitFieldsTokenBucket(t *testing.T) {
	clk := newClock(t0.Add(300 * time.Millisecond))
	h := Limit(rate.Every(400*time.Millisecond), 5, WithClock(clk.Now), WithRateLimitFields(""))(ok)
	w := serve(h, "GET", "192.0.2.9:1")
	if w.Header().Get("RateLimit") == "" {
		t.Fatal("no RateLimit field: the token bucket did not report its quota")
	}
	if got, want := w.Header().Get("RateLimit-Policy"), `"default";q=5;w=2`; got != want {
		t.Fatalf("RateLimit-Policy = %q, want %q", got, want)
	}
	_, p := sfItem(t, w.Header().Get("RateLimit"))
	if p["r"] != 4 {
		t.Fatalf("RateLimit = %q after one request of five", w.Header().Get("RateLimit"))
	}
	for range p["r"] {
		if w := serve(h, "GET", "192.0.2.9:1"); w.Code != http.StatusOK {
			t.Fatalf("refused within the r the previous response stated")
		}
	}
	w = serve(h, "GET", "192.0.2.9:1")
	_, p = sfItem(t, w.Header().Get("RateLimit"))
	wait := wantRefusal(t, w, http.StatusTooManyRequests, clk.Now())
	if time.Duration(p["t"])*time.Second != wait || p["r"] != 0 {
		t.Fatalf("refusal: RateLimit %q, Retry-After %v", w.Header().Get("RateLimit"), wait)
	}
	clk.Advance(2 * time.Second) // the policy's w: the bucket is full again
	for i := range 5 {
		if w := serve(h, "GET", "192.0.2.9:1"); w.Code != http.StatusOK {
			t.Fatalf("request %d of q after waiting w refused", i)
		}
	}
}

// TestRateLimitFieldsOnAnyTokenBucket gives the option to LimitWith only, not to the bucket:
// the fields must still appear.
func TestRateLimitFieldsOnAnyTokenBucket(t *testing.T) {
	b := NewTokenBucket(rate.Every(time.Second), 5)
	h := LimitWith(b, WithRateLimitFields(""))(ok)
	w := serve(h, "GET", "192.0.2.9:1")
	if got, want := w.Header().Get("RateLimit"), `"default";r=4;t=1`; got != want {
		t.Fatalf("RateLimit = %q, want %q", got, want)
	}
	if got, want := w.Header().Get("RateLimit-Policy"), `"default";q=5;w=5`; got != want {
		t.Fatalf("RateLimit-Policy = %q, want %q", got, want)
	}
}

// TestRateLimitFieldsPolicyNames tries every one-byte policy name: WithRateLimitFields takes
// exactly the printable ASCII ones, space and tilde included, and sends each as an sf-string.
func TestRateLimitFieldsPolicyNames(t *testing.T) {
	for c := range 256 {
		name := string([]byte{byte(c)})
		var h http.Handler
		panicked := func() (p bool) {
			defer func() { p = recover() != nil }()
			h = Limit(1, 1, WithRateLimitFields(name))(ok)
			return false
		}()
		if want := c < 0x20 || c > 0x7e; panicked != want {
			t.Fatalf("WithRateLimitFields(%q): panicked %v, want %v", name, panicked, want)
		}
		if panicked {
			continue
		}
		got := serve(h, "GET", "192.0.2.1:1").Header().Get("RateLimit-Policy")
		if want := `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(name) + `";q=1;`; !strings.HasPrefix(got, want) {
			t.Fatalf("policy %q sent as %q, want it to start %q", name, got, want)
		}
	}
}

// TestRateLimitFieldsOptionOrder checks that each option turns on its own fields only, in either
// order.
func TestRateLimitFieldsOptionOrder(t *testing.T) {
	for _, c := range []struct {
		opts          []Option
		draft, legacy bool
	}{
		{[]Option{WithRateLimitFields("")}, true, false},
		{[]Option{WithLegacyRateLimitFields(true)}, false, true},
		{[]Option{WithRateLimitFields(""), WithLegacyRateLimitFields(true)}, true, true},
		{[]Option{WithLegacyRateLimitFields(true), WithRateLimitFields("")}, true, true},
		{[]Option{WithLegacyRateLimitFields(true), WithRateLimitFields(""), WithLegacyRateLimitFields(false)}, true, false},
	} {
		hdr := serve(Limit(1, 5, c.opts...)(ok), "GET", "192.0.2.1:1").Header()
		if draft, legacy := hdr.Get("RateLimit") != "", hdr.Get("X-RateLimit-Limit") != ""; draft != c.draft || legacy != c.legacy {
			t.Fatalf("%d options: draft fields %v, legacy %v; want %v, %v", len(c.opts), draft, legacy, c.draft, c.legacy)
		}
	}
}

// TestRateLimitFieldsAllocs checks that the fields of a TokenBucket cost an admitted request one
// allocation, the header lines: the policy, which does not change, is formatted once.
func TestRateLimitFieldsAllocs(t *testing.T) {
	h := Limit(1e9, 1e9, WithKeyFunc(func(*http.Request) (string, error) { return "k", nil }),
		WithRateLimitFields(""), WithLegacyRateLimitFields(true))(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	r := httptest.NewRequest("GET", "/", nil)
	w := newTestWriter()
	h.ServeHTTP(w, r)
	// Two: the values' Lines, and the text of the fields, formatted for each request.
	if n := testing.AllocsPerRun(1000, func() { h.ServeHTTP(w, r) }); n > 2 {
		t.Fatalf("%v allocations per admitted request with the rate-limit fields, want 2", n)
	}
}

// userWrapper is a Limiter of a user's that passes its Limiter's Decisions through, as a
// logging or tracing wrapper does.
type userWrapper struct{ Limiter }

// TestPolicyWindowForEveryLimiter sends a request through the middleware with the fields on, for
// a bucket of 10 a second with bursts of 10 in every form it takes: the window is in
// RateLimit-Policy for each. The fields once took it from asserting *TokenBucket, so a bucket
// inside All, behind Peek or a user's wrapper sent none.
func TestPolicyWindowForEveryLimiter(t *testing.T) {
	bucket := func() *TokenBucket { return NewTokenBucket(10, 10) }
	for _, tt := range []struct {
		name string
		l    Limiter
		want string
	}{
		{"bare", bucket(), `"default";q=10;w=1`},
		{"wrapped by a user", userWrapper{bucket()}, `"default";q=10;w=1`},
		{"inside All, with an unlimited layer, which is left out", All(NewTokenBucket(rate.Inf, 5), bucket()), `"default-2";q=10;w=1`},
		{"behind Peek", Peek(bucket()), `"default";q=10;w=1`},
		{"behind Shared", Shared(bucket(), "all"), `"default";q=10;w=1`},
		{"behind ChargedAfter", ChargedAfter(bucket()), `"default";q=10;w=1`},
		{"an All of Shared and ChargedAfter", All(Shared(bucket(), "all"), ChargedAfter(NewTokenBucket(1, 60))), `"default";q=10;w=1, "default-2";q=60;w=60`},
	} {
		h := LimitWith(tt.l, WithRateLimitFields(""), WithClock(func() time.Time { return t0 }))(ok)
		if got := serve(h, "GET", "192.0.2.1:1").Header().Get("RateLimit-Policy"); got != tt.want {
			t.Errorf("%s: RateLimit-Policy %q, want %q", tt.name, got, tt.want)
		}
	}
}
