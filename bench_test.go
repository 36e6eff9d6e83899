package retryafter

import (
	"context"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/time/rate"
)

// The benchmarks compare the middleware with the hand-written limiter it must stay close to: a
// map[string]*rate.Limiter behind one sync.Mutex, calling Allow. Both use the same key function
// (hostKey) and the same reusable ResponseWriter, so what differs is the limiter.
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

// benchWriter is a ResponseWriter that a benchmark reuses across requests.
type benchWriter struct {
	h    http.Header
	code int
}

func newBenchWriter() *benchWriter { return &benchWriter{h: make(http.Header)} }

func (w *benchWriter) Header() http.Header { return w.h }

func (w *benchWriter) Write(p []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return len(p), nil
}

// WriteString is there because net/http's own ResponseWriter has it: io.WriteString then
// writes a string without converting it to a []byte.
func (w *benchWriter) WriteString(s string) (int, error) { return w.Write(nil) }

func (w *benchWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
}

func (w *benchWriter) reset() {
	clear(w.h)
	w.code = 0
}

// baseline is the hand-written limiter the targets are stated against.
type baseline struct {
	mu    sync.Mutex
	keys  map[string]*rate.Limiter
	limit rate.Limit
	burst int
	next  http.Handler
}

func newBaseline(limit rate.Limit, burst int, next http.Handler) *baseline {
	return &baseline{keys: make(map[string]*rate.Limiter), limit: limit, burst: burst, next: next}
}

func (b *baseline) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key, err := hostKey(r)
	if err != nil {
		http.Error(w, "no key", http.StatusInternalServerError)
		return
	}
	b.mu.Lock()
	lim, ok := b.keys[key]
	if !ok {
		lim = rate.NewLimiter(b.limit, b.burst)
		b.keys[key] = lim
	}
	b.mu.Unlock()
	if !lim.Allow() {
		w.WriteHeader(http.StatusTooManyRequests)
		return
	}
	b.next.ServeHTTP(w, r)
}

// Policies: plenty of tokens for the allowed path (a burst no benchmark spends, refilling at 100
// a second so that a key in use never looks idle), an empty bucket for the rejected one.
const (
	plentyRate  = rate.Limit(100)
	plentyBurst = 1 << 30
)

var emptyRate = rate.Every(time.Minute)

// okBench is the handler behind the limiters: it writes a status and nothing else.
var okBench = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
	w.WriteHeader(http.StatusOK)
})

// subjects returns the handlers under test, each over okBench.
func subjects(limit rate.Limit, burst int) []struct {
	name string
	h    http.Handler
} {
	return []struct {
		name string
		h    http.Handler
	}{
		{"baseline", newBaseline(limit, burst, okBench)},
		{"retryafter", Limit(limit, burst, WithKeyFunc(hostKey))(okBench)},
	}
}

// requests returns n requests from n distinct client addresses.
func requests(n int) []*http.Request {
	rs := make([]*http.Request, n)
	for i := range rs {
		r, _ := http.NewRequest(http.MethodGet, "http://example.com/", nil)
		r.RemoteAddr = clientAddr(i) + ":4321"
		rs[i] = r
	}
	return rs
}

// clientAddr returns the i-th of 16M distinct IPv4 addresses.
func clientAddr(i int) string {
	return "10." + strconv.Itoa(i>>16&255) + "." + strconv.Itoa(i>>8&255) + "." + strconv.Itoa(i&255)
}

// run serves rs round-robin through h, b.N times, and fails if one gets a status other than want.
func run(b *testing.B, h http.Handler, rs []*http.Request, want int) {
	w := newBenchWriter()
	h.ServeHTTP(w, rs[0]) // create the key, spend the burst of an empty policy
	b.ReportAllocs()
	b.ResetTimer()
	cpu := cpuTime()
	for i := range b.N {
		w.reset()
		h.ServeHTTP(w, rs[i%len(rs)])
	}
	reportCPU(b, cpu)
	b.StopTimer()
	if w.code != want {
		b.Fatalf("status %d, want %d", w.code, want)
	}
}

func BenchmarkAllowed(b *testing.B) {
	for _, s := range subjects(plentyRate, plentyBurst) {
		b.Run(s.name, func(b *testing.B) { run(b, s.h, requests(1), http.StatusOK) })
	}
}

func BenchmarkRejected(b *testing.B) {
	for _, s := range subjects(emptyRate, 1) {
		b.Run(s.name, func(b *testing.B) { run(b, s.h, requests(1), http.StatusTooManyRequests) })
	}
}

func BenchmarkKeys10k(b *testing.B) {
	rs := requests(10_000)
	for _, s := range subjects(plentyRate, plentyBurst) {
		b.Run(s.name, func(b *testing.B) {
			for _, r := range rs {
				s.h.ServeHTTP(newBenchWriter(), r)
			}
			run(b, s.h, rs, http.StatusOK)
		})
	}
}

func BenchmarkParallel1k(b *testing.B) {
	rs := requests(1000)
	for _, s := range subjects(plentyRate, plentyBurst) {
		b.Run(s.name, func(b *testing.B) {
			var next atomic.Uint32
			b.ReportAllocs()
			cpu := cpuTime()
			defer reportCPU(b, cpu)
			b.RunParallel(func(pb *testing.PB) {
				w := newBenchWriter()
				i := int(next.Add(7919))
				for pb.Next() {
					w.reset()
					s.h.ServeHTTP(w, rs[i%len(rs)])
					i++
				}
			})
		})
	}
}

// BenchmarkDecide measures the TokenBucket alone, without HTTP.
func BenchmarkDecide(b *testing.B) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		opts []Option
	}{{"plain", nil}, {"quota", []Option{withQuota()}}} {
		b.Run("allowed/"+tc.name, func(b *testing.B) {
			tb := NewTokenBucket(plentyRate, plentyBurst, tc.opts...)
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				tb.Decide(ctx, "192.0.2.1", 1, t0.Add(time.Duration(i)))
			}
		})
		b.Run("rejected/"+tc.name, func(b *testing.B) {
			tb := NewTokenBucket(emptyRate, 1, tc.opts...)
			tb.Decide(ctx, "192.0.2.1", 1, t0)
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				if d, _ := tb.Decide(ctx, "192.0.2.1", 1, t0.Add(time.Duration(i))); d.Allowed {
					b.Fatal("admitted")
				}
			}
		})
	}
}

// BenchmarkBytesPerKey reports the heap a TokenBucket holds per key, after 100,000 distinct
// clients and a garbage collection.
func BenchmarkBytesPerKey(b *testing.B) {
	const n = 100_000
	keys := make([]string, n)
	for i := range keys {
		keys[i] = clientAddr(i)
	}
	ctx := context.Background()
	for b.Loop() {
		before := heapInUse()
		tb := NewTokenBucket(emptyRate, 1)
		for _, k := range keys {
			tb.Decide(ctx, k, 1, t0)
		}
		after := heapInUse()
		b.ReportMetric(float64(after-before)/n, "B/key")
		runtime.KeepAlive(tb)
	}
}

// reportCPU reports the CPU time per operation since cpuTime returned start, as cpu-ns/op. In
// a RunParallel benchmark it is the CPU of all goroutines per operation, so it shows the cost,
// and ns/op the scaling.
func reportCPU(b *testing.B, start int64) {
	if start == 0 || b.N == 0 {
		return
	}
	b.ReportMetric(float64(cpuTime()-start)/float64(b.N), "cpu-ns/op")
}

// heapInUse returns the bytes of live heap objects after a full collection.
func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
