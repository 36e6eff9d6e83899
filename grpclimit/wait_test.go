package grpclimit_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/retryafter/retryafter"
	"github.com/retryafter/retryafter/edge"
	"github.com/retryafter/retryafter/grpclimit"
)

// TestWaitHonoursGRPCTimeout: a call whose grpc-timeout ends before its place is refused with
// RESOURCE_EXHAUSTED, rather than held until DEADLINE_EXCEEDED; one whose timeout outlives the
// wait is served. Real grpc-go server and client on loopback; the server's clock stands still,
// so that every wait is the bucket's own.
func TestWaitHonoursGRPCTimeout(t *testing.T) {
	clk := newClock(t0)
	addr, _ := serve(t, grpc.UnaryInterceptor(grpclimit.UnaryServerInterceptor(retryafter.NewTokenBucket(10, 1),
		grpclimit.WithClock(clk.now), grpclimit.WithWait(time.Second))))
	client := dial(t, addr)
	if a := call(t.Context(), client); a.err != nil {
		t.Fatalf("first call: %v", a.err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if a := call(ctx, client); a.st.Code() != codes.ResourceExhausted {
		t.Errorf("a call whose 50 ms timeout ends before its place at 100 ms: %v, want RESOURCE_EXHAUSTED", a.st)
	}
	ctx, cancel = context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if a := call(ctx, client); a.err != nil {
		t.Errorf("a call whose timeout outlives its 100 ms wait: %v", a.err)
	}
}

// TestWaitUnary: through the interceptor alone, in a bubble: four calls at once at 10/s, bursts
// of 1, WithWait(250 ms): three proceed at 0, 100 and 200 ms and the fourth is refused at once;
// the hook is told of Waited with the time waited.
func TestWaitUnary(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var waited, at []time.Duration
		hook := grpclimit.WithDecisionHook(func(_ context.Context, _ string, o retryafter.Outcome, d retryafter.Decision) {
			if o == edge.Waited {
				mu.Lock()
				waited = append(waited, d.RetryAfter)
				mu.Unlock()
			}
		})
		icpt := grpclimit.UnaryServerInterceptor(retryafter.NewTokenBucket(10, 1), grpclimit.WithWait(250*time.Millisecond),
			grpclimit.WithKeyFunc(func(context.Context, string) (string, error) { return "a", nil }), hook)
		start := time.Now()
		handler := func(context.Context, any) (any, error) {
			mu.Lock()
			at = append(at, time.Since(start))
			mu.Unlock()
			return nil, nil
		}
		info := &grpc.UnaryServerInfo{FullMethod: "/s/m"}
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				if _, err := icpt(t.Context(), nil, info, handler); err != nil && (status.Code(err) != codes.ResourceExhausted || time.Since(start) != 0) {
					t.Errorf("%v after %v, want RESOURCE_EXHAUSTED at once", err, time.Since(start))
				}
			})
		}
		wg.Wait()
		slices.Sort(at)
		slices.Sort(waited)
		place := []time.Duration{0, 100*time.Millisecond - time.Microsecond, 200*time.Millisecond - time.Microsecond}
		if !slices.Equal(at, place) || !slices.Equal(waited, place[1:]) {
			t.Errorf("served at %v, told of waits %v; want %v", at, waited, place)
		}
	})
}
