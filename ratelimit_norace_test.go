//go:build !race

package retryafter

// floodClients is how many clients TestTokenBucketFlood sends.
const floodClients = 1_000_000
