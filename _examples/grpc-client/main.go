// Command grpc-client calls the health service of _examples/grpc-server n times at once and
// prints how each call ended and how long it took. With -mode policy (the default) grpc-go
// retries a RESOURCE_EXHAUSTED call as its service config says, waiting the server's
// grpc-retry-pushback-ms rather than its own short backoff; with -mode interceptor,
// grpclimit's client interceptor waits the server's RetryInfo instead; with -mode none the
// refusals come back as they are.
//
//	go run ./_examples/grpc-server &
//	go run ./_examples/grpc-client -n 8
//	go run ./_examples/grpc-client -n 8 -mode interceptor
//	go run ./_examples/grpc-client -n 8 -mode none
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"sync"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/retryafter/retryafter/grpclimit"
)

// retryPolicy retries RESOURCE_EXHAUSTED up to 5 tries in all; its backoff matters only when a
// server sends no pushback.
const retryPolicy = `{"methodConfig": [{"name": [{"service": "grpc.health.v1.Health"}],
  "retryPolicy": {"maxAttempts": 5, "initialBackoff": "0.1s", "maxBackoff": "1s",
  "backoffMultiplier": 2, "retryableStatusCodes": ["RESOURCE_EXHAUSTED"]}}]}`

func main() {
	addr := flag.String("addr", "127.0.0.1:50051", "address of the server")
	n := flag.Int("n", 8, "calls to make at once")
	mode := flag.String("mode", "policy", "how to retry: policy (grpc-go's retry policy), interceptor (grpclimit's) or none")
	flag.Parse()

	opts, err := dialOptions(*mode)
	if err != nil {
		log.Fatal(err)
	}
	conn, err := grpc.NewClient(*addr, append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	client := healthpb.NewHealthClient(conn)

	var wg sync.WaitGroup
	for i := range *n {
		wg.Go(func() {
			start := time.Now()
			_, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{})
			fmt.Printf("call %d: %s after %v\n", i+1, describe(err), time.Since(start).Round(time.Millisecond))
		})
	}
	wg.Wait()
}

// dialOptions returns the options of a client that retries as mode says.
func dialOptions(mode string) ([]grpc.DialOption, error) {
	switch mode {
	case "policy":
		return []grpc.DialOption{grpc.WithDefaultServiceConfig(retryPolicy)}, nil
	case "interceptor":
		return []grpc.DialOption{grpc.WithDisableRetry(), grpc.WithChainUnaryInterceptor(grpclimit.UnaryClientInterceptor())}, nil
	case "none":
		return []grpc.DialOption{grpc.WithDisableRetry()}, nil
	}
	return nil, fmt.Errorf("-mode %q: want policy, interceptor or none", mode)
}

// describe returns how a call ended: OK, or its code and the wait its RetryInfo tells.
func describe(err error) string {
	st := status.Convert(err)
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			return fmt.Sprintf("%v, retry in %v", st.Code(), ri.GetRetryDelay().AsDuration())
		}
	}
	return st.Code().String()
}
