// Package grpclimit is the gRPC edge of retryafter: server interceptors that ask any
// [retryafter.Limiter] about each call and tell a refused client the limiter's exact wait, the
// two ways gRPC has to say it, and a client interceptor that obeys them.
//
//	limiter := retryafter.NewTokenBucket(10, 20) // 10 calls a second per client, bursts of 20
//	srv := grpc.NewServer(
//		grpc.ChainUnaryInterceptor(grpclimit.UnaryServerInterceptor(limiter)),
//		grpc.ChainStreamInterceptor(grpclimit.StreamServerInterceptor(limiter)),
//	)
//
// A refused call ends with RESOURCE_EXHAUSTED, a google.rpc.RetryInfo whose retry_delay is the
// wait rounded up to the millisecond, the trailer grpc-retry-pushback-ms of gRFC A6 with the
// same milliseconds, and a google.rpc.QuotaFailure naming the violated policies. A grpc-go,
// grpc-java or gRPC core client whose service config retries RESOURCE_EXHAUSTED waits exactly
// the pushback, whatever its own backoff, and is admitted on its first retry:
//
//	{"methodConfig": [{"name": [{}], "retryPolicy": {"maxAttempts": 3,
//	  "initialBackoff": "0.1s", "maxBackoff": "1s", "backoffMultiplier": 2,
//	  "retryableStatusCodes": ["RESOURCE_EXHAUSTED"]}}]}
//
// A client without a retry policy, or one that reads RetryInfo but not the trailer, can use
// [UnaryClientInterceptor].
package grpclimit
