package redisstore

import (
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/retryafter/retryafter"
	"github.com/retryafter/retryafter/internal/testkit"
)

// replicas starts n httptest servers, each a replica with its own client and Store over the
// Redis at addr, all with the same prefix, rate and burst, behind retryafter.LimitWith with
// opts. The servers are closed when the test ends.
func replicas(t *testing.T, addr string, n int, limit rate.Limit, burst int, storeOpts []Option, opts ...retryafter.Option) []*httptest.Server {
	t.Helper()
	var srvs []*httptest.Server
	for range n {
		store := New(newClient(t, addr), limit, burst, storeOpts...)
		srv := httptest.NewServer(retryafter.LimitWith(store, opts...)(okHandler))
		t.Cleanup(srv.Close)
		srvs = append(srvs, srv)
	}
	return srvs
}

// fetch sends GET / to srv and returns the response with its body read and closed.
func fetch(t *testing.T, srv *httptest.Server) *http.Response {
	t.Helper()
	resp, err := srv.Client().Get(srv.URL)
	if err != nil {
		t.Error(err)
		return nil
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// TestFleetSharesOneLimit puts three replicas on one Redis and has eight goroutines send
// requests, each to the replicas in turn, at 50 requests/s with bursts of 10, all counted
// against one key, for at least 300 ms of real time and until some request has been refused
// (at most 20 s, for a machine too loaded to outpace the limit). The replicas together must
// admit at most what one token bucket would: burst + rate × elapsed, where elapsed is measured
// on Redis's clock, the one that decides, from before the first request is sent to after the
// last answer arrives, so that every decision falls inside it; plus 1 for the microsecond
// Redis's clock is read to. And at least the burst: the first ten are admitted.
func TestFleetSharesOneLimit(t *testing.T) {
	const (
		limit    = 50
		burst    = 10
		duration = 300 * time.Millisecond
		giveUp   = 20 * time.Second
		workers  = 8
	)
	addr := sharedAddr(t)
	clock := newClient(t, addr)
	srvs := replicas(t, addr, 3, limit, burst,
		[]Option{WithPrefix(testPrefix(t)), WithTimeout(testTimeout)},
		retryafter.WithKeyFunc(func(*http.Request) (string, error) { return "everyone", nil }))

	var admitted, refused atomic.Int64
	var wg sync.WaitGroup
	begin := redisNow(t, clock)
	start := time.Now()
	for w := range workers {
		wg.Go(func() {
			for i := w; ; i++ {
				if since := time.Since(start); since >= giveUp || since >= duration && refused.Load() > 0 {
					return
				}
				resp := fetch(t, srvs[i%len(srvs)])
				switch {
				case resp == nil:
					return
				case resp.StatusCode == http.StatusOK:
					admitted.Add(1)
				case resp.StatusCode == http.StatusTooManyRequests && resp.Header.Get("Retry-After") == "1":
					refused.Add(1)
				default:
					t.Errorf("status %d, Retry-After %q: want 200, or 429 with 1", resp.StatusCode, resp.Header.Get("Retry-After"))
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := redisNow(t, clock).Sub(begin)

	bound := burst + int64(limit*elapsed.Seconds()) + 1
	t.Logf("%d admitted, %d refused in %v by %d replicas (bound %d)", admitted.Load(), refused.Load(), elapsed, len(srvs), bound)
	if admitted.Load() > bound {
		t.Fatalf("%d admitted in %v, more than burst + rate × elapsed + 1 = %d", admitted.Load(), elapsed, bound)
	}
	if admitted.Load() < burst || refused.Load() == 0 {
		t.Fatalf("%d admitted and %d refused: the load did not reach the limit", admitted.Load(), refused.Load())
	}
}

// TestFleetBouncedClient sends one client's requests to two replicas in turn, on an injected
// clock that both replicas and Redis read: whenever one replica refuses it, the other refuses it
// a second short of the Retry-After and admits it once the Retry-After has passed.
func TestFleetBouncedClient(t *testing.T) {
	addr := sharedAddr(t)
	clock := testkit.NewClock(t0) // the replicas read it from their own goroutines
	srvs := replicas(t, addr, 2, rate.Every(2*time.Second), 3,
		[]Option{WithPrefix(testPrefix(t)), WithTimeout(testTimeout), withInjectedClock()},
		retryafter.WithClock(clock.Now))
	rng := rand.New(rand.NewPCG(5, 5))
	trips := 0
	for i := 0; trips < 20 && i < 1000; i++ {
		clock.Advance(time.Duration(rng.Int64N(int64(time.Second))))
		resp := fetch(t, srvs[i%2])
		if resp == nil {
			t.FailNow()
		}
		if resp.StatusCode == http.StatusOK {
			continue
		}
		wait := wantStatus(t, resp.StatusCode, resp.Header, http.StatusTooManyRequests, clock.Now())
		other := srvs[(i+1)%2]
		clock.Advance(wait - time.Second)
		if resp := fetch(t, other); resp == nil || resp.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("the other replica, a second short of Retry-After %v: %v, want 429", wait, resp)
		}
		clock.Advance(time.Second)
		if resp := fetch(t, other); resp == nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("the other replica, after Retry-After %v: %v, want 200", wait, resp)
		}
		trips++
	}
	if trips < 20 {
		t.Fatalf("only %d round trips", trips)
	}
}
