package connectlimit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/time/rate"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/retryafter/retryafter"
	"github.com/retryafter/retryafter/connectlimit"
	"github.com/retryafter/retryafter/edge"
	"github.com/retryafter/retryafter/internal/testkit"
)

// stream opens the server stream of s with a request of n letters, reads it to its end and
// returns what ended it.
func stream(s *service, n int, opts ...connect.ClientOption) error {
	c := connect.NewClient[wrapperspb.StringValue, wrapperspb.StringValue](h2c(), s.URL+streamProcedure, opts...)
	st, err := c.CallServerStream(context.Background(), connect.NewRequest(wrapperspb.String(strings.Repeat("a", n))))
	if err != nil {
		return err
	}
	defer st.Close()
	for st.Receive() {
	}
	return st.Err()
}

// TestMessageCharge: a stream is charged, when it ends, one token for each message it carried
// (its request and its 9 answers: 10), besides the 1 it was decided at: 11 from a bucket of 10
// at 1 a second leaves a debt of 1, so that the next call waits exactly 2 s, on every protocol.
// Without the option, the stream costs 1.
func TestMessageCharge(t *testing.T) {
	for _, p := range protocols {
		for _, charge := range []bool{true, false} {
			clk := testkit.NewClock(t0)
			l := retryafter.NewTokenBucket(1, 10)
			opts := []connectlimit.Option{connectlimit.WithClock(clk.Now)}
			if charge {
				opts = append(opts, connectlimit.WithMessageCharge(l))
			}
			s := serve(t, connectlimit.NewInterceptor(l, opts...))
			if err := stream(s, 9, p.opts...); err != nil {
				t.Fatalf("%s: the stream: %v", p.name, err)
			}
			_, err := sayClient(s, p.opts...).CallUnary(context.Background(), connect.NewRequest(wrapperspb.String("x")))
			wait, _ := retryDelay(err)
			if charge && (connect.CodeOf(err) != connect.CodeResourceExhausted || wait != 2*time.Second) {
				t.Fatalf("%s: after a stream of 10 messages on a bucket of 10: %v, RetryInfo %v; want 2s", p.name, err, wait)
			}
			if !charge && err != nil {
				t.Fatalf("%s: without the charge: %v", p.name, err)
			}
		}
	}
}

// TestDryRunAndExempt: a dry run refuses nothing and tells the hook what it would have done,
// spending nothing; an exempt call is neither counted nor refused, and its key is not asked.
func TestDryRunAndExempt(t *testing.T) {
	var outcomes []string
	hook := connectlimit.WithDecisionHook(func(_ connectlimit.Call, o retryafter.Outcome, _ retryafter.Decision) {
		outcomes = append(outcomes, o.String())
	})
	l := retryafter.NewTokenBucket(rate.Every(time.Hour), 1)
	s := serve(t, connectlimit.NewInterceptor(l, hook, connectlimit.WithDryRun(true), connectlimit.WithClock((testkit.NewClock(t0)).Now)))
	for range 3 {
		if _, err := sayClient(s).CallUnary(context.Background(), connect.NewRequest(wrapperspb.String("x"))); err != nil {
			t.Fatalf("dry run: %v", err)
		}
	}
	if want := []string{"admitted", "dry_run_refused", "dry_run_refused"}; !reflect.DeepEqual(outcomes, want) {
		t.Fatalf("dry run told %q, want %q", outcomes, want)
	}
	outcomes = nil
	keyAsked := false
	s = serve(t, connectlimit.NewInterceptor(l, hook,
		connectlimit.WithExempt(func(c connectlimit.Call) bool { return c.Spec.Procedure == streamProcedure }),
		connectlimit.WithKeyFunc(func(connectlimit.Call) (string, error) { keyAsked = true; return "k", nil })))
	for range 3 {
		if err := stream(s, 1); err != nil {
			t.Fatalf("exempt: %v", err)
		}
	}
	if want := []string{"exempt", "exempt", "exempt"}; !reflect.DeepEqual(outcomes, want) || keyAsked {
		t.Fatalf("exempt told %q (key asked %v), want %q", outcomes, keyAsked, want)
	}
}

// TestRateLimitFields: the RateLimit fields of each call, admitted (response headers) and
// refused (the error's metadata), are those retryafter.LimitWith sends over HTTP for the same
// limiter, clock and policy name.
func TestRateLimitFields(t *testing.T) {
	for _, p := range protocols {
		clk := testkit.NewClock(t0)
		s := serve(t, connectlimit.NewInterceptor(retryafter.NewTokenBucket(rate.Every(time.Minute), 2),
			connectlimit.WithClock(clk.Now), connectlimit.WithRateLimitFields("per-client")))
		limit := retryafter.LimitWith(retryafter.NewTokenBucket(rate.Every(time.Minute), 2),
			retryafter.WithClock(clk.Now), retryafter.WithRateLimitFields("per-client"))(http.NotFoundHandler())
		for i := range 3 {
			res, err := sayClient(s, p.opts...).CallUnary(context.Background(), connect.NewRequest(wrapperspb.String("x")))
			var got http.Header
			if err != nil {
				got = err.(*connect.Error).Meta()
			} else {
				got = res.Header()
			}
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			r.RemoteAddr = "127.0.0.1:1"
			w := httptest.NewRecorder()
			limit.ServeHTTP(w, r)
			for _, f := range []string{"RateLimit", "RateLimit-Policy"} {
				if got.Get(f) == "" || got.Get(f) != w.Header().Get(f) {
					t.Fatalf("%s call %d: %s %q, HTTP sends %q", p.name, i, f, got.Get(f), w.Header().Get(f))
				}
			}
			clk.Advance(10 * time.Second)
		}
	}
}

// TestCanceled: a call whose context ends while the limiter decides is not admitted for the
// limiter's error, even failing open, and the error hook is not told.
func TestCanceled(t *testing.T) {
	outcomes := make(chan retryafter.Outcome, 1)
	errs := make(chan error, 1)
	l := limiterFunc(func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() })
	s := serve(t, connectlimit.NewInterceptor(l, connectlimit.WithFailOpen(true),
		connectlimit.WithErrorHook(func(_ connectlimit.Call, err error) { errs <- err }),
		connectlimit.WithDecisionHook(func(_ connectlimit.Call, o retryafter.Outcome, _ retryafter.Decision) { outcomes <- o })))
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := sayClient(s).CallUnary(ctx, connect.NewRequest(wrapperspb.String("x"))); err == nil {
		t.Fatal("a canceled call succeeded")
	}
	select {
	case o := <-outcomes:
		if o != edge.FailedClosed {
			t.Fatalf("a call canceled while the limiter decided: %v, want failed_closed", o)
		}
	case err := <-errs:
		t.Fatalf("the error hook was told %v", err)
	case <-time.After(time.Minute):
		t.Fatal("the server never decided the canceled call")
	}
}

// limiterFunc is a Limiter that fails with what fn returns.
type limiterFunc func(context.Context) error

func (f limiterFunc) Decide(ctx context.Context, _ string, _ int, _ time.Time) (retryafter.Decision, error) {
	return retryafter.Decision{}, f(ctx)
}

// userKey is the context key an authenticating interceptor puts the caller's user under.
type userKey struct{}

// TestKeyFromContext: a key function reads what an interceptor before it put in the call's
// context: two users behind one address are two clients.
func TestKeyFromContext(t *testing.T) {
	auth := connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			return next(context.WithValue(ctx, userKey{}, req.Header().Get("User")), req)
		}
	})
	byUser := connectlimit.WithKeyFunc(func(c connectlimit.Call) (string, error) { return c.Context.Value(userKey{}).(string), nil })
	s := serve(t, auth, connectlimit.NewInterceptor(retryafter.NewTokenBucket(rate.Every(time.Hour), 1), byUser))
	var got []string
	for _, user := range []string{"ann", "bob", "ann"} {
		req := connect.NewRequest(wrapperspb.String("x"))
		req.Header().Set("User", user)
		_, err := sayClient(s).CallUnary(context.Background(), req)
		if err != nil {
			got = append(got, connect.CodeOf(err).String())
		} else {
			got = append(got, "ok")
		}
	}
	if want := []string{"ok", "ok", "resource_exhausted"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("ann, bob, ann: %q, want %q", got, want)
	}
}
