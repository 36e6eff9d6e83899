package retryafter

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/time/rate"
)

// The package's own benchmarks. The comparison with the hand-written baseline and with other
// libraries, measured in CPU time, lives in the _benchmarks module.
//
//	go test -run '^$' -bench . -benchmem

// hostKey is the key function of the benchmarks: RemoteAddr without its port, allocation-free.
func hostKey(r *http.Request) (string, error) {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return "", err
	}
	return host, nil
}

// Policies: plenty of tokens for the allowed path (a burst no benchmark spends, refilling at 100
// a second so that a key in use never looks idle), an empty bucket for the rejected one.
const (
	plentyRate  = rate.Limit(100)
	plentyBurst = 1 << 30
)

var emptyRate = rate.Every(time.Minute)

// okBench is the handler behind the middleware: it writes a status and nothing else.
var okBench = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
	w.WriteHeader(http.StatusOK)
})

// requests returns n requests from n distinct client addresses.
func requests(n int) []*http.Request {
	rs := make([]*http.Request, n)
	for i := range rs {
		rs[i] = newRequest(http.MethodGet, clientAddr(i)+":4321")
	}
	return rs
}

// clientAddr returns the i-th of 16M distinct IPv4 addresses.
func clientAddr(i int) string {
	return "10." + strconv.Itoa(i>>16&255) + "." + strconv.Itoa(i>>8&255) + "." + strconv.Itoa(i&255)
}

// run serves rs round-robin through h, b.N times, and fails if one gets a status other than want.
func run(b *testing.B, h http.Handler, rs []*http.Request, want int) {
	w := newTestWriter()
	h.ServeHTTP(w, rs[0]) // create the key, spend the burst of an empty policy
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		w.reset()
		h.ServeHTTP(w, rs[i%len(rs)])
	}
	b.StopTimer()
	if w.code != want {
		b.Fatalf("status %d, want %d", w.code, want)
	}
}

func BenchmarkAllowed(b *testing.B) {
	b.Run("hostkey", func(b *testing.B) {
		run(b, Limit(plentyRate, plentyBurst, WithKeyFunc(hostKey))(okBench), requests(1), http.StatusOK)
	})
	b.Run("default", func(b *testing.B) {
		run(b, Limit(plentyRate, plentyBurst)(okBench), requests(1), http.StatusOK)
	})
}

func BenchmarkRejected(b *testing.B) {
	run(b, Limit(emptyRate, 1, WithKeyFunc(hostKey))(okBench), requests(1), http.StatusTooManyRequests)
}

func BenchmarkKeys10k(b *testing.B) {
	rs := requests(10_000)
	h := Limit(plentyRate, plentyBurst, WithKeyFunc(hostKey))(okBench)
	for _, r := range rs {
		h.ServeHTTP(newTestWriter(), r)
	}
	run(b, h, rs, http.StatusOK)
}

func BenchmarkParallel1k(b *testing.B) {
	rs := requests(1000)
	h := Limit(plentyRate, plentyBurst, WithKeyFunc(hostKey))(okBench)
	var next atomic.Uint32
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		w := newTestWriter()
		i := int(next.Add(7919))
		for pb.Next() {
			w.reset()
			h.ServeHTTP(w, rs[i%len(rs)])
			i++
		}
	})
}

// BenchmarkDecide measures the TokenBucket alone, without HTTP, through the Limiter interface.
func BenchmarkDecide(b *testing.B) {
	ctx := context.Background()
	b.Run("allowed", func(b *testing.B) {
		tb := NewTokenBucket(plentyRate, plentyBurst)
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			tb.Decide(ctx, "192.0.2.1", 1, t0.Add(time.Duration(i)))
		}
	})
	b.Run("rejected", func(b *testing.B) {
		tb := NewTokenBucket(emptyRate, 1)
		tb.Decide(ctx, "192.0.2.1", 1, t0)
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			if d, _ := tb.Decide(ctx, "192.0.2.1", 1, t0.Add(time.Duration(i))); d.Allowed {
				b.Fatal("admitted")
			}
		}
	})
}

// BenchmarkBytesPerKey reports the heap a TokenBucket of the default bound holds per key, after
// 10,000, 100,000 and 1,000,000 distinct clients and a garbage collection: IPv4 addresses, and
// the /64 prefixes ClientIP makes the keys of IPv6 clients.
func BenchmarkBytesPerKey(b *testing.B) {
	for _, v := range []struct {
		name string
		key  func(int) string
	}{
		{"ipv4", clientAddr},
		{"ipv6", func(i int) string { return fmt.Sprintf("2001:db8:%x:%x::/64", i>>16, i&0xffff) }},
	} {
		for _, n := range []int{10_000, 100_000, 1_000_000} {
			b.Run(v.name+"/keys="+strconv.Itoa(n), func(b *testing.B) { benchmarkBytesPerKey(b, n, v.key) })
		}
	}
}

func benchmarkBytesPerKey(b *testing.B, n int, key func(int) string) {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = key(i)
	}
	ctx := context.Background()
	for b.Loop() {
		before := heapInUse()
		tb := NewTokenBucket(emptyRate, 1)
		for _, k := range keys {
			tb.Decide(ctx, k, 1, t0)
		}
		after := heapInUse()
		if tb.Len() != n {
			b.Fatalf("%d keys held, want %d", tb.Len(), n)
		}
		b.ReportMetric(float64(after-before)/float64(n), "B/key")
		runtime.KeepAlive(tb)
	}
}

// heapInUse returns the bytes of live heap objects after a full collection.
func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
