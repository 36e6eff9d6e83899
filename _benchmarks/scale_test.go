package benchmarks

import (
	"net/http"
	"strconv"
	"testing"
	"time"
)

// The benchmarks of the scale each path must hold, retryafter against the baseline only (the
// other libraries are far off on the single-key path already):
//
//	go test -run '^$' -bench 'Returning|HotKey' -benchmem .

// scaleSubjects are the subjects the scale benchmarks compare.
var scaleSubjects = []string{"baseline", "retryafter", "baseline-defaultkey", "retryafter-defaultkey"}

func eachScale(b *testing.B, p policy, fn func(b *testing.B, s subject, h http.Handler)) {
	for _, s := range subjects {
		for _, name := range scaleSubjects {
			if s.name == name {
				b.Run("lib="+s.name, func(b *testing.B) {
					h, close := s.make(b, p)
					defer close()
					fn(b, s, h)
				})
			}
		}
	}
}

// returning is a policy whose bucket refills between two requests of a client of the returning
// benchmarks: a token every 100 ns, a burst of 2, so each client comes back to a full bucket.
var returning = policy{n: 10_000_000, per: time.Second, burst: 2}

// BenchmarkReturning: clients round-robin, each coming back after its bucket refilled, with
// 10k, 100k and 1M clients held.
func BenchmarkReturning(b *testing.B) {
	for _, n := range []int{10_000, 100_000, 1_000_000} {
		b.Run("keys="+strconv.Itoa(n), func(b *testing.B) {
			rs := requests(n) // here, so that a run of one size does not hold the others' requests
			eachScale(b, returning, func(b *testing.B, s subject, h http.Handler) {
				serial(b, s, h, rs, http.StatusOK)
			})
		})
	}
}

// BenchmarkHotKey: one client from every core at once.
func BenchmarkHotKey(b *testing.B) {
	rs := requests(1)
	eachScale(b, plenty, func(b *testing.B, s subject, h http.Handler) {
		h.ServeHTTP(newWriter(), rs[0])
		b.ReportAllocs()
		b.ResetTimer()
		cpu := cpuTime()
		b.RunParallel(func(pb *testing.PB) {
			w := newWriter()
			for pb.Next() {
				w.reset()
				h.ServeHTTP(w, rs[0])
			}
		})
		reportCPU(b, cpu)
	})
}
