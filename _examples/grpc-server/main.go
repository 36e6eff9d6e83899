// Command grpc-server is a gRPC server behind grpclimit: 1 call per second per client, with
// bursts of 5, so that a client that calls 10 times at once is refused from the sixth call on,
// with RESOURCE_EXHAUSTED, a RetryInfo and the grpc-retry-pushback-ms trailer of the exact wait.
// Its one service is the standard health service, limited here to have something to limit; a
// real server would exempt it (grpclimit.WithExempt) and limit its own services.
//
//	go run ./_examples/grpc-server
//	go run ./_examples/grpc-client                       # a retry policy in the service config
//	go run ./_examples/grpc-client -mode interceptor     # grpclimit's client interceptor
//	go run ./_examples/grpc-client -mode none            # no retries: see the refusals
//	go run ./_examples/grpc-server -addr 127.0.0.1:50052 -redis 127.0.0.1:6379 # replicas share
//	go run ./_examples/grpc-server -addr 127.0.0.1:50053 -redis 127.0.0.1:6379 # one limit
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/retryafter/retryafter"
	"github.com/retryafter/retryafter/grpclimit"
	"github.com/retryafter/retryafter/redisstore"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:50051", "address to listen on")
	redisAddr := flag.String("redis", "", "count calls in the Redis at this `ADDR` (host:port), shared by every replica, instead of in memory")
	flag.Parse()

	lis, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	srv := newServer(newLimiter(*redisAddr, rate.Every(time.Second), 5), grpclimit.WithErrorHook(logError))
	fmt.Printf("listening on %s — 1 call/s per client, bursts of 5. Try:\n  go run ./_examples/grpc-client -addr %[1]s\n", lis.Addr())
	log.Fatal(srv.Serve(lis))
}

// newServer returns a gRPC server whose calls and streams l limits, serving the health service.
func newServer(l retryafter.Limiter, opts ...grpclimit.Option) *grpc.Server {
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(grpclimit.UnaryServerInterceptor(l, opts...)),
		grpc.ChainStreamInterceptor(grpclimit.StreamServerInterceptor(l, opts...)),
	)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	return srv
}

// newLimiter returns the limiter that lets each client call at limit per second with bursts of
// up to burst: in memory when redisAddr is empty; otherwise in the Redis at redisAddr, so that
// every replica started with the same -redis shares one limit per client. When that Redis does
// not answer, a call ends with UNAVAILABLE and a wait of one second.
func newLimiter(redisAddr string, limit rate.Limit, burst int) retryafter.Limiter {
	if redisAddr == "" {
		return retryafter.NewTokenBucket(limit, burst)
	}
	log.Printf("counting calls in the Redis at %s", redisAddr)
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
	return redisstore.New(rdb, limit, burst, redisstore.WithPrefix("grpc-server:"))
}

// logError logs why a call could not be decided (a Redis that is down, say).
func logError(_ context.Context, method string, err error) {
	log.Printf("rate limit for %s: %v", method, err)
}
