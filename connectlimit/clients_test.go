package connectlimit_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/time/rate"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/retryafter/retryafter"
	"github.com/retryafter/retryafter/connectlimit"
	"github.com/retryafter/retryafter/edge"
)

// The clients' tests wait for real: the server's wait is short (50 ms), and what they hold is
// the number of tries, not how long they took. The server's clock stands still at t0 until its
// first refusal and then runs with the real clock, so that a slow machine neither admits the
// call that should be refused nor refuses the retry that waited as told.

// countedServer returns a server behind an interceptor on a bucket of 20 calls a second, bursts
// of 1, and the count of the calls it decided.
func countedServer(t *testing.T) (*service, *atomic.Int64) {
	var tries atomic.Int64
	var refusedAt atomic.Pointer[time.Time]
	now := func() time.Time {
		if at := refusedAt.Load(); at != nil {
			return t0.Add(time.Since(*at))
		}
		return t0
	}
	count := connectlimit.WithDecisionHook(func(_ connectlimit.Call, o retryafter.Outcome, _ retryafter.Decision) {
		tries.Add(1)
		if o == edge.Refused {
			at := time.Now()
			refusedAt.CompareAndSwap(nil, &at)
		}
	})
	return serve(t, connectlimit.NewInterceptor(retryafter.NewTokenBucket(20, 1), count, connectlimit.WithClock(now))), &tries
}

const retryPolicy = `{"methodConfig": [{"name": [{"service": "test.v1.TestService"}],
  "retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.001s", "maxBackoff": "0.001s",
  "backoffMultiplier": 1, "retryableStatusCodes": ["RESOURCE_EXHAUSTED"]}}]}`

// TestGRPCGoClient: a grpc-go client whose retry policy backs off for a millisecond is told the
// wait by the pushback and gets through on its first retry (two tries); without a retry policy
// it reads the same wait in RetryInfo and the trailer.
func TestGRPCGoClient(t *testing.T) {
	for _, policy := range []bool{true, false} {
		s, tries := countedServer(t)
		opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
		if policy {
			opts = append(opts, grpc.WithDefaultServiceConfig(retryPolicy))
		}
		conn, err := grpc.NewClient(strings.TrimPrefix(s.URL, "http://"), opts...)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		call := func(trailer *metadata.MD) error {
			return conn.Invoke(context.Background(), sayProcedure, wrapperspb.String("x"), new(wrapperspb.StringValue), grpc.Trailer(trailer))
		}
		var trailer metadata.MD
		if err := call(&trailer); err != nil {
			t.Fatalf("first call: %v", err)
		}
		tries.Store(0)
		err = call(&trailer)
		if policy {
			if err != nil || tries.Load() != 2 {
				t.Fatalf("with a retry policy: %v after %d tries, want through on the first retry", err, tries.Load())
			}
			continue
		}
		st := status.Convert(err)
		var delay time.Duration
		for _, d := range st.Details() {
			if ri, ok := d.(*errdetails.RetryInfo); ok {
				delay = ri.GetRetryDelay().AsDuration()
			}
		}
		if st.Code() != codes.ResourceExhausted || delay <= 0 || delay > 50*time.Millisecond || trailer.Get(connectlimit.PushbackKey)[0] != strings.TrimSuffix(delay.String(), "ms") {
			t.Fatalf("without a retry policy: %v, RetryInfo %v, trailer %v", st, delay, trailer)
		}
	}
}

// TestClientInterceptor: a Connect client with NewClientInterceptor, on each protocol, waits
// the RetryInfo and gets through on its first retry; with one try allowed, it is refused.
func TestClientInterceptor(t *testing.T) {
	for _, p := range protocols {
		for _, attempts := range []int{4, 1} {
			s, tries := countedServer(t)
			c := sayClient(s, append(p.opts, connect.WithInterceptors(connectlimit.NewClientInterceptor(connectlimit.WithMaxAttempts(attempts))))...)
			say := func() error {
				_, err := c.CallUnary(context.Background(), connect.NewRequest(wrapperspb.String("x")))
				return err
			}
			if err := say(); err != nil {
				t.Fatalf("%s: first call: %v", p.name, err)
			}
			tries.Store(0)
			err := say()
			if attempts == 1 && (connect.CodeOf(err) != connect.CodeResourceExhausted || tries.Load() != 1) {
				t.Fatalf("%s, one try: %v after %d tries", p.name, err, tries.Load())
			}
			if attempts > 1 && (err != nil || tries.Load() != 2) {
				t.Fatalf("%s: %v after %d tries, want through on the first retry", p.name, err, tries.Load())
			}
		}
	}
}

// TestClientInterceptorDeadline: a wait that would outlast the call's deadline is not waited:
// the refusal is returned at once.
func TestClientInterceptorDeadline(t *testing.T) {
	s := serve(t, connectlimit.NewInterceptor(retryafter.NewTokenBucket(rate.Every(time.Hour), 1)))
	c := sayClient(s, connect.WithInterceptors(connectlimit.NewClientInterceptor()))
	c.CallUnary(context.Background(), connect.NewRequest(wrapperspb.String("x")))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := c.CallUnary(ctx, connect.NewRequest(wrapperspb.String("x")))
	if connect.CodeOf(err) != connect.CodeResourceExhausted || ctx.Err() != nil {
		t.Fatalf("a wait of an hour within a minute's deadline: %v (context %v)", err, ctx.Err())
	}
}
