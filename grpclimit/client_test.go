package grpclimit_test

import (
	"context"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"golang.org/x/time/rate"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/retryafter/retryafter"
	"github.com/retryafter/retryafter/grpclimit"
)

// TestClientRetryInfoAlone: the client interceptor, on a client with no retry policy, gets
// through a server that sends RetryInfo alone, on its first retry (the server counts two
// attempts). Real grpc-go server and client on loopback, on the real clock, which the
// interceptor waits on.
func TestClientRetryInfoAlone(t *testing.T) {
	var attempts countingInterceptor
	addr, _ := serve(t, grpc.ChainUnaryInterceptor(attempts.intercept, noPushback,
		grpclimit.UnaryServerInterceptor(retryafter.NewTokenBucket(rate.Every(200*time.Millisecond), 1))))
	client := dial(t, addr, grpc.WithDisableRetry(), grpc.WithChainUnaryInterceptor(grpclimit.UnaryClientInterceptor()))
	if a := call(t.Context(), client); a.err != nil { // spends the burst
		t.Fatal(a.err)
	}
	attempts.n.Store(0)
	if a := call(t.Context(), client); a.err != nil || attempts.n.Load() != 2 {
		t.Fatalf("%v after %d attempts, want success after 2", a.err, attempts.n.Load())
	}
}

// fakeServer answers each attempt of a call with the next of its answers, noting when each
// came, on the clock of a synctest bubble.
type fakeServer struct {
	answers []fakeAnswer
	at      []time.Time
}

type fakeAnswer struct {
	code     codes.Code
	delay    *durationpb.Duration // RetryInfo's, when not nil
	pushback []string
}

func (f *fakeServer) invoke(_ context.Context, _ string, _, _ any, _ *grpc.ClientConn, opts ...grpc.CallOption) error {
	f.at = append(f.at, time.Now())
	a := f.answers[min(len(f.at), len(f.answers))-1]
	for _, o := range opts {
		if tr, ok := o.(grpc.TrailerCallOption); ok && a.pushback != nil {
			*tr.TrailerAddr = metadata.MD{grpclimit.PushbackKey: a.pushback}
		}
	}
	if a.code == codes.OK {
		return nil
	}
	st := status.New(a.code, "refused")
	if a.delay != nil {
		st, _ = st.WithDetails(&errdetails.RetryInfo{RetryDelay: a.delay})
	}
	return st.Err()
}

// gaps returns the time between attempts.
func (f *fakeServer) gaps() []time.Duration {
	var g []time.Duration
	for i := 1; i < len(f.at); i++ {
		g = append(g, f.at[i].Sub(f.at[i-1]))
	}
	return g
}

// TestClientWaits: the interceptor waits exactly the server's wait, never sooner, never 0, the
// longer of RetryInfo and pushback, and hands back at once what it must not wait for.
func TestClientWaits(t *testing.T) {
	ms := time.Millisecond
	refused := func(delay time.Duration, pushback ...string) fakeAnswer {
		a := fakeAnswer{code: codes.ResourceExhausted, pushback: pushback}
		if delay >= 0 {
			a.delay = durationpb.New(delay)
		}
		return a
	}
	ok := fakeAnswer{code: codes.OK}
	for _, c := range []struct {
		name    string
		answers []fakeAnswer
		opts    []grpclimit.ClientOption
		timeout time.Duration // the call's deadline, when not 0
		code    codes.Code
		gaps    []time.Duration
	}{
		{"RetryInfo", []fakeAnswer{refused(1234*ms + 5), ok}, nil, 0, codes.OK, []time.Duration{1234*ms + 5}},
		{"pushback", []fakeAnswer{refused(-1, "250"), ok}, nil, 0, codes.OK, []time.Duration{250 * ms}},
		{"the longer of both", []fakeAnswer{refused(3*time.Second, "250"), refused(time.Second, "2000"), ok}, nil, 0, codes.OK,
			[]time.Duration{3 * time.Second, 2 * time.Second}},
		{"UNAVAILABLE", []fakeAnswer{{code: codes.Unavailable, pushback: []string{"1000"}}, ok}, nil, 0, codes.OK, []time.Duration{time.Second}},
		{"zero is a millisecond", []fakeAnswer{refused(0, "0"), ok}, nil, 0, codes.OK, []time.Duration{ms}},
		{"no wait told", []fakeAnswer{refused(-1), ok}, nil, 0, codes.ResourceExhausted, nil},
		{"another code", []fakeAnswer{{code: codes.Internal, pushback: []string{"10"}}, ok}, nil, 0, codes.Internal, nil},
		{"pushback -1", []fakeAnswer{refused(time.Second, "-1"), ok}, nil, 0, codes.ResourceExhausted, nil},
		{"pushback +5", []fakeAnswer{refused(-1, "+5"), ok}, nil, 0, codes.ResourceExhausted, nil},
		{"pushback twice", []fakeAnswer{refused(-1, "5", "5"), ok}, nil, 0, codes.ResourceExhausted, nil},
		{"pushback too large to fit", []fakeAnswer{refused(-1, "99999999999999999999"), ok}, nil, 0, codes.ResourceExhausted, nil},
		{"above the cap", []fakeAnswer{refused(6 * time.Minute), ok}, nil, 0, codes.ResourceExhausted, nil},
		{"at the cap", []fakeAnswer{refused(time.Minute), ok}, []grpclimit.ClientOption{grpclimit.WithMaxWait(time.Minute)}, 0, codes.OK,
			[]time.Duration{time.Minute}},
		{"past the deadline", []fakeAnswer{refused(2 * time.Second), ok}, nil, 2 * time.Second, codes.ResourceExhausted, nil},
		{"within the deadline", []fakeAnswer{refused(2 * time.Second), ok}, nil, 3 * time.Second, codes.OK, []time.Duration{2 * time.Second}},
		{"attempts", []fakeAnswer{refused(time.Second)}, []grpclimit.ClientOption{grpclimit.WithMaxAttempts(3)}, 0, codes.ResourceExhausted,
			[]time.Duration{time.Second, time.Second}},
		{"one attempt", []fakeAnswer{refused(time.Second), ok}, []grpclimit.ClientOption{grpclimit.WithMaxAttempts(1)}, 0, codes.ResourceExhausted, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx := t.Context()
				if c.timeout > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, c.timeout)
					defer cancel()
				}
				f := &fakeServer{answers: c.answers}
				err := grpclimit.UnaryClientInterceptor(c.opts...)(ctx, "/s/m", nil, nil, nil, f.invoke)
				if code := status.Code(err); code != c.code {
					t.Fatalf("ended with %v, want %v", err, c.code)
				}
				if g := f.gaps(); !slices.Equal(g, c.gaps) {
					t.Fatalf("waited %v between attempts, want %v", g, c.gaps)
				}
			})
		})
	}
}

// TestClientCancelled: a call whose context ends during a wait ends at once with its status.
func TestClientCancelled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(time.Second, cancel)
		f := &fakeServer{answers: []fakeAnswer{{code: codes.ResourceExhausted, pushback: []string{"60000"}}}}
		start := time.Now()
		err := grpclimit.UnaryClientInterceptor()(ctx, "/s/m", nil, nil, nil, f.invoke)
		if status.Code(err) != codes.Canceled || time.Since(start) != time.Second || len(f.at) != 1 {
			t.Fatalf("%v after %v and %d attempts, want CANCELLED after 1s and 1", err, time.Since(start), len(f.at))
		}
	})
}
