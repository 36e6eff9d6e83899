package grpcbench

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/ratelimit"
	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/retryafter/retryafter"
	"github.com/retryafter/retryafter/grpclimit"
)

// BenchmarkUnary runs each interceptor on one call after another from one client, admitted
// (2^30 tokens an hour, bursts of 2^30) or refused (an empty bucket of one an hour), as grpc-go
// calls it: a context with the peer and a transport stream that takes the trailer, a handler
// that does nothing.
func BenchmarkUnary(b *testing.B) {
	for _, path := range []struct {
		name  string
		limit rate.Limit
		burst int
	}{
		{"admitted", rate.Every(time.Hour) * (1 << 30), 1 << 30},
		{"refused", rate.Every(time.Hour), 1},
	} {
		for _, lib := range []struct {
			name string
			new  func(rate.Limit, int) grpc.UnaryServerInterceptor
		}{
			{"grpclimit", func(l rate.Limit, burst int) grpc.UnaryServerInterceptor {
				return grpclimit.UnaryServerInterceptor(retryafter.NewTokenBucket(l, burst))
			}},
			{"go-grpc-middleware", func(l rate.Limit, burst int) grpc.UnaryServerInterceptor {
				return ratelimit.UnaryServerInterceptor(xrate{rate.NewLimiter(l, burst)})
			}},
		} {
			b.Run("path="+path.name+"/lib="+lib.name, func(b *testing.B) {
				run(b, lib.new(path.limit, path.burst), path.name == "admitted")
			})
		}
	}
}

// run calls intercept b.N times, after a first call that spends the burst of a refused path.
func run(b *testing.B, intercept grpc.UnaryServerInterceptor, admitted bool) {
	ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(203, 0, 113, 7), Port: 50000}})
	ctx = grpc.NewContextWithServerTransportStream(ctx, stream{})
	info := &grpc.UnaryServerInfo{FullMethod: "/bench.Service/Call"}
	handler := func(context.Context, any) (any, error) { return nil, nil }
	if !admitted {
		intercept(ctx, nil, info, handler)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := intercept(ctx, nil, info, handler); (err == nil) != admitted {
			b.Fatalf("admitted %v, want %v", err == nil, admitted)
		}
	}
}

// xrate is go-grpc-middleware's ratelimit.Limiter on one x/time/rate limiter, as its example
// has it.
type xrate struct{ l *rate.Limiter }

func (x xrate) Limit(context.Context) error {
	if !x.l.Allow() {
		return errors.New("rate limit exceeded")
	}
	return nil
}

// stream is the server transport stream of a call, which takes its header and trailer.
type stream struct{}

func (stream) Method() string               { return "/bench.Service/Call" }
func (stream) SetHeader(metadata.MD) error  { return nil }
func (stream) SendHeader(metadata.MD) error { return nil }
func (stream) SetTrailer(metadata.MD) error { return nil }
