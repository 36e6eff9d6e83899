//go:build !unix

package retryafter

// cpuTime returns 0 where getrusage is not available; the benchmarks then report no cpu-ns/op.
func cpuTime() int64 { return 0 }
