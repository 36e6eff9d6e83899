package redisstore

import (
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/time/rate"

	"github.com/retryafter/retryafter"
	"github.com/retryafter/retryafter/internal/testkit"
)

// replicas starts n httptest servers, each a replica with its own client (from newClient) and
// Store, all with the same prefix, rate and burst, behind retryafter.LimitWith with opts. The
// servers are closed when the test ends.
func replicas(t *testing.T, newClient func() redis.Scripter, n int, limit rate.Limit, burst int, storeOpts []Option, opts ...retryafter.Option) []*httptest.Server {
	t.Helper()
	var srvs []*httptest.Server
	for range n {
		store := New(newClient(), limit, burst, storeOpts...)
		srv := httptest.NewServer(retryafter.LimitWith(store, opts...)(okHandler))
		t.Cleanup(srv.Close)
		srvs = append(srvs, srv)
	}
	return srvs
}

// serverClients returns a newClient for replicas of the Redis at addr.
func serverClients(t *testing.T, addr string) func() redis.Scripter {
	return func() redis.Scripter { return newClient(t, addr) }
}

// clusterClients returns a newClient for replicas of the cluster at addrs.
func clusterClients(t *testing.T, addrs []string) func() redis.Scripter {
	return func() redis.Scripter { return newClusterClient(t, addrs) }
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

// byHeader keys requests by their X-Key field.
var byHeader = retryafter.WithKeyFunc(func(r *http.Request) (string, error) { return r.Header.Get("X-Key"), nil })

// TestFleetSharesOneLimit puts three replicas on one Redis, and on a Redis Cluster, and has
// eight goroutines send requests, each to the replicas in turn, for 12 keys, at 20 requests/s
// per key with bursts of 5, for at least 300 ms of real time and until every key has been
// refused (at most 20 s, for a machine too loaded to outpace the limit). The replicas together
// must admit at most what one token bucket per key would: burst + rate × elapsed, where elapsed
// is measured on Redis's clock, the one that decides, from before the first request is sent to
// after the last answer arrives, so that every decision falls inside it; plus 1 for the
// microsecond Redis's clock is read to. And at least the burst. On the cluster, the keys must
// spread over all three masters.
func TestFleetSharesOneLimit(t *testing.T) {
	t.Run("server", func(t *testing.T) {
		addr := sharedAddr(t)
		fleetSharesOneLimit(t, serverClients(t, addr), newClient(t, addr))
	})
	t.Run("cluster", func(t *testing.T) {
		addrs := clusterAddrs(t)
		prefix := testPrefix(t)
		cc := newClusterClient(t, addrs)
		masters := map[string]bool{}
		for _, m := range mastersOf(t, cc, fleetKeys(prefix)) {
			masters[m] = true
		}
		if len(masters) != 3 {
			t.Fatalf("the keys fall on %d masters, want 3", len(masters))
		}
		// Every node runs on this host's clock: any one of them measures the elapsed time.
		fleetSharesOneLimit(t, clusterClients(t, addrs), newClient(t, addrs[0]), WithPrefix(prefix))
	})
}

// fleetKeys returns the keys of fleetSharesOneLimit, with prefix, as Redis sees them.
func fleetKeys(prefix string) []string {
	var keys []string
	for k := range 12 {
		keys = append(keys, fmt.Sprint(prefix, "client-", k))
	}
	return keys
}

func fleetSharesOneLimit(t *testing.T, newClient func() redis.Scripter, clock *redis.Client, opts ...Option) {
	const (
		limit    = 20
		burst    = 5
		keys     = 12
		duration = 300 * time.Millisecond
		giveUp   = 20 * time.Second
		workers  = 8
	)
	if len(opts) == 0 {
		opts = []Option{WithPrefix(testPrefix(t))}
	}
	srvs := replicas(t, newClient, 3, limit, burst, append(opts, WithTimeout(testTimeout)), byHeader)

	var admitted, refused [keys]atomic.Int64
	var refusedKeys atomic.Int64
	var wg sync.WaitGroup
	begin := redisNow(t, clock)
	start := time.Now()
	for w := range workers {
		wg.Go(func() {
			for i := w; ; i++ {
				if since := time.Since(start); since >= giveUp || since >= duration && refusedKeys.Load() == keys {
					return
				}
				k := i % keys
				resp := fetchKey(t, srvs[i%len(srvs)], fmt.Sprint("client-", k))
				switch {
				case resp == nil:
					return
				case resp.StatusCode == http.StatusOK:
					admitted[k].Add(1)
				case resp.StatusCode == http.StatusTooManyRequests && resp.Header.Get("Retry-After") == "1":
					if refused[k].Add(1) == 1 {
						refusedKeys.Add(1)
					}
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
	var total int64
	for k := range keys {
		total += admitted[k].Load()
		if admitted[k].Load() > bound {
			t.Errorf("key %d: %d admitted in %v, more than burst + rate × elapsed + 1 = %d", k, admitted[k].Load(), elapsed, bound)
		}
		if admitted[k].Load() < burst || refused[k].Load() == 0 {
			t.Errorf("key %d: %d admitted and %d refused: the load did not reach the limit", k, admitted[k].Load(), refused[k].Load())
		}
	}
	t.Logf("%d admitted for %d keys in %v by %d replicas (bound %d per key)", total, keys, elapsed, len(srvs), bound)
}

// fetchKey sends GET / with X-Key: key to srv and returns the response with its body read and
// closed.
func fetchKey(t *testing.T, srv *httptest.Server, key string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Key", key)
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Error(err)
		return nil
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// TestFleetBouncedClient sends one client's requests to two replicas in turn, on an injected
// clock that both replicas and Redis read: whenever one replica refuses it, the other refuses it
// a second short of the Retry-After and admits it once the Retry-After has passed.
func TestFleetBouncedClient(t *testing.T) {
	addr := sharedAddr(t)
	clock := testkit.NewClock(t0) // the replicas read it from their own goroutines
	srvs := replicas(t, serverClients(t, addr), 2, rate.Every(2*time.Second), 3,
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
