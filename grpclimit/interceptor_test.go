package grpclimit_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"

	"github.com/retryafter/retryafter"
	"github.com/retryafter/retryafter/edge"
	"github.com/retryafter/retryafter/grpclimit"
)

// lastWait records the RetryAfter of each key's last refusal, as the limiter decided it.
type lastWait struct {
	mu   sync.Mutex
	wait map[string]time.Duration
}

func (w *lastWait) hook(ctx context.Context, method string, o retryafter.Outcome, d retryafter.Decision) {
	if o != edge.Refused {
		return
	}
	key, _ := keyFromMetadata(ctx, method)
	w.mu.Lock()
	w.wait[key] = d.RetryAfter
	w.mu.Unlock()
}

func (w *lastWait) of(key string) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.wait[key]
}

// TestExactWait: over many policies, a refused call's RetryInfo and pushback agree and are the
// limiter's wait rounded up to the millisecond; a call made exactly that much later is
// admitted and one made a millisecond earlier is not. Real grpc-go server and client on
// loopback; the server's clock is injected.
func TestExactWait(t *testing.T) {
	rng := rand.New(rand.NewPCG(43, 1))
	policies := make(map[string]retryafter.Policy)
	for i := range 40 {
		p := retryafter.Policy{Name: "p" + strconv.Itoa(i), Limit: rate.Limit(0.2 + rng.Float64()*rng.Float64()*3000), Burst: 1 + rng.IntN(5)}
		policies[p.Name] = p
	}
	bucket := retryafter.NewTokenBucket(1, 1, retryafter.WithPolicyFunc(func(key string) retryafter.Policy {
		return policies[key]
	}))
	clk := newClock(t0)
	waits := &lastWait{wait: make(map[string]time.Duration)}
	addr, _ := serve(t, grpc.UnaryInterceptor(grpclimit.UnaryServerInterceptor(bucket,
		grpclimit.WithClock(clk.now), grpclimit.WithKeyFunc(keyFromMetadata), grpclimit.WithDecisionHook(waits.hook))))
	client := dial(t, addr)

	for key, p := range policies {
		ctx := withKey(t.Context(), key, 1)
		start := t0.Add(time.Duration(rng.Int64N(int64(time.Hour))) + time.Hour) // a fresh bucket
		clk.set(start)
		for i := range p.Burst {
			if a := call(ctx, client); a.err != nil {
				t.Fatalf("%s: call %d of the burst of %d: %v", key, i+1, p.Burst, a.err)
			}
		}
		a := call(ctx, client)
		wait := checkRefusal(t, key, a, waits.of(key))
		if !strings.Contains(a.quota.String(), "policy:"+key) {
			t.Fatalf("%s: QuotaFailure %v does not name the policy", key, a.quota)
		}
		clk.set(start.Add(wait - time.Millisecond))
		if e := call(ctx, client); e.st.Code() != codes.ResourceExhausted {
			t.Fatalf("%s (%v): a call a millisecond before the wait of %v ended: %v", key, p, wait, e.err)
		}
		clk.set(start.Add(wait))
		if e := call(ctx, client); e.err != nil {
			t.Fatalf("%s (%v): a call exactly the wait of %v later: %v", key, p, wait, e.err)
		}
	}
}

// checkRefusal checks that a is a refusal whose RetryInfo and pushback both say the limiter's
// wait rounded up to the millisecond, and returns that wait.
func checkRefusal(t *testing.T, key string, a answer, limiterWait time.Duration) time.Duration {
	t.Helper()
	if a.st.Code() != codes.ResourceExhausted {
		t.Fatalf("%s: %v, want RESOURCE_EXHAUSTED", key, a.err)
	}
	if a.retryInfo == nil || len(a.pushback) != 1 || a.quota == nil {
		t.Fatalf("%s: RetryInfo %v, pushback %q, QuotaFailure %v: want all three", key, a.retryInfo, a.pushback, a.quota)
	}
	want := (limiterWait + time.Millisecond - 1).Truncate(time.Millisecond)
	if got := a.retryInfo.GetRetryDelay().AsDuration(); got != want {
		t.Fatalf("%s: RetryInfo %v, want the limiter's %v rounded up: %v", key, got, limiterWait, want)
	}
	if got := a.pushback[0]; got != strconv.FormatInt(want.Milliseconds(), 10) {
		t.Fatalf("%s: pushback %q, want %d (the limiter's %v)", key, got, want.Milliseconds(), limiterWait)
	}
	return want
}

// TestNeverPushback: a call that can never be admitted gets a pushback of -1, which tells a
// grpc-go client not to retry, and no RetryInfo; it costs nothing.
func TestNeverPushback(t *testing.T) {
	clk := newClock(t0)
	addr, _ := serve(t, grpc.UnaryInterceptor(grpclimit.UnaryServerInterceptor(retryafter.NewTokenBucket(1, 3),
		grpclimit.WithClock(clk.now), grpclimit.WithKeyFunc(keyFromMetadata), grpclimit.WithCost(costFromMetadata))))
	client := dial(t, addr)
	for _, cost := range []int{4, 100, math.MaxInt} {
		a := call(withKey(t.Context(), "k", cost), client)
		if a.st.Code() != codes.ResourceExhausted || a.retryInfo != nil || fmt.Sprint(a.pushback) != "[-1]" || a.quota == nil {
			t.Fatalf("cost %d above the burst: %v, RetryInfo %v, pushback %q, QuotaFailure %v", cost, a.err, a.retryInfo, a.pushback, a.quota)
		}
	}
	for i := range 3 {
		if a := call(withKey(t.Context(), "k", 1), client); a.err != nil {
			t.Fatalf("call %d of the burst after the refusals: %v", i+1, a.err)
		}
	}
}

// failing is a Limiter whose store is down.
type failing struct{}

func (failing) Decide(context.Context, string, int, time.Time) (retryafter.Decision, error) {
	return retryafter.Decision{}, errors.New("dial tcp 10.0.0.7:6379: connection refused")
}

// outcomes records the outcomes the decision hook is told of.
type outcomes struct {
	mu sync.Mutex
	os []retryafter.Outcome
}

func (o *outcomes) hook(_ context.Context, _ string, out retryafter.Outcome, _ retryafter.Decision) {
	o.mu.Lock()
	o.os = append(o.os, out)
	o.mu.Unlock()
}

func (o *outcomes) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return fmt.Sprint(o.os)
}

// TestFailures: a limiter or key function that fails ends the call closed by default, with
// UNAVAILABLE and a one-second wait or INTERNAL, never showing the error, and admits it when
// failing open; the error hook is told.
func TestFailures(t *testing.T) {
	noKey := func(context.Context, string) (string, error) { return "", errors.New("secret detail") }
	for _, c := range []struct {
		name     string
		l        retryafter.Limiter
		opts     []grpclimit.Option
		code     codes.Code
		pushback string
		outcome  string
	}{
		{"limiter, closed", failing{}, nil, codes.Unavailable, "1000", "[failed_closed]"},
		{"limiter, open", failing{}, []grpclimit.Option{grpclimit.WithFailOpen(true)}, codes.OK, "", "[failed_open]"},
		{"key, closed", retryafter.NewTokenBucket(1, 1), []grpclimit.Option{grpclimit.WithKeyFunc(noKey)}, codes.Internal, "", "[failed_closed]"},
		{"key, open", retryafter.NewTokenBucket(1, 1), []grpclimit.Option{grpclimit.WithKeyFunc(noKey), grpclimit.WithFailOpen(true)}, codes.OK, "", "[failed_open]"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var errs []error
			var o outcomes
			opts := append(c.opts, grpclimit.WithDecisionHook(o.hook),
				grpclimit.WithErrorHook(func(_ context.Context, _ string, err error) { errs = append(errs, err) }))
			addr, svc := serve(t, grpc.UnaryInterceptor(grpclimit.UnaryServerInterceptor(c.l, opts...)))
			a := call(t.Context(), dial(t, addr))
			if a.st.Code() != c.code || strings.Join(a.pushback, ",") != c.pushback {
				t.Fatalf("%v, pushback %q; want %v, pushback %q", a.err, a.pushback, c.code, c.pushback)
			}
			if c.pushback != "" && a.retryInfo.GetRetryDelay().AsDuration() != time.Second {
				t.Fatalf("RetryInfo %v, want 1s", a.retryInfo)
			}
			if strings.Contains(a.st.Message(), "10.0.0.7") || strings.Contains(a.st.Message(), "secret") {
				t.Fatalf("the client sees the error: %q", a.st.Message())
			}
			if len(errs) != 1 || o.String() != c.outcome || (svc.calls.Load() == 1) != (c.code == codes.OK) {
				t.Fatalf("errors %v, outcomes %v, handler ran %d times", errs, o.String(), svc.calls.Load())
			}
		})
	}
}

// TestExemptAndDryRun: an exempt call is neither counted nor refused, and a dry run passes a
// call it would refuse, spending nothing.
func TestExemptAndDryRun(t *testing.T) {
	clk := newClock(t0)
	var o outcomes
	bucket := retryafter.NewTokenBucket(1, 1)
	exempt := func(ctx context.Context, _ string) bool {
		return len(metadata.ValueFromIncomingContext(ctx, "exempt")) > 0
	}
	addr, svc := serve(t, grpc.ChainUnaryInterceptor(
		grpclimit.UnaryServerInterceptor(bucket, grpclimit.WithClock(clk.now), grpclimit.WithExempt(exempt), grpclimit.WithDecisionHook(o.hook)),
		grpclimit.UnaryServerInterceptor(bucket, grpclimit.WithClock(clk.now), grpclimit.WithKeyFunc(keyFromMetadata),
			grpclimit.WithDryRun(true), grpclimit.WithDecisionHook(o.hook))))
	client := dial(t, addr)
	ctx := withKey(t.Context(), "dry", 1)
	for range 3 {
		if a := call(metadata.AppendToOutgoingContext(ctx, "exempt", "1"), client); a.err != nil {
			t.Fatal(a.err)
		}
	}
	if a := call(ctx, client); a.err != nil { // admitted by the first, refused dry by the second
		t.Fatal(a.err)
	}
	want := "[exempt admitted exempt dry_run_refused exempt dry_run_refused admitted dry_run_refused]"
	if o.String() != want || svc.calls.Load() != 4 {
		t.Fatalf("outcomes %v, handler ran %d times; want %v, 4", o.String(), svc.calls.Load(), want)
	}
	if d, _ := bucket.Decide(t.Context(), "dry", 1, t0.Add(time.Second)); !d.Allowed {
		t.Fatalf("a second after the dry run's refusals: %+v; they spent quota", d)
	}
}

// TestStream: a stream is decided when it opens; a refused one ends before its handler runs,
// with the same RetryInfo and pushback as a unary call, which its client reads.
func TestStream(t *testing.T) {
	clk := newClock(t0)
	addr, svc := serve(t, grpc.StreamInterceptor(grpclimit.StreamServerInterceptor(retryafter.NewTokenBucket(rate.Every(time.Minute), 1),
		grpclimit.WithClock(clk.now))))
	client := dial(t, addr)
	open := func() (metadata.MD, error) { return openStream(t.Context(), client, 5) }
	if _, err := open(); !errors.Is(err, io.EOF) {
		t.Fatalf("first stream: %v, want it admitted", err)
	}
	trailer, err := open()
	checkRefusal(t, "stream", read(err, trailer), time.Minute-time.Microsecond)
	if svc.calls.Load() != 1 {
		t.Fatalf("the handler ran %d times, want once", svc.calls.Load())
	}
	clk.add(time.Minute)
	if _, err := open(); !errors.Is(err, io.EOF) {
		t.Fatalf("a stream a minute later: %v, want it admitted", err)
	}
}

// blocking is a Limiter whose store answers only when the call's context ends, with an error.
type blocking struct{}

func (blocking) Decide(ctx context.Context, _ string, _ int, _ time.Time) (retryafter.Decision, error) {
	<-ctx.Done()
	return retryafter.Decision{}, errors.New("i/o timeout")
}

// TestCallEnded: a call whose own context ends while the limiter decides is not admitted, and
// the error is not the store's: the error hook is not told.
func TestCallEnded(t *testing.T) {
	var o outcomes
	var errs atomic.Int64
	decided := make(chan struct{})
	addr, svc := serve(t, grpc.UnaryInterceptor(grpclimit.UnaryServerInterceptor(blocking{}, grpclimit.WithFailOpen(true),
		grpclimit.WithErrorHook(func(context.Context, string, error) { errs.Add(1) }),
		grpclimit.WithDecisionHook(func(ctx context.Context, m string, out retryafter.Outcome, d retryafter.Decision) {
			o.hook(ctx, m, out, d)
			close(decided)
		}))))
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if a := call(ctx, dial(t, addr)); a.st.Code() != codes.DeadlineExceeded {
		t.Fatalf("%v, want DEADLINE_EXCEEDED", a.err)
	}
	<-decided
	if o.String() != "[failed_closed]" || errs.Load() != 0 || svc.calls.Load() != 0 {
		t.Fatalf("outcomes %v, %d errors told, handler ran %d times; want [failed_closed], 0, 0", o.String(), errs.Load(), svc.calls.Load())
	}
}

// TestMessageCharge: with WithMessageCharge, a stream costs its opening and then each message
// it carried, charged when it ends; the key's next stream is refused while it is in debt, with
// the exact wait.
func TestMessageCharge(t *testing.T) {
	clk := newClock(t0)
	bucket := retryafter.NewTokenBucket(1, 4) // a token a second, 4 at once
	addr, _ := serve(t, grpc.StreamInterceptor(grpclimit.StreamServerInterceptor(bucket,
		grpclimit.WithClock(clk.now), grpclimit.WithMessageCharge(bucket))))
	client := dial(t, addr)
	stream := func(messages int) (metadata.MD, error) { return openStream(t.Context(), client, messages) }
	// 1 to open, then 6: 3 in debt, charged before the status the client reads is sent.
	if _, err := stream(6); !errors.Is(err, io.EOF) {
		t.Fatal(err)
	}
	trailer, err := stream(0)
	checkRefusal(t, "stream in debt", read(err, trailer), 4*time.Second-time.Microsecond)
	clk.add(4 * time.Second)
	if _, err := stream(0); !errors.Is(err, io.EOF) {
		t.Fatalf("a stream once the debt is repaid: %v", err)
	}
}

// TestDryRunMessageCharge: a stream that a dry run would have refused is passed on, and its
// messages are not charged, since enforcing would not have served them: the key is refused
// afterwards with the wait it has when enforced.
func TestDryRunMessageCharge(t *testing.T) {
	run := func(dry bool) time.Duration {
		clk := newClock(t0)
		bucket := retryafter.NewTokenBucket(1, 1)
		var last time.Duration
		addr, _ := serve(t, grpc.StreamInterceptor(grpclimit.StreamServerInterceptor(bucket,
			grpclimit.WithClock(clk.now), grpclimit.WithMessageCharge(bucket), grpclimit.WithDryRun(dry),
			grpclimit.WithDecisionHook(func(_ context.Context, _ string, _ retryafter.Outcome, d retryafter.Decision) {
				last = d.RetryAfter
			}))))
		client := dial(t, addr)
		openStream(t.Context(), client, 0) // spends the burst
		openStream(t.Context(), client, 5) // refused, or would have been
		openStream(t.Context(), client, 0)
		return last
	}
	if enforced, dry := run(false), run(true); enforced != dry || enforced != time.Second-time.Microsecond {
		t.Errorf("the wait of the last stream: enforced %v, in a dry run %v; want 999.999ms for both", enforced, dry)
	}
}
