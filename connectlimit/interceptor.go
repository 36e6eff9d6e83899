package connectlimit

import (
	"context"
	"math"
	"sync/atomic"

	"connectrpc.com/connect"

	"github.com/retryafter/retryafter"
	"github.com/retryafter/retryafter/edge"
)

// NewInterceptor returns a handler interceptor that asks l about each call, unary or streaming,
// and ends the calls it refuses with resource_exhausted and the limiter's exact wait: a
// google.rpc.RetryInfo whose retry_delay is the wait rounded up to the millisecond, never 0,
// on every protocol; on the Connect protocol, a unary call's HTTP status 429 with Retry-After
// in delay-seconds, rounded up; on gRPC and gRPC-Web, the trailer grpc-retry-pushback-ms
// ([PushbackKey]) of the same milliseconds. A refused call costs no quota, and its handler does
// not run. A call that can never be admitted (a cost above what the limit ever holds) is told
// no wait, and a pushback of -1, "do not retry".
//
// A stream is decided once, when it opens, at the cost [WithCost] gives it, and its messages
// are charged afterwards only with [WithMessageCharge]. Layers of l charged afterwards
// ([retryafter.ChargedAfter]) admit a call while its key is not in debt, and nothing else here
// charges them ([retryafter.Charge] is for requests through retryafter's HTTP middleware): a
// handler that learns what its call cost charges their [retryafter.Charger] itself. Clients are told apart by [ClientIP]
// unless [WithKeyFunc] says otherwise; when the key function or l fails, the call ends as
// [WithFailOpen] says. Add it with connect.WithInterceptors on a handler; on a client it does
// nothing. It panics if l is nil.
func NewInterceptor(l retryafter.Limiter, opts ...Option) connect.Interceptor {
	if l == nil {
		panic("connectlimit: nil Limiter")
	}
	c := newConfig(opts)
	return &interceptor{core: edge.New(l, c.Config), c: c}
}

// interceptor is what NewInterceptor returns: the edge's core and its configuration.
type interceptor struct {
	core *edge.Core[Call]
	c    config
}

func (i *interceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if req.Spec().IsClient {
			return next(ctx, req)
		}
		call := Call{Context: ctx, Spec: req.Spec(), Peer: req.Peer(), Header: req.Header()}
		v := i.core.Decide(ctx, call)
		if !v.Pass() {
			return nil, i.refusal(ctx, &v, call)
		}
		if i.c.fields != nil && decided(&v) {
			if info, ok := connect.CallInfoForHandlerContext(ctx); ok {
				i.setFields(info.ResponseHeader(), v.Decision)
			}
		}
		return next(ctx, req)
	}
}

func (i *interceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (i *interceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		call := Call{Context: ctx, Spec: conn.Spec(), Peer: conn.Peer(), Header: conn.RequestHeader()}
		v := i.core.Decide(ctx, call)
		if !v.Pass() {
			return i.refusal(ctx, &v, call)
		}
		if i.c.fields != nil && decided(&v) {
			i.setFields(conn.ResponseHeader(), v.Decision)
		}
		if i.c.messages == nil || !v.Counted() {
			return next(ctx, conn)
		}
		cc := &countingConn{StreamingHandlerConn: conn}
		defer i.chargeMessages(ctx, call, v.Key, cc)
		return next(ctx, cc)
	}
}

// decided reports whether v, of a call that passes, holds the Limiter's Decision, whose
// RateLimit fields the call's response carries. (A key may be "".)
func decided(v *edge.Verdict) bool { return v.Outcome != edge.Exempt && v.Outcome != edge.FailedOpen }

// A countingConn counts the messages its stream carries, either way.
type countingConn struct {
	connect.StreamingHandlerConn
	n atomic.Int64
}

func (c *countingConn) Send(m any) error {
	err := c.StreamingHandlerConn.Send(m)
	if err == nil {
		c.n.Add(1)
	}
	return err
}

func (c *countingConn) Receive(m any) error {
	err := c.StreamingHandlerConn.Receive(m)
	if err == nil {
		c.n.Add(1)
	}
	return err
}

// chargeMessages charges the Charger of WithMessageCharge what cc carried, under key.
func (i *interceptor) chargeMessages(ctx context.Context, call Call, key string, cc *countingConn) {
	n := cc.n.Load()
	if n == 0 {
		return
	}
	// The stream's context has ended with it; what it carried is still owed.
	if err := i.c.messages.Charge(context.WithoutCancel(ctx), key, int(min(n, math.MaxInt)), i.core.Now()); err != nil {
		i.core.Errored(call, err)
	}
}
