package grpclimit_test

import (
	"context"
	"math"
	"math/rand/v2"
	"net"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/retryafter/retryafter"
	"github.com/retryafter/retryafter/grpclimit"
)

// retryPolicy is a service config whose retry policy retries RESOURCE_EXHAUSTED after a
// backoff of a millisecond at most: far shorter than the limiter's wait, so that only the
// pushback can bring the client back late enough.
const retryPolicy = `{"methodConfig": [{"name": [{"service": "grpc.testing.TestService"}],
  "retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.001s", "maxBackoff": "0.001s",
  "backoffMultiplier": 1, "retryableStatusCodes": ["RESOURCE_EXHAUSTED"]}}]}`

// TestGRPCRetryPolicy: a grpc-go client whose service config retries RESOURCE_EXHAUSTED with a
// backoff far shorter than the wait obeys the pushback and gets through on its first retry
// (the server counts two attempts), with the RateLimit fields on too (they go in the trailer);
// without the trailer it retries too soon and fails. The
// server's clock is the real one, since grpc-go waits on it.
func TestGRPCRetryPolicy(t *testing.T) {
	for _, c := range []struct {
		name     string
		strip    bool
		opts     []grpclimit.Option
		attempts int64
		code     codes.Code
	}{
		{"pushback", false, nil, 2, codes.OK},
		{"pushback and RateLimit fields", false, []grpclimit.Option{grpclimit.WithRateLimitFields("")}, 2, codes.OK},
		{"RetryInfo alone", true, nil, 3, codes.ResourceExhausted},
	} {
		t.Run(c.name, func(t *testing.T) {
			limiter := retryafter.NewTokenBucket(rate.Every(1500*time.Millisecond), 1)
			var attempts countingInterceptor
			chain := []grpc.UnaryServerInterceptor{attempts.intercept}
			if c.strip {
				chain = append(chain, noPushback)
			}
			chain = append(chain, grpclimit.UnaryServerInterceptor(limiter, c.opts...))
			addr, _ := serve(t, grpc.ChainUnaryInterceptor(chain...))
			client := dial(t, addr, grpc.WithDefaultServiceConfig(retryPolicy))
			if a := call(t.Context(), client); a.err != nil { // spends the burst
				t.Fatal(a.err)
			}
			attempts.n.Store(0)
			a := call(t.Context(), client)
			if a.st.Code() != c.code || attempts.n.Load() != c.attempts {
				t.Fatalf("%v after %d attempts, want %v after %d", a.err, attempts.n.Load(), c.code, c.attempts)
			}
		})
	}
}

// TestPushbackNeverRetried: a grpc-go client with a retry policy does not retry a call that can
// never be admitted: the server counts one attempt.
func TestPushbackNeverRetried(t *testing.T) {
	var attempts countingInterceptor
	addr, _ := serve(t, grpc.ChainUnaryInterceptor(attempts.intercept,
		grpclimit.UnaryServerInterceptor(retryafter.NewTokenBucket(1, 1), grpclimit.WithCost(costFromMetadata))))
	client := dial(t, addr, grpc.WithDefaultServiceConfig(retryPolicy))
	a := call(withKey(t.Context(), "", 2), client)
	if a.st.Code() != codes.ResourceExhausted || attempts.n.Load() != 1 {
		t.Fatalf("%v after %d attempts, want RESOURCE_EXHAUSTED after 1", a.err, attempts.n.Load())
	}
}

// fixed is a Limiter that refuses every call with the wait the test sets.
type fixed struct{ wait atomic.Int64 }

func (f *fixed) Decide(context.Context, string, int, time.Time) (retryafter.Decision, error) {
	return retryafter.Decision{RetryAfter: time.Duration(f.wait.Load()), Policy: retryafter.Policy{Name: "fixed"}}, nil
}

// TestRefusalMillis: the wait is rounded up to the millisecond, never to 0, and a wait whose
// milliseconds would not fit a Duration once grpc-go multiplies them back (it would wrap into
// an immediate retry) is "do not retry".
func TestRefusalMillis(t *testing.T) {
	const most = math.MaxInt64 / int64(time.Millisecond) // the largest pushback grpc-go reads without wrapping
	l := new(fixed)
	addr, _ := serve(t, grpc.UnaryInterceptor(grpclimit.UnaryServerInterceptor(l)))
	client := dial(t, addr)
	for _, c := range []struct {
		wait     time.Duration
		pushback string
	}{
		{0, "1"}, {-time.Second, "1"}, {1, "1"}, {time.Millisecond, "1"}, {time.Millisecond + 1, "2"},
		{999*time.Millisecond + 999_999, "1000"}, {time.Hour, "3600000"},
		{time.Duration(most) * time.Millisecond, strconv.FormatInt(most, 10)},
		{time.Duration(most)*time.Millisecond + 1, "-1"},
		{rate.InfDuration - 1, "-1"}, {rate.InfDuration, "-1"},
	} {
		l.wait.Store(int64(c.wait))
		a := call(t.Context(), client)
		if a.st.Code() != codes.ResourceExhausted || strings.Join(a.pushback, ",") != c.pushback {
			t.Fatalf("wait %v: %v, pushback %q; want %s", c.wait, a.err, a.pushback, c.pushback)
		}
		if c.pushback == "-1" {
			if a.retryInfo != nil {
				t.Fatalf("wait %v: RetryInfo %v beside a pushback of -1", c.wait, a.retryInfo)
			}
			continue
		}
		if ms, _ := strconv.ParseInt(c.pushback, 10, 64); a.retryInfo.GetRetryDelay().AsDuration() != time.Duration(ms)*time.Millisecond {
			t.Fatalf("wait %v: RetryInfo %v, pushback %s", c.wait, a.retryInfo, c.pushback)
		}
	}
}

// policyOf is a Limiter that refuses every call under the policy the test sets.
type policyOf struct {
	p atomic.Pointer[retryafter.Policy]
}

func (l *policyOf) Decide(context.Context, string, int, time.Time) (retryafter.Decision, error) {
	return retryafter.Decision{RetryAfter: time.Second, Policy: *l.p.Load()}, nil
}

// restored matches the rate in a QuotaFailure's description.
var restored = regexp.MustCompile(`^rate limit default exceeded: 2 at once, (about )?([0-9]+(\.[0-9]+)?) restored per (second|minute|hour|day)$`)

// TestQuotaFailureRate: the QuotaFailure states the rate as people write it, a whole number per
// second, minute, hour or day where there is one ("40 restored per minute", not
// 0.6666666666666666 per second), a short decimal, or else about three figures; over random
// rates the number read back is the rate, exactly when not "about", and within half a percent
// when it is.
func TestQuotaFailureRate(t *testing.T) {
	l := new(policyOf)
	addr, _ := serve(t, grpc.UnaryInterceptor(grpclimit.UnaryServerInterceptor(l)))
	client := dial(t, addr)
	describe := func(limit rate.Limit) string {
		l.p.Store(&retryafter.Policy{Limit: limit, Burst: 2})
		a := call(t.Context(), client)
		if a.quota == nil || len(a.quota.GetViolations()) != 1 {
			t.Fatalf("rate %v: %v, want one violation in a QuotaFailure", limit, a.err)
		}
		return a.quota.GetViolations()[0].GetDescription()
	}
	for _, c := range []struct {
		limit rate.Limit
		want  string
	}{
		{10, "10 restored per second"},
		{2.0 / 3, "40 restored per minute"},
		{rate.Every(1500 * time.Millisecond), "40 restored per minute"},
		{rate.Every(time.Minute), "1 restored per minute"},
		{rate.Every(time.Hour), "1 restored per hour"},
		{rate.Every(24 * time.Hour), "1 restored per day"},
		{1.5, "1.5 restored per second"},
		{0.3, "18 restored per minute"},
		{1e9, "1000000000 restored per second"},
		{rate.Every(7 * time.Second), "about 8.57 restored per minute"},
		{rate.Every(7 * 24 * time.Hour), "about 0.143 restored per day"},
		{1234.5678, "about 1235 restored per second"},
	} {
		if got := describe(c.limit); !strings.HasSuffix(got, ", "+c.want) {
			t.Errorf("rate %v: %q, want it to end %q", c.limit, got, c.want)
		}
	}
	per := map[string]float64{"second": 1, "minute": 60, "hour": 3600, "day": 86400}
	rng := rand.New(rand.NewPCG(60, 8))
	for range 300 {
		limit := math.Pow(10, -7+16*rng.Float64())
		if rng.IntN(2) == 0 { // a whole number per a unit, or a fraction of one per second
			limit = float64(1+rng.IntN(1000)) / []float64{1, 60, 3600, 86400, float64(2 + rng.IntN(9))}[rng.IntN(5)]
		}
		got := describe(rate.Limit(limit))
		m := restored.FindStringSubmatch(got)
		if m == nil {
			t.Fatalf("rate %v: %q, not a number per second, minute, hour or day", limit, got)
		}
		n, _ := strconv.ParseFloat(m[2], 64)
		tolerance := 1e-9
		if m[1] != "" {
			tolerance = 5e-3
			if digits := strings.TrimLeft(strings.ReplaceAll(m[2], ".", ""), "0"); len(digits) > 4 && strings.Contains(m[2], ".") {
				t.Errorf("rate %v: %q, more figures than about three", limit, got)
			}
		}
		if back := n / per[m[4]]; math.Abs(back-limit) > tolerance*limit {
			t.Errorf("rate %v: %q reads back as %v a second", limit, got, back)
		}
	}
}

// TestCallAllocs: a call from a peer that called before allocates nothing when admitted; 12
// times when refused: its message and pushback, the trailer's map, and the status with its
// RetryInfo and QuotaFailure, which grpc-go's status.FromProto copies (9 of them); and 10 times
// when the limiter fails, the limiter's error among them.
func TestCallAllocs(t *testing.T) {
	ctx := peer.NewContext(t.Context(), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(203, 0, 113, 7), Port: 50000}})
	ctx = grpc.NewContextWithServerTransportStream(ctx, takesTrailer{})
	info := &grpc.UnaryServerInfo{FullMethod: "/s/m"}
	handler := func(context.Context, any) (any, error) { return nil, nil }
	for _, c := range []struct {
		name    string
		limiter retryafter.Limiter
		allocs  float64
	}{
		{"admitted", retryafter.NewTokenBucket(rate.Inf, 1), 0},
		{"admitted by a bucket", retryafter.NewTokenBucket(rate.Every(time.Hour)*(1<<30), 1<<30), 0},
		{"refused", retryafter.NewTokenBucket(rate.Every(time.Hour), 1), 12},
		{"failed", failing{}, 10},
	} {
		intercept := grpclimit.UnaryServerInterceptor(c.limiter)
		intercept(ctx, nil, info, handler) // spends the burst of one, and keeps the peer's key
		_, err := intercept(ctx, nil, info, handler)
		if (err == nil) != (c.allocs == 0) {
			t.Fatalf("%s: error %v", c.name, err)
		}
		if n := testing.AllocsPerRun(100, func() { intercept(ctx, nil, info, handler) }); n > c.allocs {
			t.Errorf("%s: %v allocations a call, want at most %v", c.name, n, c.allocs)
		}
	}
}

// takesTrailer is a server transport stream that takes a call's header and trailer.
type takesTrailer struct{}

func (takesTrailer) Method() string               { return "/s/m" }
func (takesTrailer) SetHeader(metadata.MD) error  { return nil }
func (takesTrailer) SendHeader(metadata.MD) error { return nil }
func (takesTrailer) SetTrailer(metadata.MD) error { return nil }
