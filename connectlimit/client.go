package connectlimit

import (
	"context"
	"errors"
	"time"

	"connectrpc.com/connect"
	"github.com/retryafter/retryafter/retryclient"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
)

// A ClientOption configures [NewClientInterceptor]; with none, it retries as retryclient.DefaultRPC says.
type ClientOption func(*retryclient.RPC)

// WithMaxAttempts sets the most tries of one call, the first included; 1 turns retrying off.
// The default is 4. It panics if n is below 1.
func WithMaxAttempts(n int) ClientOption {
	if n < 1 {
		panic("connectlimit: WithMaxAttempts below 1")
	}
	return func(p *retryclient.RPC) { p.MaxAttempts = n }
}

// WithMaxWait caps the server's wait that the interceptor waits, so that a bogus one cannot hold
// a caller for days: a call whose server asks for more is returned at once. The default is 5
// minutes. It panics if wait is not above 0.
func WithMaxWait(wait time.Duration) ClientOption {
	if wait <= 0 {
		panic("connectlimit: WithMaxWait not above 0")
	}
	return func(p *retryclient.RPC) { p.MaxWait = wait }
}

// NewClientInterceptor returns a client interceptor that retries a unary call ended with
// resource_exhausted or unavailable after the wait its server asked for: the retry_delay of a
// google.rpc.RetryInfo in the error's details, or the pushback of gRPC ([PushbackKey]) in its
// metadata, the longer when it sends both; on every protocol.
//
// It never retries sooner than the server said, nor at once (a wait of 0 counts as a
// millisecond), nor without being told: a call ended without a wait, with a pushback that says
// not to retry, or with a wait above [WithMaxWait] is returned as it is, at once. Nor does it
// wait into a failure: when the call's deadline would pass before the wait ends, the last error
// is returned at once; when the call's context ends during a wait, its error is returned.
// Streams are passed on untouched. Add it with connect.WithInterceptors on a client.
func NewClientInterceptor(opts ...ClientOption) connect.Interceptor {
	rpc := retryclient.DefaultRPC()
	for _, o := range opts {
		if o == nil {
			panic("connectlimit: nil ClientOption")
		}
		o(&rpc)
	}
	return connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			if !req.Spec().IsClient {
				return next(ctx, req)
			}
			var res connect.AnyResponse
			err := rpc.Do(ctx, func() (time.Duration, bool, error) {
				var err error
				res, err = next(ctx, req)
				wait, ok := serverWait(err)
				return wait, ok, err
			}, ended)
			if err != nil {
				return nil, err
			}
			return res, nil
		}
	})
}

// ended returns the error of a call whose context ended, err, while it waited.
func ended(err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return connect.NewError(connect.CodeDeadlineExceeded, err)
	}
	return connect.NewError(connect.CodeCanceled, err)
}

// serverWait returns the wait that the server of a call ended with err asked for, and whether
// it asked for one: resource_exhausted or unavailable with a RetryInfo
// or a pushback, the longer of the two, and no pushback that says not to retry.
func serverWait(err error) (time.Duration, bool) {
	var ce *connect.Error
	if !errors.As(err, &ce) || (ce.Code() != connect.CodeResourceExhausted && ce.Code() != connect.CodeUnavailable) {
		return 0, false
	}
	wait, ok := time.Duration(0), false
	if v := ce.Meta().Values(pushbackHeader); len(v) > 0 {
		p, retry := retryclient.Pushback(v)
		if !retry {
			return 0, false
		}
		wait, ok = p, true
	}
	for _, d := range ce.Details() {
		m, e := d.Value()
		if ri, isRI := m.(*errdetails.RetryInfo); e == nil && isRI && ri.GetRetryDelay().IsValid() {
			if delay := ri.GetRetryDelay().AsDuration(); delay >= 0 {
				wait, ok = max(wait, delay), true
			}
		}
	}
	return wait, ok
}
