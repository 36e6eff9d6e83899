package grpclimit

import (
	"context"
	"slices"
	"time"

	"github.com/retryafter/retryafter/retryclient"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// A ClientOption configures [UnaryClientInterceptor]; with none, it retries as retryclient.DefaultRPC says.
type ClientOption func(*retryclient.RPC)

// WithMaxAttempts sets the most tries of one call, the first included; 1 turns retrying off.
// The default is 4. It panics if n is below 1.
func WithMaxAttempts(n int) ClientOption {
	if n < 1 {
		panic("grpclimit: WithMaxAttempts below 1")
	}
	return func(p *retryclient.RPC) { p.MaxAttempts = n }
}

// WithMaxWait caps the server's wait that the interceptor waits, so that a bogus one cannot hold
// a caller for days: a call whose server asks for more is returned at once, since retrying
// sooner would be refused, as the server announced. The default is 5 minutes. It panics if
// wait is not above 0.
func WithMaxWait(wait time.Duration) ClientOption {
	if wait <= 0 {
		panic("grpclimit: WithMaxWait not above 0")
	}
	return func(p *retryclient.RPC) { p.MaxWait = wait }
}

// UnaryClientInterceptor returns a client interceptor that retries a unary call ended with
// RESOURCE_EXHAUSTED or UNAVAILABLE after the wait its server asked for: the retry_delay of a
// google.rpc.RetryInfo in the status, or the trailer grpc-retry-pushback-ms ([PushbackKey]),
// the longer when it sends both. It is for clients whose service config has no retry policy,
// which leaves the trailer unread, and for servers that send RetryInfo alone.
//
// It never retries sooner than the server said, nor at once (a wait of 0 counts as a
// millisecond), nor without being told: a call ended without a wait, with a pushback that says
// not to retry (negative, not a number, or several values), or with a wait above
// [WithMaxWait] is returned as it is, at once. Nor does it wait into a failure: when the call's
// deadline would pass before the wait ends, the last error is returned at once; when the
// call's context ends during a wait, its status is returned. Add it with
// grpc.WithChainUnaryInterceptor.
func UnaryClientInterceptor(opts ...ClientOption) grpc.UnaryClientInterceptor {
	rpc := retryclient.DefaultRPC()
	for _, o := range opts {
		if o == nil {
			panic("grpclimit: nil ClientOption")
		}
		o(&rpc)
	}
	ended := func(err error) error { return status.FromContextError(err).Err() }
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, callOpts ...grpc.CallOption) error {
		var trailer metadata.MD
		callOpts = append(slices.Clip(callOpts), grpc.Trailer(&trailer))
		return rpc.Do(ctx, func() (time.Duration, bool, error) {
			trailer = nil
			err := invoker(ctx, method, req, reply, cc, callOpts...)
			wait, ok := serverWait(err, trailer)
			return wait, ok, err
		}, ended)
	}
}

// serverWait returns the wait that the server of a call ended with err and trailer asked for,
// and whether it asked for one: RESOURCE_EXHAUSTED or UNAVAILABLE with
// a RetryInfo or a pushback, the longer of the two, and no pushback that says not to retry.
func serverWait(err error, trailer metadata.MD) (time.Duration, bool) {
	if err == nil {
		return 0, false
	}
	st := status.Convert(err)
	if st.Code() != codes.ResourceExhausted && st.Code() != codes.Unavailable {
		return 0, false
	}
	wait, ok := time.Duration(0), false
	if v := trailer.Get(PushbackKey); len(v) > 0 {
		p, retry := retryclient.Pushback(v)
		if !retry {
			return 0, false
		}
		wait, ok = p, true
	}
	for _, d := range st.Details() {
		if ri, isRI := d.(*errdetails.RetryInfo); isRI && ri.GetRetryDelay().IsValid() {
			if delay := ri.GetRetryDelay().AsDuration(); delay >= 0 {
				wait, ok = max(wait, delay), true
			}
		}
	}
	return wait, ok
}
