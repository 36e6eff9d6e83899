// connectlimit/README.md's quick start, as a user builds it, with a handler of its own in place
// of generated code.
package main

import (
	"context"
	"log"
	"net/http"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/retryafter/retryafter"
	"github.com/retryafter/retryafter/connectlimit"
)

// greetv1connect stands for the package connect's code generator writes.
var greetv1connect = struct {
	NewGreetServiceHandler func(any, ...connect.HandlerOption) (string, http.Handler)
}{func(_ any, opts ...connect.HandlerOption) (string, http.Handler) {
	const path = "/greet.v1.GreetService/Greet"
	return path, connect.NewUnaryHandler(path, func(context.Context, *connect.Request[emptypb.Empty]) (*connect.Response[emptypb.Empty], error) {
		return connect.NewResponse(&emptypb.Empty{}), nil
	}, opts...)
}}

type greeter struct{}

func main() {
	mux := http.NewServeMux()
	// snippet from connectlimit/README.md
	limiter := retryafter.NewTokenBucket(10, 20) // 10 calls a second per client, bursts of 20
	path, handler := greetv1connect.NewGreetServiceHandler(&greeter{},
		connect.WithInterceptors(connectlimit.NewInterceptor(limiter)))
	mux.Handle(path, connectlimit.TrailersOnly(handler))
	// end of snippet
	log.Fatal(http.ListenAndServe("127.0.0.1:8080", mux))
}
