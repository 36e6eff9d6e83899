// Package edge is the core that every edge of retryafter shares: what a request that is to be
// limited goes through, whatever carries it. An edge is whatever reads a request and writes the
// answer: the net/http middleware of the root package, the gRPC interceptors of grpclimit, a
// gateway's plugin, a service of your own.
//
// An edge fills a [Config] for its own request type R (how to name the client, what a request
// costs, which are exempt, the hooks) and asks its [Core] about each request. The [Verdict]
// says what became of it, and all the edge needs to answer it: pass it on, or refuse it with
// the Limiter's exact wait, from one reading of the clock. The edge then writes the wait in its
// own way, with the formats of this package: [DelaySeconds] for Retry-After, [Millis] for
// gRPC's pushback and RetryInfo.
//
// The [Limiter] is the seam between how requests are counted and what they are answered; the
// root package's TokenBucket, All and Shared, package redisstore and package httpratestore
// implement it. Its [Decision] is exact: a client that waits the Decision's RetryAfter, rounded
// up, and comes back is admitted, unless something else spent its quota meanwhile. The edge
// must never tell a shorter wait.
package edge
