//go:build race

package retryafter

// floodClients is how many clients TestTokenBucketFlood sends: fewer under the race detector,
// which makes each request about ten times slower.
const floodClients = 20_000
