package grpclimit

import (
	"context"
	"math"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/retryafter/retryafter"
	"github.com/retryafter/retryafter/edge"
)

// UnaryServerInterceptor returns a server interceptor that asks l about each unary call and
// ends the calls it refuses with RESOURCE_EXHAUSTED, telling the client the limiter's exact
// wait twice: as a google.rpc.RetryInfo whose retry_delay is the wait rounded up to the
// millisecond, never 0, and as the trailer grpc-retry-pushback-ms ([PushbackKey]) with the
// same milliseconds, which grpc-go, grpc-java and gRPC core obey when the client's service
// config has a retry policy for RESOURCE_EXHAUSTED. A client that waits that long and calls
// again is admitted, unless something else spent its quota meanwhile. A google.rpc.QuotaFailure
// names the policies the call violated. A refused call costs no quota.
//
// A call that can never be admitted (a cost above what the limit ever holds) gets a pushback
// of -1, "do not retry", and no RetryInfo. When the key function or l fails, the call ends as
// [WithFailOpen] says.
//
// Clients are told apart by [ClientIP] unless [WithKeyFunc] says otherwise. Layers of l charged
// afterwards ([retryafter.ChargedAfter]) admit a call while its key is not in debt, and nothing
// here charges them ([retryafter.Charge] is for HTTP requests): a handler that learns what its
// call cost charges their [retryafter.Charger] itself, under the call's key. It panics if l is
// nil or opts hold [WithMessageCharge]. Add it with grpc.UnaryInterceptor or
// grpc.ChainUnaryInterceptor.
func UnaryServerInterceptor(l retryafter.Limiter, opts ...Option) grpc.UnaryServerInterceptor {
	s := newServer(l, opts)
	if s.c.messages != nil {
		panic("grpclimit: WithMessageCharge given to UnaryServerInterceptor: it is for streams")
	}
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		a, err := s.admit(ctx, info.FullMethod)
		if err != nil {
			grpc.SetTrailer(ctx, a.trailer) // before any header: the status comes alone, as gRFC A6 needs
			return nil, err
		}
		if a.header != nil {
			grpc.SetHeader(ctx, a.header)
		}
		return handler(ctx, req)
	}
}

// StreamServerInterceptor returns a server interceptor that asks l about each stream when it
// opens, and ends the streams it refuses before the handler runs, as [UnaryServerInterceptor]
// ends unary calls. A stream is decided once: it costs what [WithCost] says when it opens, and
// nothing for the messages it then sends or receives, however long it lasts, unless
// [WithMessageCharge] charges them afterwards. It panics if l is nil. Add it with
// grpc.StreamInterceptor or grpc.ChainStreamInterceptor.
func StreamServerInterceptor(l retryafter.Limiter, opts ...Option) grpc.StreamServerInterceptor {
	s := newServer(l, opts)
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		a, err := s.admit(ss.Context(), info.FullMethod)
		if err != nil {
			ss.SetTrailer(a.trailer)
			return err
		}
		if a.header != nil {
			ss.SetHeader(a.header)
		}
		if s.c.messages == nil || !a.counted {
			return handler(srv, ss)
		}
		cs := &countingStream{ServerStream: ss}
		defer s.chargeMessages(ss.Context(), info.FullMethod, a.key, cs)
		return handler(srv, cs)
	}
}

// server is what both interceptors share: the core, the configuration, and what refusals are
// built from.
type server struct {
	core   *edge.Core[call]
	c      config
	quotas quotaCache
	drafts sync.Pool // of *draft
}

func newServer(l retryafter.Limiter, opts []Option) *server {
	if l == nil {
		panic("grpclimit: nil Limiter")
	}
	s := &server{c: newConfig(opts), drafts: sync.Pool{New: newDraft}}
	s.core = edge.New(l, s.c.Config)
	return s
}

// An admission is what admit found of a call: its key, when the call is counted, the header
// metadata of an admitted call and the trailer of a refused one.
type admission struct {
	key     string
	counted bool
	header  metadata.MD
	trailer metadata.MD
}

// admit decides the call to fullMethod and returns a nil error when it may proceed; otherwise
// the error that ends it, with the trailer to send in the admission.
func (s *server) admit(ctx context.Context, fullMethod string) (admission, error) {
	v := s.core.Decide(ctx, call{ctx, fullMethod})
	var md metadata.MD
	if s.c.fields != nil {
		md = fields(s.c.fields, v.Decision)
	}
	switch v.Outcome {
	case edge.Exempt:
		return admission{}, nil
	case edge.FailedOpen:
		return admission{key: v.Key, counted: v.Counted()}, nil
	case edge.Admitted, edge.DryRunRefused, edge.Waited, edge.DryRunWaited:
		return admission{key: v.Key, counted: v.Counted(), header: md}, nil
	case edge.Refused:
		st, trailer := s.refusal(&v.Decision)
		if md != nil {
			trailer = metadata.Join(trailer, md)
		}
		return admission{trailer: trailer}, st.Err()
	}
	switch v.Failure {
	case edge.KeyFailed:
		return admission{}, status.New(codes.Internal, "rate limiter: no key for the call").Err()
	case edge.Canceled:
		// The call itself ended (cancelled, past its deadline): the limiter did not fail.
		return admission{}, status.FromContextError(ctx.Err()).Err()
	}
	st, trailer := s.unavailable()
	return admission{trailer: trailer}, st.Err()
}

// A countingStream counts the messages its stream carries, either way.
type countingStream struct {
	grpc.ServerStream
	n atomic.Int64
}

func (c *countingStream) SendMsg(m any) error {
	err := c.ServerStream.SendMsg(m)
	if err == nil {
		c.n.Add(1)
	}
	return err
}

func (c *countingStream) RecvMsg(m any) error {
	err := c.ServerStream.RecvMsg(m)
	if err == nil {
		c.n.Add(1)
	}
	return err
}

// chargeMessages charges the Charger of WithMessageCharge what cs carried, under key.
func (s *server) chargeMessages(ctx context.Context, fullMethod, key string, cs *countingStream) {
	n := cs.n.Load()
	if n == 0 {
		return
	}
	// The stream's context has ended with it; what it carried is still owed.
	if err := s.c.messages.Charge(context.WithoutCancel(ctx), key, int(min(n, math.MaxInt)), s.core.Now()); err != nil {
		s.core.Errored(call{ctx, fullMethod}, err)
	}
}
