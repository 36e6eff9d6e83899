package otelmetrics

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"golang.org/x/time/rate"

	"github.com/retryafter/retryafter"
	"github.com/retryafter/retryafter/edge"
	"github.com/retryafter/retryafter/limitertest"
)

// TestLimiterContract runs the contract of every Limiter on a wrapped TokenBucket: wrapping
// changes no decision.
func TestLimiterContract(t *testing.T) {
	rd := newReader(t)
	n := 0
	limitertest.Run(t, limitertest.Config{
		Burst: 3,
		New: func(t *testing.T) retryafter.Limiter {
			n++
			return rd.m.Limiter(fmt.Sprint("tb", n), retryafter.NewTokenBucket(rate.Every(time.Second), 3))
		},
	})
}

// TestLimiterErrorType checks the error.type of a failed decision: bounded, whatever the error.
func TestLimiterErrorType(t *testing.T) {
	rd := newReader(t)
	store := &fakeStore{}
	l := rd.m.Limiter("s", store)
	for _, err := range []error{
		context.DeadlineExceeded, fmt.Errorf("redis: %w", context.DeadlineExceeded),
		context.Canceled, errors.New("dial tcp 10.0.0.5:6379: connection refused"), errors.New("another"),
	} {
		store.err = err
		if _, got := l.Decide(context.Background(), "k", 1, t0); got != err {
			t.Fatalf("Decide returned %v, want %v", got, err)
		}
	}
	s := rd.collect()
	for errType, n := range map[string]int64{"timeout": 2, "canceled": 1, Other: 2} {
		want(t, s, n, "retryafter.limiter.duration", limiterKey.String("s"), errorKey.String(errType))
	}
	if got := len(s.points("retryafter.limiter.duration")); got != 3 {
		t.Fatalf("%d attribute sets, want 3: %v", got, s.points("retryafter.limiter.duration"))
	}
}

// composite is a Composite of a package other than retryafter.
type composite struct{ retryafter.Limiter }

func (c composite) Unwrap() []retryafter.Limiter { return []retryafter.Limiter{c.Limiter} }

// TestLimiterPanics checks what Limiter refuses to wrap, and that it says so.
func TestLimiterPanics(t *testing.T) {
	rd := newReader(t)
	tb := retryafter.NewTokenBucket(rate.Every(time.Second), 1)
	rd.m.Limiter("taken", tb)
	for name, f := range map[string]func(){
		"nil":          func() { rd.m.Limiter("x", nil) },
		"empty name":   func() { rd.m.Limiter("", tb) },
		"unprintable":  func() { rd.m.Limiter("a\nb", tb) },
		"too long":     func() { rd.m.Limiter(strings.Repeat("a", 65), tb) },
		"twice":        func() { rd.m.Limiter("taken", tb) },
		"All":          func() { rd.m.Limiter("all", retryafter.All(tb, tb)) },
		"Shared":       func() { rd.m.Limiter("shared", retryafter.Shared(tb, "s")) },
		"ChargedAfter": func() { rd.m.Limiter("after", retryafter.ChargedAfter(tb)) },
		"Peek":         func() { rd.m.Limiter("peek", retryafter.Peek(tb)) },
		"Composite":    func() { rd.m.Limiter("composite", composite{tb}) },
	} {
		func() {
			defer func() {
				msg, _ := recover().(string)
				if !strings.HasPrefix(msg, "otelmetrics: ") {
					t.Errorf("%s: recovered %q, want a panic starting \"otelmetrics: \"", name, msg)
				}
			}()
			f()
		}()
	}
}

// TestLimiterInAll checks that wrapped TokenBuckets still combine in an All, decided in one step
// and timed once, and that a wrapped Charger still charges afterwards: a request that the handler
// charges past the quota leaves the key in debt.
func TestLimiterInAll(t *testing.T) {
	rd := newReader(t)
	perClient := rd.m.Limiter("client", retryafter.NewTokenBucket(rate.Every(time.Minute), 5))
	tokens := rd.m.Limiter("tokens", retryafter.NewTokenBucket(rate.Every(time.Second), 100))
	if _, ok := tokens.(retryafter.Charger); !ok {
		t.Fatal("a wrapped TokenBucket is no Charger")
	}
	if _, ok := rd.m.Limiter("plain", limiterFunc(func() retryafter.Decision { return retryafter.Decision{} })).(retryafter.Charger); ok {
		t.Fatal("a wrapped Limiter that is no Charger became one")
	}
	all := retryafter.All(perClient, retryafter.ChargedAfter(tokens))
	h := retryafter.LimitWith(all, rd.m.Option(), retryafter.WithClock(func() time.Time { return t0 }))(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { retryafter.Charge(r, 150) }))
	if w := serve(h, request("/", "/")); w.Code != http.StatusOK {
		t.Fatalf("first request: %d", w.Code)
	}
	w := serve(h, request("/", "/"))
	if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") != "50" {
		t.Fatalf("after a charge of 150 of 100 tokens: %d, Retry-After %q; want 429 and 50, until the debt of 50 is repaid", w.Code, w.Header().Get("Retry-After"))
	}
	s := rd.collect()
	// Two TokenBuckets of one process combine: one decision per request, under the first name.
	want(t, s, 2, "retryafter.limiter.duration", attribute.String(string(limiterKey), "client"))
	want(t, s, 0, "retryafter.limiter.duration", attribute.String(string(limiterKey), "tokens"))
}

// otherStore is a Charger of a kind other than TokenBucket (as a Redis store is), which combines
// with no TokenBucket.
type otherStore struct{ *retryafter.TokenBucket }

func (o otherStore) Combine(layers []edge.Layer) (retryafter.Limiter, bool) { return nil, false }

// TestLimiterInAllOfKinds checks that wrapped Limiters of one kind listed together still combine
// beside a wrapped Limiter of another kind: two TokenBuckets decided in one step, the other
// store in its own.
func TestLimiterInAllOfKinds(t *testing.T) {
	rd := newReader(t)
	a := rd.m.Limiter("a", retryafter.NewTokenBucket(rate.Every(time.Minute), 5))
	b := rd.m.Limiter("b", retryafter.NewTokenBucket(rate.Every(time.Minute), 5))
	other := rd.m.Limiter("other", otherStore{retryafter.NewTokenBucket(rate.Every(time.Minute), 5)})
	all := retryafter.All(a, b, other)
	for range 3 {
		if d, err := all.Decide(context.Background(), "k", 1, t0); err != nil || !d.Allowed {
			t.Fatalf("%+v, %v", d, err)
		}
	}
	s := rd.collect()
	want(t, s, 3, "retryafter.limiter.duration", limiterKey.String("a"))
	want(t, s, 0, "retryafter.limiter.duration", limiterKey.String("b"))
	want(t, s, 3, "retryafter.limiter.duration", limiterKey.String("other"))
}
