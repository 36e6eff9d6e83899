package grpclimit_test

import (
	"strings"
	"testing"
	"time"

	"github.com/retryafter/retryafter"
	"github.com/retryafter/retryafter/grpclimit"
)

// TestOptionsPanic: a nil function, a nil Limiter, and an option meant for streams given to the
// unary interceptor panic at construction, with the package's prefix.
func TestOptionsPanic(t *testing.T) {
	bucket := retryafter.NewTokenBucket(1, 1)
	for name, f := range map[string]func(){
		"nil Limiter":            func() { grpclimit.UnaryServerInterceptor(nil) },
		"nil Limiter, stream":    func() { grpclimit.StreamServerInterceptor(nil) },
		"nil Option":             func() { grpclimit.UnaryServerInterceptor(bucket, nil) },
		"WithClock(nil)":         func() { grpclimit.WithClock(nil) },
		"WithKeyFunc(nil)":       func() { grpclimit.WithKeyFunc(nil) },
		"WithCost(nil)":          func() { grpclimit.WithCost(nil) },
		"WithExempt(nil)":        func() { grpclimit.WithExempt(nil) },
		"WithErrorHook(nil)":     func() { grpclimit.WithErrorHook(nil) },
		"WithDecisionHook(nil)":  func() { grpclimit.WithDecisionHook(nil) },
		"WithMessageCharge(nil)": func() { grpclimit.WithMessageCharge(nil) },
		"WithMessageCharge, unary": func() {
			grpclimit.UnaryServerInterceptor(bucket, grpclimit.WithMessageCharge(bucket))
		},
		"WithRateLimitFields, not printable": func() { grpclimit.WithRateLimitFields("a\nb") },
		"WithMaxAttempts(0)":                 func() { grpclimit.WithMaxAttempts(0) },
		"WithMaxWait(0)":                     func() { grpclimit.WithMaxWait(0) },
		"nil ClientOption":                   func() { grpclimit.UnaryClientInterceptor(nil) },
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if r := recover(); r == nil || !strings.HasPrefix(panicText(r), "grpclimit: ") && !strings.HasPrefix(panicText(r), "retryafter: ") {
					t.Fatalf("recovered %v, want a panic with the package's prefix", r)
				}
			}()
			f()
		})
	}
	// A stream takes it.
	grpclimit.StreamServerInterceptor(bucket, grpclimit.WithMessageCharge(bucket), grpclimit.WithClock(time.Now))
}

func panicText(r any) string { s, _ := r.(string); return s }
