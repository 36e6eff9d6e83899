package grpclimit_test

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/retryafter/retryafter"
	"github.com/retryafter/retryafter/grpclimit"
)

// A server that admits 10 calls a second per client, in bursts of 2, and what its third call
// in one instant is told.
func Example() {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC) // a fixed clock, for the output
	limiter := retryafter.NewTokenBucket(10, 2)
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(grpclimit.UnaryServerInterceptor(limiter, grpclimit.WithClock(func() time.Time { return now }))),
		grpc.ChainStreamInterceptor(grpclimit.StreamServerInterceptor(limiter)),
	)
	testpb.RegisterTestServiceServer(srv, &service{})
	lis, _ := net.Listen("tcp", "127.0.0.1:0")
	go srv.Serve(lis)
	defer srv.Stop()

	conn, _ := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	defer conn.Close()
	client := testpb.NewTestServiceClient(conn)
	for range 3 {
		var trailer metadata.MD
		_, err := client.EmptyCall(context.Background(), &testpb.Empty{}, grpc.Trailer(&trailer))
		st := status.Convert(err)
		fmt.Println(st.Code(), trailer.Get(grpclimit.PushbackKey))
		for _, d := range st.Details() {
			switch d := d.(type) {
			case *errdetails.RetryInfo:
				fmt.Println("RetryInfo:", d.GetRetryDelay().AsDuration())
			case *errdetails.QuotaFailure:
				fmt.Println("QuotaFailure:", d.GetViolations()[0].GetDescription())
			}
		}
	}
	// Output:
	// OK []
	// OK []
	// ResourceExhausted [100]
	// RetryInfo: 100ms
	// QuotaFailure: rate limit default exceeded: 2 at once, 10 restored per second
}

// A client with no retry policy, behind UnaryClientInterceptor, gets through a server that
// limits it to one call at once and one every 300 ms: its second call waits the 300 ms the
// server tells it, then is admitted.
func ExampleUnaryClientInterceptor() {
	var attempts atomic.Int64
	count := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		attempts.Add(1)
		return handler(ctx, req)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(count, grpclimit.UnaryServerInterceptor(retryafter.NewTokenBucket(rate.Every(300*time.Millisecond), 1))))
	testpb.RegisterTestServiceServer(srv, &service{})
	lis, _ := net.Listen("tcp", "127.0.0.1:0")
	go srv.Serve(lis)
	defer srv.Stop()

	conn, _ := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithChainUnaryInterceptor(grpclimit.UnaryClientInterceptor(grpclimit.WithMaxWait(time.Second))))
	defer conn.Close()
	client := testpb.NewTestServiceClient(conn)
	for range 2 {
		_, err := client.EmptyCall(context.Background(), &testpb.Empty{})
		fmt.Println(status.Code(err))
	}
	fmt.Println("attempts:", attempts.Load())
	// Output:
	// OK
	// OK
	// attempts: 3
}
