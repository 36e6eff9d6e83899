package retryafter

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retryafter/retryafter/edge"
	"github.com/retryafter/retryafter/internal/testkit"
	"golang.org/x/time/rate"
)

// TestPolicyFuncChangesLive changes a key's plan between its requests: an upgrade keeps the
// tokens the key holds (no fresh burst for what it spent) and refills at the new rate, a
// downgrade keeps at most the new burst, and the Decision names the key's own policy.
func TestPolicyFuncChangesLive(t *testing.T) {
	var plan atomic.Pointer[Policy]
	free := Policy{Name: "free", Limit: 1, Burst: 2}
	pro := Policy{Name: "pro", Limit: 10, Burst: 20}
	plan.Store(&free)
	b := NewTokenBucket(1, 1, WithPolicyFunc(func(string) Policy { return *plan.Load() }))
	decide(t, b, "k", 2, t0) // the free burst spent
	plan.Store(&pro)
	d := decide(t, b, "k", 0, t0)
	if d.Policy != pro || d.Limit != 20 || d.Remaining != 0 {
		t.Fatalf("upgraded: %+v, want the pro policy with its spent tokens, no fresh burst", d)
	}
	if d := decide(t, b, "k", 1, t0.Add(100*time.Millisecond)); !d.Allowed {
		t.Fatalf("upgraded, a tenth of a second on: %+v, want admitted at the pro rate", d)
	}
	if d := decide(t, b, "k", 0, t0.Add(3*time.Second)); d.Remaining != 20 {
		t.Fatalf("upgraded, 3 s on: %+v, want the pro burst", d)
	}
	plan.Store(&free)
	if d := decide(t, b, "k", 0, t0.Add(3*time.Second)); d.Policy != free || d.Remaining != 2 {
		t.Fatalf("downgraded: %+v, want at most the free burst", d)
	}
	if d := decide(t, b, "k", 3, t0.Add(3*time.Second)); d.Allowed || d.RetryAfter != rate.InfDuration {
		t.Fatalf("downgraded, a cost above the free burst: %+v, want never", d)
	}
	// A zero policy is the bucket's own.
	plan.Store(&Policy{})
	if d := decide(t, b, "other", 0, t0); d.Policy != (Policy{Limit: 1, Burst: 1}) {
		t.Fatalf("a zero policy: %+v, want the bucket's", d.Policy)
	}
	// The fields name the key's policy.
	plan.Store(&pro)
	h := LimitWith(b, WithRateLimitFields(""), WithKeyFunc(func(*http.Request) (string, error) { return "fields", nil }), WithClock(func() time.Time { return t0 }))(ok)
	w := serve(h, "GET", "192.0.2.1:1")
	if got := w.Header().Get("RateLimit-Policy"); got != `"pro";q=20;w=2` {
		t.Fatalf("RateLimit-Policy %q, want the pro plan", got)
	}
}

// TestPolicyFuncThroughTheMiddleware changes a key's plan between requests that the middleware
// admits at once, without a Decision (nothing reads it): a new key starts on its plan, an
// upgrade refills at the new rate, and a downgrade caps what the key holds at the new burst.
func TestPolicyFuncThroughTheMiddleware(t *testing.T) {
	var plan atomic.Pointer[Policy]
	free := Policy{Name: "free", Limit: 1, Burst: 2}
	pro := Policy{Name: "pro", Limit: 10, Burst: 20}
	plan.Store(&free)
	b := NewTokenBucket(1, 1, WithPolicyFunc(func(string) Policy { return *plan.Load() }))
	now := t0
	h := LimitWith(b, WithClock(func() time.Time { return now }))(ok)
	codes := func(n int) (got []int) {
		for range n {
			got = append(got, serve(h, "GET", "192.0.2.1:1").Code)
		}
		return got
	}
	want := func(what string, got []int, admitted int) {
		t.Helper()
		for i, c := range got {
			if (c == http.StatusOK) != (i < admitted) {
				t.Fatalf("%s: %v, want the first %d admitted and no other", what, got, admitted)
			}
		}
	}
	want("a new key on the free plan", codes(3), 2)
	plan.Store(&pro)
	want("upgraded, the free burst spent", codes(1), 0) // the pro rate from here
	now = now.Add(100 * time.Millisecond)
	want("upgraded, a tenth of a second on", codes(2), 1)
	now = now.Add(time.Hour)
	plan.Store(&free)
	want("downgraded with the pro burst held", codes(3), 2)
}

// TestPolicyFuncConcurrent changes plans while 8 goroutines decide requests of a few keys, under
// the race detector: each decision is under the plan it names, and a key never holds more than
// the largest burst.
func TestPolicyFuncConcurrent(t *testing.T) {
	plans := []Policy{{Name: "a", Limit: 100, Burst: 5}, {Name: "b", Limit: 1000, Burst: 50}, {Name: "c", Limit: 10, Burst: 1}}
	var current sync.Map
	for i := range 4 {
		current.Store("k"+strconv.Itoa(i), plans[0])
	}
	b := NewTokenBucket(1, 1, WithPolicyFunc(func(key string) Policy {
		p, _ := current.Load(key)
		return p.(Policy)
	}))
	var wg sync.WaitGroup
	var bad atomic.Int64
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 1))
			for i := range 2000 {
				key := "k" + strconv.Itoa(rng.IntN(4))
				if g == 0 && i%10 == 0 {
					current.Store(key, plans[rng.IntN(len(plans))])
					continue
				}
				d, _ := b.Decide(context.Background(), key, rng.IntN(3), t0.Add(time.Duration(i)*time.Millisecond))
				if d.Limit != d.Policy.Burst || d.Remaining > 50 || !strings.Contains("abc", d.Policy.Name) {
					bad.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if bad.Load() != 0 {
		t.Fatalf("%d decisions out of their plan", bad.Load())
	}
}

// TestDryRunMirrorsEnforcing runs the same random sequence of requests from a few clients
// through an enforcing middleware and a dry-run one: every request the enforcing one refuses is
// one the dry run reports to the limited hook, with the same Decision, and the dry run passes it
// to next without Retry-After, with the fields as enforcing sends them.
func TestDryRunMirrorsEnforcing(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for round := range 20 {
		burst := 1 + rng.IntN(4)
		limit := rate.Limit(0.5 + rng.Float64()*4)
		clk := newClock(t0)
		var refused, wouldBe []Decision
		var outcomes []Outcome
		enforce := Limit(limit, burst, WithClock(clk.Now), WithRateLimitFields(""),
			WithLimitedHook(func(_ *http.Request, _ string, d Decision) { refused = append(refused, d) }))(ok)
		dry := Limit(limit, burst, WithClock(clk.Now), WithRateLimitFields(""), WithDryRun(true),
			WithLimitedHook(func(_ *http.Request, _ string, d Decision) { wouldBe = append(wouldBe, d) }),
			WithDecisionHook(func(_ *http.Request, o Outcome, _ Decision) { outcomes = append(outcomes, o) }))(ok)
		for i := range 300 {
			clk.Advance(time.Duration(rng.IntN(int(600 * time.Millisecond))))
			remote := "192.0.2." + strconv.Itoa(1+rng.IntN(3)) + ":1"
			we := serve(enforce, "GET", remote)
			wd := serve(dry, "GET", remote)
			if wd.Code != http.StatusOK || wd.Header().Get("Retry-After") != "" {
				t.Fatalf("round %d, request %d: the dry run answered %d, Retry-After %q", round, i, wd.Code, wd.Header().Get("Retry-After"))
			}
			for _, f := range []string{"RateLimit", "RateLimit-Policy"} {
				if we.Header().Get(f) != wd.Header().Get(f) {
					t.Fatalf("round %d, request %d: %s %q enforcing, %q dry", round, i, f, we.Header().Get(f), wd.Header().Get(f))
				}
			}
			if (we.Code == http.StatusTooManyRequests) != (outcomes[i] == edge.DryRunRefused) {
				t.Fatalf("round %d, request %d: enforcing answered %d, the dry run's outcome %v", round, i, we.Code, outcomes[i])
			}
		}
		if len(refused) != len(wouldBe) {
			t.Fatalf("round %d: %d refusals enforcing, %d would-be refusals", round, len(refused), len(wouldBe))
		}
		for i := range refused {
			if plain(refused[i]) != plain(wouldBe[i]) {
				t.Fatalf("round %d, refusal %d: %+v enforcing, %+v dry", round, i, refused[i], wouldBe[i])
			}
		}
	}
}

// TestExempt passes exempt requests to next uncounted, unrefused and without fields, and the
// others as usual.
func TestExempt(t *testing.T) {
	l := &fakeLimiter{d: Decision{RetryAfter: time.Second, Limit: 1}}
	var outcomes []Outcome
	h := LimitWith(l, WithRateLimitFields(""), WithExempt(func(r *http.Request) bool { return r.URL.Path == "/healthz" }),
		WithKeyFunc(func(*http.Request) (string, error) {
			t.Fatal("the key function ran for an exempt request")
			return "", nil
		}),
		WithDecisionHook(func(_ *http.Request, o Outcome, _ Decision) { outcomes = append(outcomes, o) }))(ok)
	for range 10 {
		r, _ := http.NewRequest("GET", "/healthz", nil)
		w := serveRequest(h, r)
		if w.Code != http.StatusOK || w.Header().Get("RateLimit") != "" || w.Header().Get("Retry-After") != "" {
			t.Fatalf("an exempt request: %d %q", w.Code, w.Header())
		}
	}
	if len(l.keys) != 0 || len(outcomes) != 10 || outcomes[0] != edge.Exempt {
		t.Fatalf("exempt requests counted %d times, outcomes %v", len(l.keys), outcomes)
	}
	h = LimitWith(l, WithExempt(func(r *http.Request) bool { return r.URL.Path == "/healthz" }))(ok)
	if w := serve(h, "GET", "192.0.2.1:1"); w.Code != http.StatusTooManyRequests || len(l.keys) != 1 {
		t.Fatalf("a request that is not exempt: %d, counted %d times", w.Code, len(l.keys))
	}
}

// TestFieldsListEveryLayer sends requests through an All of a per-client limit and a named
// hourly one: RateLimit-Policy lists both policies and RateLimit both quotas, each under its own
// name (draft-ietf-httpapi-ratelimit-headers-11 §3, §4: Lists of Items), and the problem details
// of a refusal name the policy it violated.
func TestFieldsListEveryLayer(t *testing.T) {
	perClient := NewTokenBucket(rate.Every(time.Second), 2)
	hourly := NewTokenBucket(rate.Every(time.Hour), 3, WithPolicyFunc(func(string) Policy { return Policy{Name: "hour"} }))
	clk := newClock(t0)
	h := LimitWith(All(perClient, Shared(hourly, "all")), WithClock(clk.Now), WithRateLimitFields(""),
		WithProblemDetails(ProblemDetails{Always: true}))(ok)
	want := []struct {
		code          int
		rateLimit     string
		violatedFirst string
	}{
		{200, `"default";r=1;t=1, "hour";r=2;t=3600`, ""},
		{200, `"default";r=0;t=1, "hour";r=1;t=3600`, ""},
		{429, `"default";r=0;t=1, "hour";r=1;t=3600`, `"default"`},
	}
	for i, w := range want {
		resp := serve(h, "GET", "192.0.2.1:1")
		if resp.Code != w.code || resp.Header().Get("RateLimit") != w.rateLimit ||
			resp.Header().Get("RateLimit-Policy") != `"default";q=2;w=2, "hour";q=3;w=10800` {
			t.Fatalf("request %d: %d RateLimit %q RateLimit-Policy %q", i+1, resp.Code, resp.Header().Get("RateLimit"), resp.Header().Get("RateLimit-Policy"))
		}
		if w.violatedFirst != "" && !strings.Contains(resp.Body.String(), `"violated-policies":["default"]`) {
			t.Fatalf("request %d: %s, want the per-client policy named as violated", i+1, resp.Body.String())
		}
	}
	// A second client spends the last of the hourly quota, then is refused by it.
	serve(h, "GET", "192.0.2.2:1")
	resp := serve(h, "GET", "192.0.2.3:1")
	if resp.Code != 429 || !strings.Contains(resp.Body.String(), `"violated-policies":["hour"]`) {
		t.Fatalf("refused by the hourly limit: %d %s", resp.Code, resp.Body.String())
	}
}

// BenchmarkPolicyFunc is the allowed path of a TokenBucket with and without a policy function
// (a map lookup, as a plan by API key costs).
func BenchmarkPolicyFunc(b *testing.B) {
	plans := map[string]Policy{"k": {Name: "pro", Limit: 1e9, Burst: 1 << 30}}
	for _, tt := range []struct {
		name string
		opts []TokenBucketOption
	}{
		{"none", nil},
		{"map", []TokenBucketOption{WithPolicyFunc(func(key string) Policy { return plans[key] })}},
	} {
		b.Run(tt.name, func(b *testing.B) {
			h := LimitWith(NewTokenBucket(1e9, 1<<30, tt.opts...), WithKeyFunc(func(*http.Request) (string, error) { return "k", nil }))(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
			r, _ := http.NewRequest("GET", "/", nil)
			w := newTestWriter()
			b.ReportAllocs()
			for b.Loop() {
				h.ServeHTTP(w, r)
			}
		})
	}
}

// TestPolicyFuncOneDimension changes only a plan's rate, then only its burst: each change alone
// applies from the next decision.
func TestPolicyFuncOneDimension(t *testing.T) {
	var plan atomic.Pointer[Policy]
	plan.Store(&Policy{Limit: 1, Burst: 4})
	b := NewTokenBucket(1, 1, WithPolicyFunc(func(string) Policy { return *plan.Load() }))
	decide(t, b, "k", 4, t0) // empty
	plan.Store(&Policy{Limit: 10, Burst: 4})
	decide(t, b, "k", 0, t0.Add(100*time.Millisecond)) // found: 0.1 token, at 1/s until now
	if d := decide(t, b, "k", 1, t0.Add(200*time.Millisecond)); !d.Allowed {
		t.Fatalf("the rate alone raised to 10/s, a tenth of a second on: %+v, want admitted (1.1 tokens)", d)
	}
	plan.Store(&Policy{Limit: 10, Burst: 2})
	if d := decide(t, b, "k", 0, t0.Add(time.Hour)); d.Remaining != 2 || d.Limit != 2 {
		t.Fatalf("the burst alone lowered to 2, an hour on: %+v, want 2 left of 2", d)
	}
	if d := decide(t, b, "k", 3, t0.Add(time.Hour)); d.Allowed || d.RetryAfter != rate.InfDuration {
		t.Fatalf("a cost of 3 above the lowered burst: %+v, want never", d)
	}
}

// TestPolicyFuncInfiniteRate moves keys' plans between 1/s with bursts of 5 and a limit of +Inf
// (a quota over a window of 0), both ways, at one instant and as time passes: at +Inf a key is
// unlimited, as at rate.Inf, and back on 1/s it holds what it held before, so that 1,000
// requests are admitted exactly as the plan allows. A limit that is not a number or negative is
// the bucket's own. A key that once had +Inf was admitted for good: its tokens were NaN.
func TestPolicyFuncInfiniteRate(t *testing.T) {
	var plan atomic.Pointer[Policy]
	slow := Policy{Name: "slow", Limit: 1, Burst: 5}
	inf := Policy{Name: "inf", Limit: rate.Limit(math.Inf(1)), Burst: 5}
	b := NewTokenBucket(2, 3, WithPolicyFunc(func(string) Policy { return *plan.Load() }))
	admitted := func(key string, now time.Time) (n int) {
		t.Helper()
		for range 1000 {
			if decide(t, b, key, 1, now).Allowed {
				n++
			}
		}
		noNaN(t, b, now)
		return n
	}
	plan.Store(&slow)
	if n := admitted("k", t0); n != 5 {
		t.Fatalf("on 1/s: %d of 1,000 admitted, want the burst of 5", n)
	}
	plan.Store(&inf)
	if n := admitted("k", t0); n != 1000 {
		t.Fatalf("on +Inf: %d of 1,000 admitted, want all", n)
	}
	if d := decide(t, b, "k", 1, t0); d.Policy != (Policy{Name: "inf", Limit: rate.Inf, Burst: 5}) || d.Remaining != 5 || d.Reset != 0 {
		t.Fatalf("on +Inf: %+v, want the policy at rate.Inf, its whole burst left", d)
	}
	plan.Store(&slow)
	if n := admitted("k", t0); n != 0 {
		t.Fatalf("back on 1/s at the same instant: %d of 1,000 admitted, want none: the burst was spent", n)
	}
	if d := decide(t, b, "k", 1, t0); d.Allowed || d.RetryAfter != time.Second-slack {
		t.Fatalf("back on 1/s: %+v, want refused for a second", d)
	}
	if n := admitted("k", t0.Add(2*time.Second)); n != 2 {
		t.Fatalf("back on 1/s, 2 s on: %d of 1,000 admitted, want 2", n)
	}
	// Time on +Inf counts at the rate the key had before, as for any change of plan.
	plan.Store(&inf)
	admitted("k", t0.Add(time.Hour))
	plan.Store(&slow)
	if n := admitted("k", t0.Add(time.Hour)); n != 5 {
		t.Fatalf("an hour on +Inf, then on 1/s: %d of 1,000 admitted, want the burst of 5", n)
	}
	// A key first seen on +Inf starts on 1/s with a full bucket.
	plan.Store(&inf)
	admitted("new", t0)
	plan.Store(&slow)
	if n := admitted("new", t0); n != 5 {
		t.Fatalf("a key new on +Inf, then on 1/s: %d of 1,000 admitted, want the burst of 5", n)
	}
	// A limit that is not a number, or negative, is the bucket's own: 2/s with bursts of 5.
	for _, limit := range []rate.Limit{rate.Limit(math.NaN()), -1, rate.Limit(math.Inf(-1))} {
		plan.Store(&Policy{Limit: limit, Burst: 5})
		key := fmt.Sprint("odd", limit)
		if d := decide(t, b, key, 0, t0); d.Policy != (Policy{Limit: 2, Burst: 5}) {
			t.Fatalf("a limit of %v: %+v, want the bucket's own", limit, d.Policy)
		}
		if n := admitted(key, t0.Add(time.Second)); n != 5 {
			t.Fatalf("a limit of %v: %d of 1,000 admitted, want the burst of 5", limit, n)
		}
	}
}

// TestDryRunChargedAfter: a would-be refusal of a dry run, which enforcing would not have
// served, is not charged what its handler reports: the waits told stay those of enforcing.
func TestDryRunChargedAfter(t *testing.T) {
	run := func(dry bool) []time.Duration {
		clk := testkit.NewClock(testkit.T0)
		var waits []time.Duration
		h := LimitWith(ChargedAfter(NewTokenBucket(1, 10)), WithClock(clk.Now), WithDryRun(dry),
			WithLimitedHook(func(_ *http.Request, _ string, d Decision) { waits = append(waits, d.RetryAfter) }))(
			http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { Charge(r, 10) }))
		for range 4 {
			h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil))
		}
		return waits
	}
	enforced, dry := run(false), run(true)
	if !slices.Equal(enforced, dry) || len(enforced) != 2 {
		t.Errorf("waits told: enforced %v, in a dry run %v; want the same two", enforced, dry)
	}
}

// TestDryRunFailsOpen: a dry run refuses nothing, a failing Limiter's or key function's request
// included: it is passed on, as FailedOpen, and the error reported.
func TestDryRunFailsOpen(t *testing.T) {
	noKey := WithKeyFunc(func(*http.Request) (string, error) { return "", errors.New("no key") })
	for name, l := range map[string]Limiter{"the Limiter fails": failingLimiter{errors.New("down")}, "the key function fails": NewTokenBucket(1, 1)} {
		var outcomes []Outcome
		errs := 0
		opts := []Option{WithDryRun(true), WithErrorHook(func(*http.Request, error) { errs++ }),
			WithDecisionHook(func(_ *http.Request, o Outcome, _ Decision) { outcomes = append(outcomes, o) })}
		if name == "the key function fails" {
			opts = append(opts, noKey)
		}
		w := httptest.NewRecorder()
		LimitWith(l, opts...)(ok).ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
		if w.Code != http.StatusOK || errs != 1 || !slices.Equal(outcomes, []Outcome{edge.FailedOpen}) {
			t.Errorf("%s, in a dry run: %d, %d errors told, outcomes %v; want 200, 1, [failed_open]", name, w.Code, errs, outcomes)
		}
	}
}
