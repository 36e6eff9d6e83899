package redisstore

import (
	"net/http"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retryafter/retryafter"
	"github.com/retryafter/retryafter/internal/testkit"
)

// BenchmarkStarvedClient sends legitimate requests (a limit none of them reaches) through the
// middleware to a Store on the healthy Redis at REDIS_ADDR, with the store's default timeout
// and probe interval, from a process starved of CPU: STARVE_HOGS goroutines (2 by default) spin
// beside the 16 that send the requests, each one every 10 ms at most (a steady 1,600/s, so that
// a store that fails fast does not end the run sooner), so that with GOMAXPROCS=1 a goroutine
// waits up to a scheduler slice (10 ms) per spinning one before it runs, and reads Redis's
// replies late. It
// reports, per b.N requests, how many were answered 503 ("503s"), how many of those had their
// own wait past the timeout ("503s-late", which may fail) and how many did not ("503s-early",
// refused although their own round trip was not late: what the down state costs), and how many
// requests waited past the timeout ("late"). "store" is one Store; "all-charged" an All of a
// limit per key and tokens charged afterwards, which costs a request two round trips.
//
//	GOMAXPROCS=1 STARVE_HOGS=2 REDIS_ADDR=127.0.0.1:6379 go test -run '^$' -bench StarvedClient -benchtime 5000x .
func BenchmarkStarvedClient(b *testing.B) {
	hogs := 2
	if v, err := strconv.Atoi(os.Getenv("STARVE_HOGS")); err == nil {
		hogs = v
	}
	client := newClient(b, sharedAddr(b))
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { retryafter.Charge(r, 1) })
	run := func(b *testing.B, l retryafter.Limiter) {
		var errMu sync.Mutex
		errs := map[string]int{}
		h := retryafter.LimitWith(l, retryafter.WithErrorHook(func(_ *http.Request, err error) {
			errMu.Lock()
			errs[err.Error()]++
			errMu.Unlock()
		}))(ok)
		for range 32 { // warm the pool's connections and the scripts
			testkit.Serve(h, http.MethodGet, "192.0.2.1:1")
		}
		var stop atomic.Bool
		var spin sync.WaitGroup
		for range hogs {
			spin.Go(func() {
				for n := 0; !stop.Load(); n++ {
				}
			})
		}
		var failed, early, late atomic.Int64
		var next atomic.Int64
		var wg sync.WaitGroup
		b.ResetTimer()
		for w := range 16 {
			remote := "192.0.2." + strconv.Itoa(w+1) + ":1"
			wg.Go(func() {
				tick := time.NewTicker(10 * time.Millisecond)
				defer tick.Stop()
				for next.Add(1) <= int64(b.N) {
					<-tick.C
					start := time.Now()
					code := testkit.Serve(h, http.MethodGet, remote).Code
					took := time.Since(start)
					if took > DefaultTimeout {
						late.Add(1)
					}
					switch code {
					case http.StatusOK:
					case http.StatusServiceUnavailable:
						failed.Add(1)
						if took <= DefaultTimeout {
							early.Add(1)
						}
					default:
						b.Errorf("status %d for a legitimate request", code)
					}
				}
			})
		}
		wg.Wait()
		b.StopTimer()
		stop.Store(true)
		spin.Wait()
		b.ReportMetric(float64(failed.Load()), "503s")
		b.ReportMetric(float64(failed.Load()-early.Load()), "503s-late")
		b.ReportMetric(float64(early.Load()), "503s-early")
		b.ReportMetric(float64(late.Load()), "late")
		b.Logf("errors: %v", errs)
		b.Logf("GOMAXPROCS=%d, %d spinning goroutines: %d of %d requests answered 503 (%d of them not late themselves), %d late",
			runtime.GOMAXPROCS(0), hogs, failed.Load(), b.N, early.Load(), late.Load())
	}
	b.Run("store", func(b *testing.B) {
		run(b, New(client, 1e6, 1e6, WithPrefix(testPrefix(b))))
	})
	b.Run("all-charged", func(b *testing.B) {
		prefix := testPrefix(b)
		perKey := New(client, 1e6, 1e6, WithPrefix(prefix+"key:"))
		tokens := New(client, 1e6, 1e6, WithPrefix(prefix+"tokens:"))
		run(b, retryafter.All(perKey, retryafter.ChargedAfter(tokens)))
	})
}
