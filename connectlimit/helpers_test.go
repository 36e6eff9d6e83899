package connectlimit_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/retryafter/retryafter"
	"github.com/retryafter/retryafter/connectlimit"
	"github.com/retryafter/retryafter/internal/testkit"
)

var t0 = testkit.T0

// Procedures of the test service: a unary call that answers its request, and a server stream
// that sends its request back n times, n being the request's length.
const (
	sayProcedure    = "/test.v1.TestService/Say"
	streamProcedure = "/test.v1.TestService/Stream"
)

// service is a running test server: the Connect handlers of both procedures behind
// interceptors, on loopback, speaking HTTP/1.1 and HTTP/2 without TLS (for gRPC).
type service struct {
	*httptest.Server
	reached atomic.Int64 // calls that reached a handler
}

func serve(t *testing.T, i ...connect.Interceptor) *service {
	t.Helper()
	s := &service{}
	mux := http.NewServeMux()
	mux.Handle(sayProcedure, connect.NewUnaryHandler(sayProcedure,
		func(_ context.Context, r *connect.Request[wrapperspb.StringValue]) (*connect.Response[wrapperspb.StringValue], error) {
			s.reached.Add(1)
			return connect.NewResponse(wrapperspb.String("hello " + r.Msg.Value)), nil
		}, connect.WithInterceptors(i...)))
	mux.Handle(streamProcedure, connect.NewServerStreamHandler(streamProcedure,
		func(_ context.Context, r *connect.Request[wrapperspb.StringValue], st *connect.ServerStream[wrapperspb.StringValue]) error {
			s.reached.Add(1)
			for range len(r.Msg.Value) {
				if err := st.Send(r.Msg); err != nil {
					return err
				}
			}
			return nil
		}, connect.WithInterceptors(i...)))
	s.Server = httptest.NewUnstartedServer(connectlimit.TrailersOnly(mux))
	s.Config.Protocols = new(http.Protocols)
	s.Config.Protocols.SetHTTP1(true)
	s.Config.Protocols.SetUnencryptedHTTP2(true)
	s.Start()
	t.Cleanup(s.Close)
	return s
}

// h2c returns an HTTP client that speaks HTTP/2 without TLS, as gRPC needs.
func h2c() *http.Client {
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: tr}
}

// protocols are the three protocols of a Connect handler, as a Connect client speaks them.
var protocols = []struct {
	name string
	opts []connect.ClientOption
}{
	{"connect", nil},
	{"grpc", []connect.ClientOption{connect.WithGRPC()}},
	{"grpcweb", []connect.ClientOption{connect.WithGRPCWeb()}},
}

// sayClient returns a Connect client of the unary procedure of s.
func sayClient(s *service, opts ...connect.ClientOption) *connect.Client[wrapperspb.StringValue, wrapperspb.StringValue] {
	return connect.NewClient[wrapperspb.StringValue, wrapperspb.StringValue](h2c(), s.URL+sayProcedure, opts...)
}

// retryDelay returns the retry_delay of the RetryInfo of err, and whether it has one.
func retryDelay(err error) (time.Duration, bool) {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return 0, false
	}
	for _, d := range ce.Details() {
		if m, e := d.Value(); e == nil {
			if ri, ok := m.(*errdetails.RetryInfo); ok {
				return ri.GetRetryDelay().AsDuration(), true
			}
		}
	}
	return 0, false
}

// down is a Limiter that cannot decide: a store that is down.
type down struct{}

func (down) Decide(context.Context, string, int, time.Time) (retryafter.Decision, error) {
	return retryafter.Decision{}, errors.New("store down")
}
