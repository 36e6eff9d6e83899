package connectlimit_test

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/time/rate"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/retryafter/retryafter"
	"github.com/retryafter/retryafter/connectlimit"
	"github.com/retryafter/retryafter/internal/testkit"
)

// TestRoundTrip: on each protocol, over random policies, the call after the burst ends with
// resource_exhausted and a RetryInfo of the exact wait rounded up to the millisecond, never 0,
// said again as the pushback on gRPC and gRPC-Web and as Retry-After (rounded up to the second)
// on the Connect protocol; it never reaches the handler. A client that waits exactly the
// RetryInfo is admitted, and one that waits a millisecond less is not.
func TestRoundTrip(t *testing.T) {
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(58, 3))
			for i := range 40 {
				limit := rate.Limit(0.01 + rng.Float64()*rng.Float64()*200)
				burst := 1 + rng.IntN(4)
				clk := testkit.NewClock(t0.Add(time.Duration(rng.Int64N(int64(time.Hour)))))
				s := serve(t, connectlimit.NewInterceptor(retryafter.NewTokenBucket(limit, burst), connectlimit.WithClock(clk.Now)))
				c := sayClient(s, p.opts...)
				say := func() error {
					_, err := c.CallUnary(context.Background(), connect.NewRequest(wrapperspb.String("x")))
					return err
				}
				for range burst {
					if err := say(); err != nil {
						t.Fatalf("policy %d (%v/s, burst %d): within the burst: %v", i, limit, burst, err)
					}
				}
				err := say()
				wait, ok := retryDelay(err)
				if connect.CodeOf(err) != connect.CodeResourceExhausted || !ok || wait < time.Millisecond || wait%time.Millisecond != 0 || s.reached.Load() != int64(burst) {
					t.Fatalf("policy %d (%v/s, burst %d): after the burst: %v, RetryInfo %v %v, handler reached %d times", i, limit, burst, err, wait, ok, s.reached.Load())
				}
				var ce *connect.Error
				errors.As(err, &ce)
				pushback, retryAfter := ce.Meta().Get(connectlimit.PushbackKey), ce.Meta().Get("Retry-After")
				if p.name == "connect" {
					if secs := (wait + time.Second - 1) / time.Second; retryAfter != strconv.FormatInt(int64(secs), 10) || pushback != "" {
						t.Fatalf("policy %d: Retry-After %q and pushback %q for a RetryInfo of %v", i, retryAfter, pushback, wait)
					}
				} else if pushback != strconv.FormatInt(wait.Milliseconds(), 10) || retryAfter != "" {
					t.Fatalf("policy %d: pushback %q and Retry-After %q for a RetryInfo of %v", i, pushback, retryAfter, wait)
				}
				clk.Advance(wait - time.Millisecond)
				if err := say(); connect.CodeOf(err) != connect.CodeResourceExhausted {
					t.Fatalf("policy %d (%v/s, burst %d): a millisecond before the RetryInfo's %v: %v", i, limit, burst, wait, err)
				}
				clk.Advance(time.Millisecond)
				if err := say(); err != nil {
					t.Fatalf("policy %d (%v/s, burst %d): waited the RetryInfo's %v: %v", i, limit, burst, wait, err)
				}
			}
		})
	}
}

// TestConnectHTTP: an HTTP client that speaks the Connect protocol's unary JSON by hand is
// refused 429 with Retry-After and Date, reads the wait with retryafter.ParseRetryAfter, waits
// exactly that long and is admitted.
func TestConnectHTTP(t *testing.T) {
	clk := testkit.NewClock(t0)
	s := serve(t, connectlimit.NewInterceptor(retryafter.NewTokenBucket(rate.Every(1500*time.Millisecond), 1), connectlimit.WithClock(clk.Now)))
	post := func() *http.Response {
		t.Helper()
		resp, err := http.Post(s.URL+sayProcedure, "application/json", strings.NewReader(`"x"`))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	if resp := post(); resp.StatusCode != http.StatusOK {
		t.Fatalf("first: %d", resp.StatusCode)
	}
	resp := post()
	wait, ok := retryafter.ParseRetryAfter(resp.Header, clk.Now())
	if _, err := http.ParseTime(resp.Header.Get("Date")); err != nil || resp.StatusCode != http.StatusTooManyRequests || !ok || wait != 2*time.Second {
		t.Fatalf("second: %d, Retry-After %q, Date %q", resp.StatusCode, resp.Header.Get("Retry-After"), resp.Header.Get("Date"))
	}
	clk.Advance(wait)
	if resp := post(); resp.StatusCode != http.StatusOK {
		t.Fatalf("after Retry-After: %d", resp.StatusCode)
	}
}

// statusLog is an http.RoundTripper that keeps the status of each response.
type statusLog struct {
	rt    http.RoundTripper
	codes []int
}

func (l *statusLog) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := l.rt.RoundTrip(r)
	if err == nil {
		l.codes = append(l.codes, resp.StatusCode)
	}
	return resp, err
}

// TestStreamRefused: a stream is decided when it opens; a refused one ends, on every protocol,
// with resource_exhausted and the RetryInfo before its handler runs, and on the Connect protocol
// its HTTP answer is 200, the error at the end of the stream.
func TestStreamRefused(t *testing.T) {
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			clk := testkit.NewClock(t0)
			s := serve(t, connectlimit.NewInterceptor(retryafter.NewTokenBucket(rate.Every(time.Second), 1), connectlimit.WithClock(clk.Now)))
			log := &statusLog{rt: h2c().Transport}
			c := connect.NewClient[wrapperspb.StringValue, wrapperspb.StringValue](&http.Client{Transport: log}, s.URL+streamProcedure, p.opts...)
			stream := func() (int, error) {
				st, err := c.CallServerStream(context.Background(), connect.NewRequest(wrapperspb.String("abc")))
				if err != nil {
					return 0, err
				}
				defer st.Close()
				n := 0
				for st.Receive() {
					n++
				}
				return n, st.Err()
			}
			if n, err := stream(); n != 3 || err != nil {
				t.Fatalf("first stream: %d messages, %v", n, err)
			}
			n, err := stream()
			if wait, ok := retryDelay(err); n != 0 || connect.CodeOf(err) != connect.CodeResourceExhausted || !ok || wait != time.Second || s.reached.Load() != 1 {
				t.Fatalf("second stream: %d messages, %v, RetryInfo %v, handler reached %d times", n, err, wait, s.reached.Load())
			}
			if log.codes[1] != http.StatusOK {
				t.Fatalf("the refused stream's HTTP status: %d, want 200", log.codes[1])
			}
		})
	}
}

// TestFailures: a key function that fails ends the call with internal (a Connect unary call's
// HTTP 500) and a store that is down with unavailable and a wait of one second (503 with
// Retry-After: 1), as retryafter.Limit answers them; failing open admits both; the error's
// text never reaches the client, and the hooks are told.
func TestFailures(t *testing.T) {
	badKey := connectlimit.WithKeyFunc(func(connectlimit.Call) (string, error) { return "", errors.New("secret key error") })
	for _, tc := range []struct {
		name       string
		l          retryafter.Limiter
		opts       []connectlimit.Option
		code       connect.Code
		status     int
		retryAfter string
	}{
		{"key fails", retryafter.NewTokenBucket(1, 1), []connectlimit.Option{badKey}, connect.CodeInternal, 500, ""},
		{"store down", down{}, nil, connect.CodeUnavailable, 503, "1"},
		{"key fails, open", retryafter.NewTokenBucket(1, 1), []connectlimit.Option{badKey, connectlimit.WithFailOpen(true)}, 0, 200, ""},
		{"store down, open", down{}, []connectlimit.Option{connectlimit.WithFailOpen(true)}, 0, 200, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var told []string
			opts := append([]connectlimit.Option{
				connectlimit.WithErrorHook(func(_ connectlimit.Call, err error) { told = append(told, err.Error()) }),
				connectlimit.WithDecisionHook(func(_ connectlimit.Call, o retryafter.Outcome, _ retryafter.Decision) {
					told = append(told, o.String())
				}),
			}, tc.opts...)
			s := serve(t, connectlimit.NewInterceptor(tc.l, opts...))
			for _, p := range protocols {
				_, err := sayClient(s, p.opts...).CallUnary(context.Background(), connect.NewRequest(wrapperspb.String("x")))
				if connect.CodeOf(err) != tc.code && !(tc.code == 0 && err == nil) {
					t.Fatalf("%s: %v, want %v", p.name, err, tc.code)
				}
				if err != nil && (strings.Contains(err.Error(), "secret") || strings.Contains(err.Error(), "store down")) {
					t.Fatalf("%s: the error reached the client: %v", p.name, err)
				}
				if wait, ok := retryDelay(err); tc.code == connect.CodeUnavailable && (!ok || wait != time.Second) {
					t.Fatalf("%s: RetryInfo %v %v, want 1s", p.name, wait, ok)
				}
			}
			resp, err := http.Post(s.URL+sayProcedure, "application/json", strings.NewReader(`"x"`))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tc.status || resp.Header.Get("Retry-After") != tc.retryAfter || resp.Header.Get("Date") == "" {
				t.Fatalf("Connect over HTTP: %d, Retry-After %q, Date %q", resp.StatusCode, resp.Header.Get("Retry-After"), resp.Header.Get("Date"))
			}
			if want := 4 * 2; len(told) != want || !strings.Contains(told[0], "secret key error") && !strings.Contains(told[0], "store down") {
				t.Fatalf("hooks told %q", told)
			}
		})
	}
}

// TestEmptyKeyCounted: a key function may name a caller "" (anonymous callers, say): its calls
// are counted under "", their streams' messages charged and their RateLimit fields sent, as
// under any other key.
func TestEmptyKeyCounted(t *testing.T) {
	for _, key := range []string{"k", ""} {
		clk := testkit.NewClock(t0)
		l := retryafter.NewTokenBucket(1, 10)
		s := serve(t, connectlimit.NewInterceptor(l, connectlimit.WithClock(clk.Now),
			connectlimit.WithMessageCharge(l), connectlimit.WithRateLimitFields("default"),
			connectlimit.WithKeyFunc(func(connectlimit.Call) (string, error) { return key, nil })))
		if err := stream(s, 9); err != nil {
			t.Fatal(err)
		}
		_, err := sayClient(s).CallUnary(context.Background(), connect.NewRequest(wrapperspb.String("x")))
		if wait, _ := retryDelay(err); connect.CodeOf(err) != connect.CodeResourceExhausted || wait != 2*time.Second {
			t.Errorf("key %q: after a stream of 10 messages on a bucket of 10: %v, RetryInfo %v; want 2s", key, err, wait)
		}
		clk.Advance(time.Hour)
		res, err := sayClient(s).CallUnary(context.Background(), connect.NewRequest(wrapperspb.String("x")))
		if err != nil || res.Header().Get("RateLimit") == "" {
			t.Errorf("key %q: an admitted call: %v, RateLimit %q; want the field", key, err, res.Header().Get("RateLimit"))
		}
	}
}

// TestDryRunMessageCharge: a stream that a dry run would have refused is passed on, and its
// messages are not charged, since enforcing would not have served them.
func TestDryRunMessageCharge(t *testing.T) {
	run := func(dry bool) time.Duration {
		clk := testkit.NewClock(t0)
		l := retryafter.NewTokenBucket(1, 1)
		var last time.Duration
		s := serve(t, connectlimit.NewInterceptor(l, connectlimit.WithClock(clk.Now), connectlimit.WithMessageCharge(l),
			connectlimit.WithDryRun(dry),
			connectlimit.WithDecisionHook(func(_ connectlimit.Call, _ retryafter.Outcome, d retryafter.Decision) { last = d.RetryAfter })))
		sayClient(s).CallUnary(context.Background(), connect.NewRequest(wrapperspb.String("x"))) // spends the burst
		stream(s, 9)                                                                             // refused, or would have been
		sayClient(s).CallUnary(context.Background(), connect.NewRequest(wrapperspb.String("x")))
		return last
	}
	if enforced, dry := run(false), run(true); enforced != dry || enforced != time.Second-time.Microsecond {
		t.Errorf("the wait of the last call: enforced %v, in a dry run %v; want 999.999ms for both", enforced, dry)
	}
}
