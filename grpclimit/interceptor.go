package grpclimit

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/retryafter/retryafter"
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
// Clients are told apart by [ClientIP] unless [WithKeyFunc] says otherwise. It panics if l is
// nil. Add it with grpc.UnaryInterceptor or grpc.ChainUnaryInterceptor.
func UnaryServerInterceptor(l retryafter.Limiter, opts ...Option) grpc.UnaryServerInterceptor {
	s := newServer(l, opts)
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		trailer, err := s.admit(ctx, info.FullMethod)
		if err != nil {
			grpc.SetTrailer(ctx, trailer) // before any header: the status comes alone, as gRFC A6 needs
			return nil, err
		}
		return handler(ctx, req)
	}
}

// StreamServerInterceptor returns a server interceptor that asks l about each stream when it
// opens, and ends the streams it refuses before the handler runs, as [UnaryServerInterceptor]
// ends unary calls. A stream is decided once: it costs what [WithCost] says when it opens, and
// nothing for the messages it then sends or receives, however long it lasts. It panics if l is
// nil. Add it with grpc.StreamInterceptor or grpc.ChainStreamInterceptor.
func StreamServerInterceptor(l retryafter.Limiter, opts ...Option) grpc.StreamServerInterceptor {
	s := newServer(l, opts)
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		trailer, err := s.admit(ss.Context(), info.FullMethod)
		if err != nil {
			ss.SetTrailer(trailer)
			return err
		}
		return handler(srv, ss)
	}
}

// server is what both interceptors share: the limiter and the configuration.
type server struct {
	l retryafter.Limiter
	c config
}

func newServer(l retryafter.Limiter, opts []Option) *server {
	if l == nil {
		panic("grpclimit: nil Limiter")
	}
	return &server{l: l, c: newConfig(opts)}
}

// admit decides the call to fullMethod and returns a nil error when it may proceed; otherwise
// the error that ends it and the trailer to send with it.
func (s *server) admit(ctx context.Context, fullMethod string) (metadata.MD, error) {
	if s.c.exempt != nil && s.c.exempt(ctx, fullMethod) {
		s.decided(ctx, fullMethod, retryafter.Exempt, retryafter.Decision{})
		return nil, nil
	}
	key, err := s.c.key(ctx, fullMethod)
	if err != nil {
		return s.fail(ctx, fullMethod, err, status.New(codes.Internal, "rate limiter: no key for the call"), nil)
	}
	cost := 1
	if s.c.cost != nil {
		cost = max(1, s.c.cost(ctx, fullMethod))
	}
	d, err := s.l.Decide(ctx, key, cost, s.c.now())
	if err != nil {
		if ctx.Err() != nil {
			// The call itself ended (cancelled, past its deadline): the limiter did not fail,
			// and a call that was not counted is not admitted for it.
			s.decided(ctx, fullMethod, retryafter.FailedClosed, retryafter.Decision{})
			return nil, status.FromContextError(ctx.Err()).Err()
		}
		st, trailer := unavailable()
		return s.fail(ctx, fullMethod, err, st, trailer)
	}
	switch {
	case d.Allowed:
		s.decided(ctx, fullMethod, retryafter.Admitted, d)
		return nil, nil
	case s.c.dryRun:
		s.decided(ctx, fullMethod, retryafter.DryRunRefused, d)
		return nil, nil
	}
	s.decided(ctx, fullMethod, retryafter.Refused, d)
	st, trailer := refusal(d)
	return trailer, st.Err()
}

// fail reports err and, unless the interceptor fails open, returns st and trailer to end the
// call with.
func (s *server) fail(ctx context.Context, fullMethod string, err error, st *status.Status, trailer metadata.MD) (metadata.MD, error) {
	for _, fn := range s.c.onError {
		fn(ctx, fullMethod, err)
	}
	if s.c.failOpen {
		s.decided(ctx, fullMethod, retryafter.FailedOpen, retryafter.Decision{})
		return nil, nil
	}
	s.decided(ctx, fullMethod, retryafter.FailedClosed, retryafter.Decision{})
	return trailer, st.Err()
}

// decided tells the hooks of WithDecisionHook what became of the call.
func (s *server) decided(ctx context.Context, fullMethod string, o retryafter.Outcome, d retryafter.Decision) {
	for _, fn := range s.c.onDecided {
		fn(ctx, fullMethod, o, d)
	}
}
