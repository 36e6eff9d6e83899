package edges

import (
	"bytes"
	"context"
	"net/http"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/retryafter/retryafter"
	"github.com/retryafter/retryafter/connectlimit"
)

// BenchmarkConnect sends one unary call after another from one client, in the Connect
// protocol's binary form, to a connect-go handler that answers its request: bare, and behind
// connectlimit's interceptor (a TokenBucket, keyed by the peer's address). No Connect rate
// limiter exists to compare with.
func BenchmarkConnect(b *testing.B) {
	const procedure = "/bench.v1.BenchService/Call"
	body, err := proto.Marshal(wrapperspb.String("x"))
	if err != nil {
		b.Fatal(err)
	}
	for _, p := range paths {
		for _, lib := range []string{"bare", "connectlimit"} {
			if lib == "bare" && p.name == "refused" {
				continue
			}
			b.Run("path="+p.name+"/lib="+lib, func(b *testing.B) {
				var opts []connect.HandlerOption
				if lib != "bare" {
					opts = append(opts, connect.WithInterceptors(connectlimit.NewInterceptor(retryafter.NewTokenBucket(p.limit(), p.burst))))
				}
				h := connect.NewUnaryHandler(procedure, func(_ context.Context, r *connect.Request[wrapperspb.StringValue]) (*connect.Response[wrapperspb.StringValue], error) {
					return connect.NewResponse(r.Msg), nil
				}, opts...)
				req, err := http.NewRequest(http.MethodPost, "http://api.test"+procedure, nil)
				if err != nil {
					b.Fatal(err)
				}
				req.RemoteAddr = "203.0.113.7:50000"
				req.Header.Set("Content-Type", "application/proto")
				r := &rewind{}
				req.Body = r
				w := &writer{h: http.Header{}}
				serve := func() {
					r.Reset(body)
					clear(w.h)
					w.code = 0
					h.ServeHTTP(w, req)
				}
				want := http.StatusOK
				if p.name == "refused" {
					serve()
					want = http.StatusTooManyRequests
				}
				b.ReportAllocs()
				for b.Loop() {
					serve()
				}
				if got := w.code; got != want {
					b.Fatalf("answered %d, want %d", got, want)
				}
			})
		}
	}
}

// rewind is a request body read again from its start after each Reset.
type rewind struct{ bytes.Reader }

func (*rewind) Close() error { return nil }
