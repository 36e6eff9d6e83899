// Package benchmarks compares retryafter with other Go rate limiters on one policy: the same
// requests, key function (where a library takes one) and ResponseWriter through go-chi/httprate,
// didip/tollbooth, ulule/limiter, sethvargo/go-limiter, throttled/throttled, retryafter, a
// hand-written map[string]*rate.Limiter behind one mutex (the baseline, also keyed by
// retryafter.ClientIP to match retryafter's default key function) and a bare handler.
//
// It is a module of its own so that the library's go.mod does not require the peers. Run
// ./run.sh to produce the table of README.md in this folder, go run ./e2e for the end-to-end
// comparison on loopback, and ./floor.sh for what every request pays whatever counts it.
package benchmarks
