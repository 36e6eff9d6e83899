package benchmarks

import (
	"context"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/didip/tollbooth/v7"
	tblimiter "github.com/didip/tollbooth/v7/limiter"
	"github.com/go-chi/httprate"
	"github.com/sethvargo/go-limiter/httplimit"
	"github.com/sethvargo/go-limiter/memorystore"
	"github.com/throttled/throttled/v2"
	"github.com/throttled/throttled/v2/store/memstore"
	ulule "github.com/ulule/limiter/v3"
	"github.com/ulule/limiter/v3/drivers/middleware/stdlib"
	ulmemory "github.com/ulule/limiter/v3/drivers/store/memory"
	"golang.org/x/time/rate"

	"github.com/retryafter/retryafter"
)

// A policy is what every subject is configured with, each in its own terms.
type policy struct {
	n   int           // requests per period
	per time.Duration // the period
	// burst is the token bucket's size for the libraries that have one.
	burst int
}

var (
	// plenty admits every request a benchmark makes: 2^30 per hour, in bursts of 2^30.
	plenty = policy{n: 1 << 30, per: time.Hour, burst: 1 << 30}
	// empty admits one request a minute: after the first, every request is refused.
	empty = policy{n: 1, per: time.Minute, burst: 1}
)

// limit is p as a rate.Limit.
func (p policy) limit() rate.Limit { return rate.Limit(float64(p.n) / p.per.Seconds()) }

// hostKey is the key function of every subject that takes one: RemoteAddr without its port.
func hostKey(r *http.Request) (string, error) {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	return host, err
}

func hostKeyString(r *http.Request) string {
	host, _, _ := net.SplitHostPort(r.RemoteAddr)
	return host
}

// hostVary is throttled's VaryBy for hostKey.
type hostVary struct{}

func (hostVary) Key(r *http.Request) string { return hostKeyString(r) }

// ok is the handler behind every limiter.
var ok = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })

// A subject builds a handler that limits ok by a policy; close releases what it started.
type subject struct {
	name string
	make func(b *testing.B, p policy) (h http.Handler, close func())
}

func none() {}

var subjects = []subject{
	{"bare", func(*testing.B, policy) (http.Handler, func()) { return ok, none }},
	{"baseline", func(_ *testing.B, p policy) (http.Handler, func()) {
		return NewBaseline(p.limit(), p.burst, hostKey, ok), none
	}},
	{"baseline-defaultkey", func(_ *testing.B, p policy) (http.Handler, func()) {
		return NewBaseline(p.limit(), p.burst, retryafter.ClientIP(), ok), none
	}},
	{"retryafter", func(_ *testing.B, p policy) (http.Handler, func()) {
		return retryafter.Limit(p.limit(), p.burst, retryafter.WithKeyFunc(hostKey))(ok), none
	}},
	{"retryafter-defaultkey", func(_ *testing.B, p policy) (http.Handler, func()) {
		return retryafter.Limit(p.limit(), p.burst)(ok), none
	}},
	{"httprate", func(_ *testing.B, p policy) (http.Handler, func()) {
		return httprate.LimitBy(p.n, p.per, hostKey)(ok), none
	}},
	{"tollbooth", func(_ *testing.B, p policy) (http.Handler, func()) {
		lmt := tollbooth.NewLimiter(float64(p.limit()), &tblimiter.ExpirableOptions{DefaultExpirationTTL: time.Hour})
		lmt.SetBurst(p.burst).SetIPLookups([]string{"RemoteAddr"}).SetIgnoreURL(true)
		return tollbooth.LimitHandler(lmt, ok), none
	}},
	{"ulule", func(_ *testing.B, p policy) (http.Handler, func()) {
		l := ulule.New(ulmemory.NewStore(), ulule.Rate{Period: p.per, Limit: int64(p.n)})
		return stdlib.NewMiddleware(l, stdlib.WithKeyGetter(hostKeyString)).Handler(ok), none
	}},
	{"sethvargo", func(b *testing.B, p policy) (http.Handler, func()) {
		store, err := memorystore.New(&memorystore.Config{Tokens: uint64(p.n), Interval: p.per})
		if err != nil {
			b.Fatal(err)
		}
		m, err := httplimit.NewMiddleware(store, httplimit.KeyFunc(hostKey))
		if err != nil {
			b.Fatal(err)
		}
		return m.Handle(ok), func() { store.Close(context.Background()) }
	}},
	{"throttled", func(b *testing.B, p policy) (http.Handler, func()) {
		store, err := memstore.NewCtx(0)
		if err != nil {
			b.Fatal(err)
		}
		l, err := throttled.NewGCRARateLimiterCtx(store, throttled.RateQuota{
			MaxRate:  throttled.PerDuration(p.n, p.per),
			MaxBurst: p.burst - 1,
		})
		if err != nil {
			b.Fatal(err)
		}
		return (&throttled.HTTPRateLimiterCtx{RateLimiter: l, VaryBy: hostVary{}}).RateLimit(ok), none
	}},
}

// writer is a ResponseWriter a benchmark reuses, as a server reuses its buffers; like
// net/http's own, it has WriteString.
type writer struct {
	h    http.Header
	code int
}

func newWriter() *writer                            { return &writer{h: make(http.Header)} }
func (w *writer) Header() http.Header               { return w.h }
func (w *writer) Write(p []byte) (int, error)       { w.WriteHeader(http.StatusOK); return len(p), nil }
func (w *writer) WriteString(s string) (int, error) { w.WriteHeader(http.StatusOK); return len(s), nil }
func (w *writer) reset()                            { clear(w.h); w.code = 0 }
func (w *writer) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
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

// each runs fn once per subject, as the sub-benchmark lib=<name>.
func each(b *testing.B, p policy, fn func(b *testing.B, s subject, h http.Handler)) {
	for _, s := range subjects {
		b.Run("lib="+s.name, func(b *testing.B) {
			h, close := s.make(b, p)
			defer close()
			fn(b, s, h)
		})
	}
}

// serial serves rs round-robin through h, b.N times, after one warm-up pass, and fails unless
// the last answer is want (the bare handler always answers 200).
func serial(b *testing.B, s subject, h http.Handler, rs []*http.Request, want int) {
	w := newWriter()
	for _, r := range rs {
		w.reset()
		h.ServeHTTP(w, r)
	}
	b.ReportAllocs()
	b.ResetTimer()
	cpu := cpuTime()
	for i := range b.N {
		w.reset()
		h.ServeHTTP(w, rs[i%len(rs)])
	}
	reportCPU(b, cpu)
	b.StopTimer()
	if s.name == "bare" {
		want = http.StatusOK
	}
	if w.code != want {
		b.Fatalf("status %d, want %d", w.code, want)
	}
}

func reportCPU(b *testing.B, start int64) {
	if start != 0 && b.N > 0 {
		b.ReportMetric(float64(cpuTime()-start)/float64(b.N), "cpu-ns/op")
	}
}

// BenchmarkAllowed: one client, plenty of tokens.
func BenchmarkAllowed(b *testing.B) {
	rs := requests(1)
	each(b, plenty, func(b *testing.B, s subject, h http.Handler) { serial(b, s, h, rs, http.StatusOK) })
}

// BenchmarkRejected: one client whose bucket is empty.
func BenchmarkRejected(b *testing.B) {
	rs := requests(1)
	each(b, empty, func(b *testing.B, s subject, h http.Handler) {
		serial(b, s, h, rs, http.StatusTooManyRequests)
	})
}

// BenchmarkKeys10k: 10,000 clients round-robin, plenty of tokens.
func BenchmarkKeys10k(b *testing.B) {
	rs := requests(10_000)
	each(b, plenty, func(b *testing.B, s subject, h http.Handler) { serial(b, s, h, rs, http.StatusOK) })
}

// BenchmarkParallel1k: 1,000 clients from GOMAXPROCS goroutines, plenty of tokens.
func BenchmarkParallel1k(b *testing.B) {
	rs := requests(1000)
	each(b, plenty, func(b *testing.B, s subject, h http.Handler) {
		for _, r := range rs {
			h.ServeHTTP(newWriter(), r)
		}
		var next atomic.Uint32
		b.ReportAllocs()
		b.ResetTimer()
		cpu := cpuTime()
		b.RunParallel(func(pb *testing.PB) {
			w := newWriter()
			i := int(next.Add(7919))
			for pb.Next() {
				w.reset()
				h.ServeHTTP(w, rs[i%len(rs)])
				i++
			}
		})
		reportCPU(b, cpu)
	})
}

// BenchmarkBytesPerKey reports the heap each subject holds per client after 100,000 distinct
// clients have each been refused once (so that none of them is idle), and a collection.
func BenchmarkBytesPerKey(b *testing.B) {
	const n = 100_000
	rs := requests(n)
	each(b, empty, func(b *testing.B, s subject, h http.Handler) {
		for b.Loop() {
			b.StopTimer()
			h, close := s.make(b, empty)
			before := heapAlloc()
			b.StartTimer()
			w := newWriter()
			for range 2 {
				for _, r := range rs {
					w.reset()
					h.ServeHTTP(w, r)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(int64(heapAlloc())-int64(before))/n, "B/key")
			runtime.KeepAlive(h)
			close()
			b.StartTimer()
		}
	})
}

// heapAlloc returns the bytes of live heap objects once collections free no more. One is not
// always enough: ulule/limiter's memory store stops the goroutine that holds its cache from a
// finalizer, so a store dropped by the run before is freed only by a later collection, and
// would otherwise be counted against the next run's store.
func heapAlloc() uint64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m)
	for range 10 {
		last := m.HeapAlloc
		for range 10 {
			runtime.Gosched() // lets the finalizers the collection queued run
		}
		runtime.GC()
		runtime.ReadMemStats(&m)
		if m.HeapAlloc+4096 >= last {
			break
		}
	}
	return m.HeapAlloc
}
