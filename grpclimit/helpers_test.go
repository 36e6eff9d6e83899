package grpclimit_test

import (
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/retryafter/retryafter/grpclimit"
)

// t0 is the first instant of the tests on an injected clock.
var t0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

// A clock is an injected clock that the test sets.
type clock struct{ ns atomic.Int64 }

func newClock(t time.Time) *clock {
	c := new(clock)
	c.set(t)
	return c
}

func (c *clock) now() time.Time      { return time.Unix(0, c.ns.Load()).UTC() }
func (c *clock) set(t time.Time)     { c.ns.Store(t.UnixNano()) }
func (c *clock) add(d time.Duration) { c.ns.Add(int64(d)) }

// service is the test service: it counts the calls that reach it.
type service struct {
	testpb.UnimplementedTestServiceServer
	calls atomic.Int64
}

func (s *service) EmptyCall(context.Context, *testpb.Empty) (*testpb.Empty, error) {
	s.calls.Add(1)
	return &testpb.Empty{}, nil
}

func (s *service) FullDuplexCall(stream grpc.BidiStreamingServer[testpb.StreamingOutputCallRequest, testpb.StreamingOutputCallResponse]) error {
	s.calls.Add(1)
	for {
		if _, err := stream.Recv(); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return err
		}
	}
}

// serve starts a grpc-go server with opts on a loopback port, stopped when t ends, and returns
// its address and service.
func serve(t *testing.T, opts ...grpc.ServerOption) (string, *service) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer(opts...)
	svc := new(service)
	testpb.RegisterTestServiceServer(s, svc)
	go s.Serve(lis)
	t.Cleanup(s.Stop)
	return lis.Addr().String(), svc
}

// dial returns a client of the test service at addr, closed when t ends.
func dial(t *testing.T, addr string, opts ...grpc.DialOption) testpb.TestServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return testpb.NewTestServiceClient(conn)
}

// keyFromMetadata keys a call by its "key" metadata, so that one server holds many clients.
func keyFromMetadata(ctx context.Context, _ string) (string, error) {
	v := metadata.ValueFromIncomingContext(ctx, "key")
	if len(v) != 1 {
		return "", errors.New("no key")
	}
	return v[0], nil
}

// costFromMetadata costs a call its "cost" metadata, 1 without it.
func costFromMetadata(ctx context.Context, _ string) int {
	v := metadata.ValueFromIncomingContext(ctx, "cost")
	if len(v) != 1 {
		return 1
	}
	n, _ := strconv.Atoi(v[0])
	return n
}

// withKey returns ctx with the metadata that names key and cost.
func withKey(ctx context.Context, key string, cost int) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "key", key, "cost", strconv.Itoa(cost))
}

// An answer is what a client saw of one call.
type answer struct {
	err       error
	st        *status.Status
	trailer   metadata.MD
	pushback  []string
	retryInfo *errdetails.RetryInfo
	quota     *errdetails.QuotaFailure
}

// call makes one unary call and returns what came back.
func call(ctx context.Context, c testpb.TestServiceClient, opts ...grpc.CallOption) answer {
	var trailer metadata.MD
	_, err := c.EmptyCall(ctx, &testpb.Empty{}, append(opts, grpc.Trailer(&trailer))...)
	return read(err, trailer)
}

// read returns what a client saw of a call that ended with err and trailer.
func read(err error, trailer metadata.MD) answer {
	a := answer{err: err, st: status.Convert(err), trailer: trailer, pushback: trailer.Get(grpclimit.PushbackKey)}
	for _, d := range a.st.Details() {
		switch d := d.(type) {
		case *errdetails.RetryInfo:
			a.retryInfo = d
		case *errdetails.QuotaFailure:
			a.quota = d
		}
	}
	return a
}

// noPushback is a server interceptor, mounted outside grpclimit's, that drops the pushback
// trailer, so that the client sees RetryInfo alone, as from a server that sends only that.
func noPushback(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	sts := grpc.ServerTransportStreamFromContext(ctx)
	return handler(grpc.NewContextWithServerTransportStream(ctx, trailerFilter{sts}), req)
}

type trailerFilter struct{ grpc.ServerTransportStream }

func (f trailerFilter) SetTrailer(md metadata.MD) error {
	md = md.Copy()
	delete(md, grpclimit.PushbackKey)
	return f.ServerTransportStream.SetTrailer(md)
}

// countingInterceptor counts the calls that reach the server, admitted or not.
type countingInterceptor struct{ n atomic.Int64 }

func (c *countingInterceptor) intercept(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	c.n.Add(1)
	return handler(ctx, req)
}

// openStream opens a stream, sends it messages, closes its side and returns the trailer and the
// error of its end: io.EOF when the server admitted it.
func openStream(ctx context.Context, c testpb.TestServiceClient, messages int) (metadata.MD, error) {
	s, err := c.FullDuplexCall(ctx)
	if err != nil {
		return nil, err
	}
	for range messages {
		s.Send(&testpb.StreamingOutputCallRequest{})
	}
	s.CloseSend()
	_, err = s.Recv()
	return s.Trailer(), err
}
