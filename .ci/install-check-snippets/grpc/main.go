// grpclimit/README.md's first snippet, as a user builds it.
package main

import (
	"log"
	"net"

	"google.golang.org/grpc"

	"github.com/retryafter/retryafter"
	"github.com/retryafter/retryafter/grpclimit"
)

func main() {
	// snippet from grpclimit/README.md
	limiter := retryafter.NewTokenBucket(10, 20) // or redisstore.New(...), retryafter.All(...)
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(grpclimit.UnaryServerInterceptor(limiter)),
		grpc.ChainStreamInterceptor(grpclimit.StreamServerInterceptor(limiter)),
	)
	// end of snippet
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	log.Fatal(srv.Serve(lis))
}
