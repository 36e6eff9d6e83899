// Package grpcbench measures grpclimit's unary interceptor against go-grpc-middleware's
// ratelimit interceptor with an x/time/rate limiter, per admitted and per refused call: see
// the gRPC section of ../README.md.
package grpcbench
