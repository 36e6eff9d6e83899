// Package connectlimit is the Connect edge of retryafter: an interceptor for connect-go
// handlers that asks any [retryafter.Limiter] about each call, unary or streaming, and tells a
// refused client the limiter's exact wait in the form each protocol of a Connect handler reads,
// and a client interceptor that obeys it.
//
//	limiter := retryafter.NewTokenBucket(10, 20) // 10 calls a second per client, bursts of 20
//	path, handler := greetv1connect.NewGreetServiceHandler(&greeter{},
//		connect.WithInterceptors(connectlimit.NewInterceptor(limiter)))
//
// A refused call ends with resource_exhausted and a google.rpc.RetryInfo whose retry_delay is
// the wait rounded up to the millisecond, never 0, on every protocol. On the Connect protocol a
// unary call's HTTP answer is then 429 with Retry-After (delay-seconds, rounded up); a
// streaming call answers 200 with the error at the end of the stream, as the protocol requires.
// On gRPC and gRPC-Web the trailer grpc-retry-pushback-ms carries the same milliseconds, which a
// grpc-go client with a retry policy obeys. The decisions are the package edge's, as for every
// edge of retryafter.
package connectlimit
