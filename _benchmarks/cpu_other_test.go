//go:build !unix

package benchmarks

// cpuTime returns 0 where getrusage is not available; no cpu-ns/op is reported then.
func cpuTime() int64 { return 0 }
