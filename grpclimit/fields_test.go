package grpclimit_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"

	"github.com/retryafter/retryafter"
	"github.com/retryafter/retryafter/grpclimit"
)

// TestRateLimitFields: the fields of each call, admitted (header) or refused (trailer, beside
// the pushback), are those the HTTP middleware sends for the same request at the same instant;
// a refusal still comes without a header, so that a retry policy reads its pushback.
func TestRateLimitFields(t *testing.T) {
	clk := newClock(t0)
	limiters := func() retryafter.Limiter {
		return retryafter.All(retryafter.NewTokenBucket(2, 3), retryafter.NewTokenBucket(0.01, 10))
	}
	addr, _ := serve(t, grpc.UnaryInterceptor(grpclimit.UnaryServerInterceptor(limiters(),
		grpclimit.WithClock(clk.now), grpclimit.WithRateLimitFields("api"))))
	client := dial(t, addr)
	web := retryafter.LimitWith(limiters(), retryafter.WithClock(clk.now), retryafter.WithRateLimitFields("api"))(
		http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))

	refused := 0
	for i, step := range []time.Duration{0, 0, 0, 0, 300 * time.Millisecond, 200 * time.Millisecond, time.Minute} {
		clk.add(step)
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		req.RemoteAddr = "127.0.0.1:1234"
		web.ServeHTTP(rec, req)

		var header, trailer metadata.MD
		a := call(t.Context(), client, grpc.Header(&header))
		fields := header
		if rec.Code == http.StatusTooManyRequests {
			if a.st.Code() != codes.ResourceExhausted || len(header) > 0 && len(header.Get(grpclimit.RateLimitKey)) > 0 {
				t.Fatalf("call %d: %v with header %v; want a refusal with none", i+1, a.err, header)
			}
			trailer = metadata.MD{grpclimit.RateLimitKey: a.trailer.Get(grpclimit.RateLimitKey),
				grpclimit.RateLimitPolicyKey: a.trailer.Get(grpclimit.RateLimitPolicyKey)}
			fields = trailer
			refused++
		} else if a.err != nil {
			t.Fatalf("call %d: %v; HTTP admitted it", i+1, a.err)
		}
		for key, name := range map[string]string{grpclimit.RateLimitKey: "RateLimit", grpclimit.RateLimitPolicyKey: "RateLimit-Policy"} {
			got, want := strings.Join(fields.Get(key), "|"), strings.Join(rec.Header().Values(name), "|")
			if got != want || want == "" {
				t.Fatalf("call %d (HTTP %d): %s %q, want %q as over HTTP", i+1, rec.Code, key, got, want)
			}
		}
	}
	if refused < 2 {
		t.Fatalf("%d refusals, want the test to see at least 2", refused)
	}
}
