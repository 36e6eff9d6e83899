package overload

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
)

// TestPreflightShapedConcurrency sends waves of 20 requests shaped as CORS preflights at once
// through a Concurrency of 2 slots to a handler that serves every method, with no CORS
// middleware: the first request of the first wave is passed on to learn what the chain does
// (see package internal/door), and from then on the handler never runs more than 2 at once, the others
// refused 503. Until this was so, all 20 ran at once. A real preflight, answered by CORS
// middleware on either side, is still answered while every slot is taken.
func TestPreflightShapedConcurrency(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &Concurrency{Max: 2}
		g := newGate()
		h := c.Handler(g)
		for wave := range 3 {
			g.open = make(chan struct{})
			g.most = 0
			var wg sync.WaitGroup
			codes := make([]int, 20)
			for i := range codes {
				wg.Go(func() { codes[i] = serveRequest(h, preflightShaped("192.0.2.1:1")).Code })
			}
			synctest.Wait()
			close(g.open)
			wg.Wait()
			most := c.Max
			if wave == 0 {
				most++ // the one passed on to learn, once for the life of the handler
			}
			if g.most > most {
				t.Fatalf("wave %d: %d requests shaped as preflights ran the handler at once, want at most %d", wave, g.most, most)
			}
			if n := strings.Count(fmt.Sprint(codes), "503"); n < 20-most {
				t.Fatalf("wave %d: %d of 20 refused, want at least %d: %v", wave, n, 20-most, codes)
			}
		}
	})
	for _, order := range []string{"CORS before", "CORS after"} {
		t.Run(order, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c := &Concurrency{Max: 1}
				g := newGate()
				var h http.Handler
				if order == "CORS before" {
					h = corsMiddleware(false)(c.Handler(g))
				} else {
					h = c.Handler(corsMiddleware(false)(g))
				}
				var wg sync.WaitGroup
				concurrent(&wg, h, "192.0.2.1:1") // takes the one slot
				synctest.Wait()
				for i := range 20 {
					if code := serveRequest(h, preflightShaped("198.51.100.1:1")).Code; code != http.StatusNoContent {
						t.Fatalf("preflight %d with every slot taken: %d, want 204", i+1, code)
					}
				}
				close(g.open)
				wg.Wait()
			})
		})
	}
}

// preflightShaped returns a request shaped as a CORS preflight from remote.
func preflightShaped(remote string) *http.Request {
	r := httptest.NewRequest(http.MethodOptions, "http://api.test/", nil)
	r.RemoteAddr = remote
	r.Header.Set("Origin", "http://page.test")
	r.Header.Set("Access-Control-Request-Method", "GET")
	r.Header.Set("Access-Control-Request-Headers", "x-custom")
	return r
}

// serveRequest sends r through h and returns what h answered.
func serveRequest(h http.Handler, r *http.Request) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// TestConcurrencyPreflightEscapedPath: a request only shaped as a preflight takes a slot as
// any other. Behind a router with CORS middleware on /api/ only and a fallback on / that serves
// every method, once a browser's preflight to /api/x has been answered, requests shaped as
// preflights to /api%2Fx (URL.Path "/api/x", routed by net/http to the fallback) ran the
// handler without a slot, as many at once as were sent, taken for the route remembered. One
// may, once for the life of the door, as the first that teaches it next answers such a
// request other than as a preflight (see package internal/door).
func TestConcurrencyPreflightEscapedPath(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGate()
		mux := http.NewServeMux()
		mux.Handle("/api/", corsMiddleware(false)(http.NotFoundHandler()))
		mux.Handle("/", g)
		c := &Concurrency{Max: 1}
		h := c.Handler(mux)

		to := func(target string) *http.Request {
			r := httptest.NewRequest(http.MethodOptions, "http://api.test"+target, nil)
			r.RemoteAddr = "192.0.2.1:1"
			r.Header.Set("Origin", "http://page.test")
			r.Header.Set("Access-Control-Request-Method", "GET")
			return r
		}
		if w := serveRequest(h, to("/api/x")); w.Code != http.StatusNoContent {
			t.Fatalf("true preflight: %d, want 204", w.Code)
		}
		var wg sync.WaitGroup
		concurrent(&wg, h, "192.0.2.1:1") // GET /: takes the one slot
		synctest.Wait()
		for range 10 {
			wg.Go(func() { serveRequest(h, to("/api%2Fx")) })
		}
		synctest.Wait()
		g.mu.Lock()
		most := g.most
		g.mu.Unlock()
		close(g.open)
		wg.Wait()
		if most > c.Max+1 {
			t.Errorf("%d requests ran the handler at once, Max is %d and one may teach the door", most, c.Max)
		}
	})
}

// TestPreflightShapedHandlerPerRequest is TestPreflightShapedConcurrency through a framework
// that wraps the Concurrency anew for each request (echo's WrapMiddleware): what it learns of
// next is its own, so the first request is the only one passed on uncounted, once; it belonged
// to each handler, and every request shaped as a preflight ran next at once, past Max.
func TestPreflightShapedHandlerPerRequest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &Concurrency{Max: 2}
		g := newGate()
		g.open = make(chan struct{})
		perRequest := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { c.Handler(g).ServeHTTP(w, r) })
		var wg sync.WaitGroup
		codes := make([]int, 20)
		for i := range codes {
			wg.Go(func() { codes[i] = serveRequest(perRequest, preflightShaped("192.0.2.1:1")).Code })
		}
		synctest.Wait()
		close(g.open)
		wg.Wait()
		if most := c.Max + 1; g.most > most {
			t.Fatalf("%d requests shaped as preflights ran the handler at once, want at most %d", g.most, most)
		}
	})
}

// TestPreflightRoutesPerRequestHandlers: with handlers made per request (echo's WrapMiddleware),
// a browser's preflight to a route whose preflights next's CORS middleware answers takes no slot
// and is answered while every slot is taken: the routes are remembered across the handlers,
// under next's identity. Kept with each handler, they were forgotten with it (503).
func TestPreflightRoutesPerRequestHandlers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &Concurrency{Max: 1}
		block := make(chan struct{})
		mux := http.NewServeMux()
		mux.Handle("/api/", corsMiddleware(false)(http.NotFoundHandler()))
		mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) { <-block })
		mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {})
		perRequest := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { c.Handler(mux).ServeHTTP(w, r) })
		pf := func(path string) int {
			r := preflightShaped("192.0.2.1:1")
			r.URL.Path = path
			return serveRequest(perRequest, r).Code
		}
		pf("/")          // answered not as a preflight: handled
		pf("/api/items") // admitted, answered as a preflight
		var wg sync.WaitGroup
		wg.Go(func() {
			r := preflightShaped("192.0.2.2:1")
			r.Method, r.URL.Path = "GET", "/slow"
			serveRequest(perRequest, r)
		})
		synctest.Wait() // the one slot is taken
		if code := pf("/api/items"); code != http.StatusNoContent {
			t.Errorf("browser preflight to a CORS route with every slot taken, per-request handler: %d, want 204", code)
		}
		close(block)
		wg.Wait()
	})
}
