package interop

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/go-chi/httprate"
	"github.com/sethvargo/go-limiter/httplimit"
	"github.com/ulule/limiter/v3"
	"github.com/ulule/limiter/v3/drivers/middleware/stdlib"
	"github.com/ulule/limiter/v3/drivers/store/memory"
)

// The tests of this file's neighbours run inside testing/synctest bubbles: go-chi/httprate and
// sethvargo/go-limiter read the real clock (time.Now, and go-limiter's runtime time.now), which
// a bubble fakes, so a 60 s window passes in no real time. There is no network: each hop is an
// http.RoundTripper that serves the request in process, on the caller's goroutine.

// roundTripFunc is an http.RoundTripper made of a function.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// serve returns an http.RoundTripper that answers each request with h, as if it came from
// remote, and returns what h wrote as net/http's server would send it: with a Date from the
// clock at that moment unless h set its own or suppressed it (a nil value).
func serve(h http.Handler, remote string) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		r := req.Clone(req.Context())
		r.RemoteAddr = remote
		r.RequestURI = req.URL.RequestURI()
		r.Host = req.URL.Host
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		resp := rec.Result()
		switch v, ok := resp.Header["Date"]; {
		case !ok:
			resp.Header.Set("Date", time.Now().UTC().Format(http.TimeFormat))
		case v == nil:
			delete(resp.Header, "Date")
		}
		resp.Request = req
		if req.Body != nil {
			req.Body.Close()
		}
		return resp, nil
	})
}

// gatewayTo returns an httputil.ReverseProxy to upstream, reached in process, whose responses
// pass through modify (none when nil).
func gatewayTo(upstream http.Handler, modify func(*http.Response) error) http.Handler {
	target := &url.URL{Scheme: "http", Host: "upstream.test"}
	return &httputil.ReverseProxy{
		Rewrite:        func(r *httputil.ProxyRequest) { r.SetURL(target) },
		Transport:      serve(upstream, "192.0.2.10:40000"), // the gateway's own address
		ModifyResponse: modify,
	}
}

// A tryLog counts the tries that pass through it and records when each was sent and what it
// was answered.
type tryLog struct {
	mu    sync.Mutex
	next  http.RoundTripper
	tries []try
}

type try struct {
	at         time.Time
	status     int
	retryAfter string
}

func (l *tryLog) RoundTrip(req *http.Request) (*http.Response, error) {
	at := time.Now()
	resp, err := l.next.RoundTrip(req)
	l.mu.Lock()
	defer l.mu.Unlock()
	t := try{at: at}
	if err == nil {
		t.status, t.retryAfter = resp.StatusCode, resp.Header.Get("Retry-After")
	}
	l.tries = append(l.tries, t)
	return resp, err
}

// get sends a plain GET through rt and returns its status, failing the test on an error.
func get(t *testing.T, rt http.RoundTripper) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, "http://api.test/", nil)
	resp, err := rt.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// ok answers 200 "ok".
var ok = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })

// An upstream is a service built on a third-party limiter, created inside a bubble.
type upstream struct {
	name   string
	limit  int             // requests admitted at once, before the first 429
	delays []time.Duration // how long after the quota is spent a client may come and be refused
	// start returns the upstream's handler and a function that releases what it holds (a
	// goroutine of go-limiter's store), to be called before the bubble ends.
	start func(t *testing.T) (http.Handler, func())
}

// goLimiter is an upstream on sethvargo/go-limiter's httplimit middleware: limit tokens per
// window, keyed by address, counted by memorystore's bucket on the bubble's clock (bubbleStore).
// Its 429 says Retry-After in time.RFC1123 ("... UTC"), the instant the window resets cut to the
// second.
func goLimiter(limit int, window time.Duration) upstream {
	return upstream{
		name:   "go-limiter " + window.String(),
		limit:  limit,
		delays: []time.Duration{0, 500 * time.Millisecond, 1250 * time.Millisecond},
		start: func(t *testing.T) (http.Handler, func()) {
			mw, err := httplimit.NewMiddleware(newBubbleStore(uint64(limit), window), httplimit.IPKeyFunc())
			if err != nil {
				t.Fatal(err)
			}
			return mw.Handle(ok), func() {}
		},
	}
}

// httpRate is an upstream on go-chi/httprate: limit requests per sliding window, keyed by
// address. Its 429 says Retry-After: the window's whole seconds, so 0 for a window under a
// second.
func httpRate(limit int, window time.Duration) upstream {
	return upstream{
		name:   "httprate " + window.String(),
		limit:  limit,
		delays: []time.Duration{0, window * 3 / 10, window * 8 / 10},
		start: func(t *testing.T) (http.Handler, func()) {
			// Keyed by the peer's address, as LimitByIP (now deprecated) did.
			byPeer := func(r *http.Request) (string, error) {
				host, _, err := net.SplitHostPort(r.RemoteAddr)
				return host, err
			}
			return httprate.LimitBy(limit, window, byPeer)(ok), func() {}
		},
	}
}

// ulule is an upstream on ulule/limiter's stdlib middleware and memory store: limit requests per
// fixed window, which starts at a key's first request, keyed by address. Its 429 says no
// Retry-After; X-RateLimit-Reset is the window's end as a Unix time, cut to the second. The
// store reads time.Now, which a bubble fakes; a CleanUpInterval of 0 starts no goroutine.
func ulule(limit int, window time.Duration) upstream {
	return upstream{
		name:   "ulule " + window.String(),
		limit:  limit,
		delays: []time.Duration{0, 500 * time.Millisecond, 1250 * time.Millisecond},
		start: func(t *testing.T) (http.Handler, func()) {
			store := memory.NewStoreWithOptions(limiter.StoreOptions{Prefix: "interop", CleanUpInterval: 0})
			l := limiter.New(store, limiter.Rate{Period: window, Limit: int64(limit)})
			return stdlib.NewMiddleware(l).Handler(ok), func() {}
		},
	}
}
