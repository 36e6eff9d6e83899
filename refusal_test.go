package retryafter

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/retryafter/retryafter/edge"
	"github.com/retryafter/retryafter/internal/testkit"
	"golang.org/x/time/rate"
)

var updateRefusals = flag.Bool("update-refusals", false, "rewrite testdata/refusals.golden from the code under test")

// TestRefusalsUnchanged writes every kind of refusal the package makes (the limiter's 429, a
// request that can never be admitted, a limiter and a key function that fail, a Maintenance), each to a plain request, to one that asks for problem details from
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
	testkit.Golden(t, "testdata/refusals.golden", b.String(), *updateRefusals)
}

// maintenanceRefusal returns m's handler, in maintenance for an hour from t0.
func maintenanceRefusal(m *Maintenance) http.Handler {
	m.Start(t0.Add(time.Hour))
	return m.Handler(ok)
}

// dumpResponse returns w's status, header fields in order of name, and body.
var dumpResponse = testkit.DumpResponse

// TestResponderToldRefusal checks what a Responder of the user's is told: the status, the wait
// Retry-After states, and the policies a
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
	serve(maintenanceRefusal(&Maintenance{Now: now, Respond: record}), "GET", "192.0.2.1:1")
	if got.Status != 503 || got.RetryAfter != time.Hour || got.Type != "" || got.Violated != nil {
		t.Errorf("Maintenance's refusal: %+v, want 503, 1h0m0s, no type, none violated", got)
	}
}

// truncating is a Limiter that refuses with its wait truncated to whole seconds (as a store
// counting a TTL in seconds would): a sub-second wait comes out 0.
type truncating struct{}

func (truncating) Decide(context.Context, string, int, time.Time) (Decision, error) {
	return Decision{RetryAfter: (400 * time.Millisecond).Truncate(time.Second), Limit: 5}, nil
}

// TestRefusalWithoutWait: a refusal whose wait is 0 or less (a Limiter that truncates it) is
// told Retry-After: 1, as the other edges tell it (edge.DelaySeconds), never 0 and never
// nothing; it went without Retry-After, and its problem details said it could never be
// admitted. Only rate.InfDuration means never.
func TestRefusalWithoutWait(t *testing.T) {
	h := LimitWith(truncating{}, WithClock(newClock(t0).Now), WithProblemDetails(ProblemDetails{Always: true}))(ok)
	w := serve(h, "GET", "192.0.2.1:1")
	if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") != "1" {
		t.Errorf("%d, Retry-After %q, want 429 and 1", w.Code, w.Header().Get("Retry-After"))
	}
	if strings.Contains(w.Body.String(), "never be admitted") {
		t.Errorf("problem details of a refusal for under a second: %s", w.Body.String())
	}
	if secs, _ := edge.DelaySeconds(0); secs != 1 {
		t.Errorf("edge.DelaySeconds(0) = %d, want 1, as the middleware tells it", secs)
	}
}
