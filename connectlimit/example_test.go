package connectlimit_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/time/rate"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/retryafter/retryafter"
	"github.com/retryafter/retryafter/connectlimit"
)

// A Connect handler that admits one call an hour per client: the second call is refused with
// the exact wait, as RetryInfo on every protocol and as the HTTP status 429 and Retry-After on
// the Connect protocol.
func Example() {
	limiter := retryafter.NewTokenBucket(rate.Every(time.Hour), 1)
	const procedure = "/greet.v1.GreetService/Greet"
	mux := http.NewServeMux()
	mux.Handle(procedure, connect.NewUnaryHandler(procedure,
		func(_ context.Context, r *connect.Request[wrapperspb.StringValue]) (*connect.Response[wrapperspb.StringValue], error) {
			return connect.NewResponse(wrapperspb.String("hello " + r.Msg.Value)), nil
		}, connect.WithInterceptors(connectlimit.NewInterceptor(limiter))))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	for range 2 {
		resp, err := http.Post(srv.URL+procedure, "application/json", strings.NewReader(`"gopher"`))
		if err != nil {
			panic(err)
		}
		resp.Body.Close()
		fmt.Printf("%d Retry-After: %q\n", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	// Output:
	// 200 Retry-After: ""
	// 429 Retry-After: "3600"
}
