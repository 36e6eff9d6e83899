package connectlimit

import (
	"context"
	"errors"
	"math"
	"strconv"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
)

// Defaults of [NewClientInterceptor].
const (
	defaultMaxAttempts = 4
	defaultMaxWait     = 5 * time.Minute
)

// A ClientOption configures [NewClientInterceptor].
type ClientOption func(*clientConfig)

type clientConfig struct {
	maxAttempts int
	maxWait     time.Duration
}

// WithMaxAttempts sets the most tries of one call, the first included; 1 turns retrying off.
// The default is 4. It panics if n is below 1.
func WithMaxAttempts(n int) ClientOption {
	if n < 1 {
		panic("connectlimit: WithMaxAttempts below 1")
	}
	return func(c *clientConfig) { c.maxAttempts = n }
}

// WithMaxWait caps the server's wait that the interceptor waits, so that a bogus one cannot hold
// a caller for days: a call whose server asks for more is returned at once. The default is 5
// minutes. It panics if wait is not above 0.
func WithMaxWait(wait time.Duration) ClientOption {
	if wait <= 0 {
		panic("connectlimit: WithMaxWait not above 0")
	}
	return func(c *clientConfig) { c.maxWait = wait }
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
	c := clientConfig{maxAttempts: defaultMaxAttempts, maxWait: defaultMaxWait}
	for _, o := range opts {
		if o == nil {
			panic("connectlimit: nil ClientOption")
		}
		o(&c)
	}
	return connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			if !req.Spec().IsClient {
				return next(ctx, req)
			}
			for attempt := 1; ; attempt++ {
				res, err := next(ctx, req)
				if err == nil || attempt >= c.maxAttempts {
					return res, err
				}
				wait, ok := serverWait(err)
				if !ok || wait > c.maxWait {
					return res, err
				}
				if deadline, ok := ctx.Deadline(); ok && !time.Now().Add(wait).Before(deadline) {
					return res, err
				}
				if err := sleep(ctx, wait); err != nil {
					return nil, err
				}
			}
		}
	})
}

// sleep waits for wait, or until ctx ends, and then returns its error.
func sleep(ctx context.Context, wait time.Duration) error {
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-ctx.Done():
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return connect.NewError(connect.CodeDeadlineExceeded, ctx.Err())
		}
		return connect.NewError(connect.CodeCanceled, ctx.Err())
	case <-t.C:
		return nil
	}
}

// serverWait returns the wait that the server of a call ended with err asked for, at least a
// millisecond, and whether it asked for one: resource_exhausted or unavailable with a RetryInfo
// or a pushback, the longer of the two, and no pushback that says not to retry.
func serverWait(err error) (time.Duration, bool) {
	var ce *connect.Error
	if !errors.As(err, &ce) || (ce.Code() != connect.CodeResourceExhausted && ce.Code() != connect.CodeUnavailable) {
		return 0, false
	}
	wait, ok := time.Duration(0), false
	if v := ce.Meta().Values(pushbackHeader); len(v) > 0 {
		p, retry := pushback(v)
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
	return max(wait, time.Millisecond), ok
}

// pushback reads the values of a pushback as grpc-go does: one value of ASCII digits is a wait
// in milliseconds (saturating, never wrapping); anything else says not to retry.
func pushback(v []string) (wait time.Duration, retry bool) {
	if len(v) != 1 || v[0] == "" {
		return 0, false
	}
	for _, c := range []byte(v[0]) {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	ms, err := strconv.ParseInt(v[0], 10, 64)
	if err != nil || ms > math.MaxInt64/int64(time.Millisecond) {
		return math.MaxInt64, true // too large to fit: above any cap
	}
	return time.Duration(ms) * time.Millisecond, true
}
