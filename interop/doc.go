// Package interop holds the tests that put this repository's packages between servers and
// clients that nobody here wrote: upstreams built on go-chi/httprate, sethvargo/go-limiter and
// ulule/limiter behind the gateway, hashicorp/go-retryablehttp beside retryclient as the client, and a real
// headless Chromium against the middleware with go-chi/cors.
//
// It is a module of its own so that those libraries are test-only requirements of this module
// and never of the library's: the root go.mod requires golang.org/x/time only.
package interop
