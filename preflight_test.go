package retryafter

import (
	"bytes"
	"errors"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/retryafter/retryafter/internal/testkit"
	"golang.org/x/time/rate"
)

// corsMiddleware is a stand-in for CORS middleware such as github.com/go-chi/cors.
var corsMiddleware = testkit.CORS

// corsRequest returns a request from the page at origin: a preflight when preflight is set.
func corsRequest(method, origin string, preflight bool) *http.Request {
	var kv []string
	if origin != "" {
		kv = append(kv, "Origin", origin)
	}
	if preflight {
		kv = append(kv, "Access-Control-Request-Method", "GET", "Access-Control-Request-Headers", "x-custom")
	}
	return newRequest(method, "192.0.2.1:1234", kv...)
}

// TestPreflightNotCounted sends many CORS preflights, then the actual requests, through a
// limiter with a burst of 2, with CORS middleware mounted before it, after it, or before it with
// passthrough: no preflight is counted or refused, so both actual requests are
// admitted, and none is refused to a client that spent its quota before it sent one; and a request that only looks like one (OPTIONS without Origin or without
// Access-Control-Request-Method) is counted as any other.
func TestPreflightNotCounted(t *testing.T) {
	const page = "http://page.test"
	answer := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodOptions {
			w.WriteHeader(http.StatusNoContent) // an application's own OPTIONS answer
			return
		}
		w.Write([]byte("ok"))
	})
	for _, tt := range []struct {
		name string
		h    func(limit func(http.Handler) http.Handler) http.Handler
	}{
		{"CORS before the limiter", func(limit func(http.Handler) http.Handler) http.Handler {
			return corsMiddleware(false)(limit(answer))
		}},
		{"CORS before the limiter, passing preflights through", func(limit func(http.Handler) http.Handler) http.Handler {
			return corsMiddleware(true)(limit(answer))
		}},
		{"CORS after the limiter", func(limit func(http.Handler) http.Handler) http.Handler {
			return limit(corsMiddleware(false)(answer))
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			clk := newClock(t0)
			h := tt.h(Limit(rate.Every(time.Hour), 2, WithClock(clk.Now), WithErrorHook(func(*http.Request, error) {})))
			for i := range 20 {
				if w := serveRequest(h, corsRequest("OPTIONS", page, true)); w.Code != http.StatusNoContent {
					t.Fatalf("preflight %d: %d, want 204", i+1, w.Code)
				}
			}
			for i := range 2 {
				if w := serveRequest(h, corsRequest("GET", page, false)); w.Code != http.StatusOK {
					t.Fatalf("actual request %d after the preflights: %d, want 200: the preflights were counted", i+1, w.Code)
				}
			}
			if w := serveRequest(h, corsRequest("GET", page, false)); w.Code != http.StatusTooManyRequests {
				t.Fatalf("third actual request: %d, want 429", w.Code)
			}
			// Preflights are still not refused with the quota spent.
			if w := serveRequest(h, corsRequest("OPTIONS", page, true)); w.Code != http.StatusNoContent {
				t.Fatalf("preflight with the quota spent: %d, want 204", w.Code)
			}
		})
		t.Run(tt.name+", the quota spent before any preflight", func(t *testing.T) {
			h := tt.h(Limit(rate.Every(time.Hour), 2, WithClock(newClock(t0).Now), WithErrorHook(func(*http.Request, error) {})))
			for range 3 {
				serveRequest(h, corsRequest("GET", page, false))
			}
			for i := range 20 {
				if w := serveRequest(h, corsRequest("OPTIONS", page, true)); w.Code != http.StatusNoContent {
					t.Fatalf("preflight %d over the limit: %d, want 204", i+1, w.Code)
				}
			}
		})
	}
	t.Run("what only looks like a preflight is counted", func(t *testing.T) {
		clk := newClock(t0)
		h := Limit(rate.Every(time.Hour), 2, WithClock(clk.Now))(answer)
		serveRequest(h, corsRequest("OPTIONS", "", true))    // no Origin
		serveRequest(h, corsRequest("OPTIONS", page, false)) // no Access-Control-Request-Method
		if w := serveRequest(h, corsRequest("GET", "", false)); w.Code != http.StatusTooManyRequests {
			t.Fatalf("after two OPTIONS that are not preflights: %d, want 429", w.Code)
		}
		if w := serveRequest(h, corsRequest("GET", page, true)); w.Code != http.StatusTooManyRequests {
			t.Fatalf("a GET with Access-Control-Request-Method: %d, want 429", w.Code)
		}
	})
}

// TestPreflightDuringMaintenance checks that maintenance does not refuse a preflight either, so
// that CORS middleware mounted on either side of it answers, and refuses the actual request.
func TestPreflightDuringMaintenance(t *testing.T) {
	for _, passthrough := range []bool{false, true} {
		m := &Maintenance{Now: newClock(t0).Now}
		m.Start(t0.Add(time.Hour))
		for name, h := range map[string]http.Handler{
			"CORS after maintenance":  m.Handler(corsMiddleware(passthrough)(ok)),
			"CORS before maintenance": corsMiddleware(passthrough)(m.Handler(ok)),
		} {
			w := serveRequest(h, corsRequest("OPTIONS", "http://page.test", true))
			if want := http.StatusNoContent; !passthrough && w.Code != want {
				t.Errorf("%s: preflight %d, want %d", name, w.Code, want)
			}
			if passthrough && w.Code == http.StatusServiceUnavailable {
				t.Errorf("%s with passthrough: preflight refused 503", name)
			}
			if w := serveRequest(h, corsRequest("GET", "http://page.test", false)); w.Code != http.StatusServiceUnavailable {
				t.Errorf("%s: actual request %d, want 503", name, w.Code)
			}
		}
	}
}

// TestCORSMountOrderReported checks that mounting CORS middleware after the limiter, which
// leaves every refusal without Access-Control-Allow-Origin and so unreadable to the page, is
// reported at the first cross-origin request that shows it (a preflight, or an admitted request
// whose Access-Control-Allow-Origin was set inside the limiter), once, to the error hook; that
// the right order and no CORS at all are never reported; and that without a hook it is logged.
func TestCORSMountOrderReported(t *testing.T) {
	const page = "http://page.test"
	for _, tt := range []struct {
		name     string
		h        func(limit func(http.Handler) http.Handler) http.Handler
		first    *http.Request
		reported bool
	}{
		{"CORS after the limiter, seen at a preflight", func(limit func(http.Handler) http.Handler) http.Handler {
			return limit(corsMiddleware(false)(ok))
		}, corsRequest("OPTIONS", page, true), true},
		{"CORS after the limiter, seen at a simple request", func(limit func(http.Handler) http.Handler) http.Handler {
			return limit(corsMiddleware(false)(ok))
		}, corsRequest("GET", page, false), true},
		{"a handler that sets Access-Control-Allow-Origin itself", func(limit func(http.Handler) http.Handler) http.Handler {
			return limit(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Access-Control-Allow-Origin", "*")
			}))
		}, corsRequest("GET", page, false), true},
		{"CORS before the limiter", func(limit func(http.Handler) http.Handler) http.Handler {
			return corsMiddleware(false)(limit(ok))
		}, corsRequest("GET", page, false), false},
		{"CORS before the limiter, passing preflights through", func(limit func(http.Handler) http.Handler) http.Handler {
			return corsMiddleware(true)(limit(ok))
		}, corsRequest("OPTIONS", page, true), false},
		{"no CORS middleware", func(limit func(http.Handler) http.Handler) http.Handler {
			return limit(ok)
		}, corsRequest("GET", page, false), false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var hooked []error
			h := tt.h(Limit(rate.Every(time.Hour), 3, WithClock(newClock(t0).Now),
				WithErrorHook(func(r *http.Request, err error) { hooked = append(hooked, err) })))
			serveRequest(h, tt.first)
			if tt.reported && (len(hooked) != 1 || !errors.Is(hooked[0], ErrCORSMountOrder)) {
				t.Fatalf("first request: hook told of %v, want ErrCORSMountOrder", hooked)
			}
			if !tt.reported && len(hooked) != 0 {
				t.Fatalf("first request: hook told of %v, want nothing", hooked)
			}
			for range 5 { // preflights, admitted and refused requests: reported once at most
				serveRequest(h, corsRequest("OPTIONS", page, true))
				serveRequest(h, corsRequest("GET", page, false))
			}
			if tt.reported && len(hooked) != 1 || !tt.reported && len(hooked) != 0 {
				t.Fatalf("after more requests: hook told of %v", hooked)
			}
		})
	}
	t.Run("logged without a hook", func(t *testing.T) {
		var buf bytes.Buffer
		defer log.SetOutput(log.Writer())
		log.SetOutput(&buf)
		h := Limit(rate.Every(time.Hour), 3, WithClock(newClock(t0).Now))(corsMiddleware(false)(ok))
		for range 3 {
			serveRequest(h, corsRequest("OPTIONS", page, true))
		}
		if got := buf.String(); strings.Count(got, "\n") != 1 || !strings.Contains(got, "CORS") || !strings.Contains(got, page) {
			t.Fatalf("logged %q; want one line naming CORS and the origin", got)
		}
	})
}

// TestCORSMountOrderAllocs checks that watching for the order costs an admitted cross-origin
// request no allocation.
func TestCORSMountOrderAllocs(t *testing.T) {
	h := Limit(1e9, 1e9, WithKeyFunc(func(*http.Request) (string, error) { return "k", nil }))(
		http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	r := corsRequest("GET", "http://page.test", false)
	w := newTestWriter()
	if n := testing.AllocsPerRun(1000, func() { h.ServeHTTP(w, r) }); n != 0 {
		t.Fatalf("%v allocations per admitted cross-origin request", n)
	}
}

// TestPreflightShapedCounted sends 1,000 requests shaped as CORS preflights to a handler that
// serves every method (http.ServeMux's "/", as the README's quick start mounts it) with no CORS
// middleware: each is counted as the request it is, so past the burst of 2 every one is answered
// 429, and the quota they spent refuses the GET that follows. Until this was so, all 1,000 ran
// the handler uncounted.
func TestPreflightShapedCounted(t *testing.T) {
	const page = "http://page.test"
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Handler", "ran")
		w.Write([]byte("expensive work\n"))
	})
	clk := newClock(t0)
	h := Limit(rate.Every(time.Hour), 2, WithClock(clk.Now))(mux)
	codes := map[int]int{}
	for range 1000 {
		w := serveRequest(h, corsRequest("OPTIONS", page, true))
		codes[w.Code]++
		if w.Code == http.StatusTooManyRequests && (w.Header().Get("X-Handler") != "" || strings.Contains(w.Body.String(), "expensive")) {
			t.Fatalf("a refusal carries the handler's answer: %q %q", w.Header(), w.Body.String())
		}
	}
	if codes[http.StatusOK] != 2 || codes[http.StatusTooManyRequests] != 998 {
		t.Fatalf("answers %v, want 2 of 200 and 998 of 429", codes)
	}
	if w := serveRequest(h, corsRequest("GET", page, false)); w.Code != http.StatusTooManyRequests {
		t.Fatalf("a GET after them: %d, want 429: the OPTIONS requests spent the quota", w.Code)
	}
	// A real preflight, answered by CORS middleware mounted after the limiter, is still free
	// and never refused with the quota spent.
	h = Limit(rate.Every(time.Hour), 2, WithClock(clk.Now), WithErrorHook(func(*http.Request, error) {}))(corsMiddleware(false)(mux))
	for i := range 20 {
		if w := serveRequest(h, corsRequest("OPTIONS", page, true)); w.Code != http.StatusNoContent {
			t.Fatalf("a real preflight %d: %d, want 204", i+1, w.Code)
		}
	}
}

// TestPreflightShapedRunsHandlerWithinLimit sends 50 requests shaped as CORS preflights from one
// client to a handler that serves every method, with no CORS middleware, under a limit of 2 a
// minute: the handler runs twice, whether they all ask for one route or each for another, and
// the others are refused before it runs. Until this was so, it ran 50 times.
func TestPreflightShapedRunsHandlerWithinLimit(t *testing.T) {
	for _, tt := range []struct {
		name string
		path func(i int) string
	}{
		{"one route", func(int) string { return "/" }},
		{"a route each", func(i int) string { return fmt.Sprintf("/page/%d", i) }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			runs := 0
			mux := http.NewServeMux()
			mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { runs++ })
			h := Limit(rate.Every(30*time.Second), 2, WithClock(newClock(t0).Now))(mux)
			codes := map[int]int{}
			for i := range 50 {
				r := corsRequest("OPTIONS", "http://page.test", true)
				r.URL.Path = tt.path(i)
				codes[serveRequest(h, r).Code]++
			}
			if runs != 2 || codes[http.StatusOK] != 2 || codes[http.StatusTooManyRequests] != 48 {
				t.Fatalf("the handler ran %d times, answers %v; want 2 runs, 2 of 200 and 48 of 429", runs, codes)
			}
		})
	}
	// The first request shaped as a preflight that the handler is ever sent reaches it before it
	// is decided (it may be a preflight that CORS middleware answers): one run more than the
	// limit admits, once, to a client that spent its quota before.
	t.Run("the quota spent first", func(t *testing.T) {
		runs := 0
		h := Limit(rate.Every(30*time.Second), 2, WithClock(newClock(t0).Now))(
			http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { runs++ }))
		for range 2 {
			serveRequest(h, corsRequest("GET", "http://page.test", false))
		}
		for i := range 50 {
			if code := serveRequest(h, corsRequest("OPTIONS", "http://page.test", true)).Code; code != http.StatusTooManyRequests {
				t.Fatalf("request %d shaped as a preflight, over the limit: %d, want 429", i+1, code)
			}
		}
		if runs != 3 {
			t.Fatalf("the handler ran %d times, want 3: the 2 GETs and the first request shaped as a preflight", runs)
		}
	})
	// CORS middleware that answers the preflights of one origin and passes the others on: the
	// route whose preflight it answered is forgotten when it passes one on.
	t.Run("a route answered for another origin", func(t *testing.T) {
		runs := 0
		cors := corsMiddleware(false)(ok)
		h := Limit(rate.Every(30*time.Second), 2, WithClock(newClock(t0).Now), WithErrorHook(func(*http.Request, error) {}))(
			http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Header.Get("Origin") == "http://page.test" {
					cors.ServeHTTP(w, r)
					return
				}
				runs++
			}))
		if code := serveRequest(h, corsRequest("OPTIONS", "http://page.test", true)).Code; code != http.StatusNoContent {
			t.Fatalf("the page's preflight: %d, want 204", code)
		}
		for range 50 {
			r := corsRequest("OPTIONS", "http://other.test", true)
			r.RemoteAddr = "198.51.100.1:1"
			serveRequest(h, r)
		}
		if runs != 2 {
			t.Fatalf("the handler ran %d times for another origin's 50 requests, want 2", runs)
		}
	})
}

// TestPreflightMixedRoutes mounts the limiter before a router on which only some routes have
// CORS middleware, and the others a handler that serves every method: a client that floods the
// latter with requests shaped as preflights, each to another route, runs the handler no more
// often than its limit admits, while a real preflight to a route whose preflights CORS
// middleware has answered stays free and is answered for a client over its limit too, from many
// goroutines at once.
func TestPreflightMixedRoutes(t *testing.T) {
	const page = "http://page.test"
	var runs atomic.Int64
	mux := http.NewServeMux()
	mux.Handle("/api/", corsMiddleware(false)(ok))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { runs.Add(1) })
	h := Limit(rate.Every(30*time.Second), 2, WithClock(newClock(t0).Now), WithErrorHook(func(*http.Request, error) {}))(mux)
	send := func(client, method, path string, preflight bool) int {
		r := corsRequest(method, page, preflight)
		r.RemoteAddr, r.URL.Path = client, path
		return serveRequest(h, r).Code
	}
	const browser, flooder = "192.0.2.1:1", "198.51.100.1:1"
	if code := send(browser, "OPTIONS", "/api/items", true); code != http.StatusNoContent {
		t.Fatalf("the browser's preflight: %d, want 204", code)
	}
	for i := range 1000 {
		send(flooder, "OPTIONS", fmt.Sprintf("/page/%d", i), true)
	}
	if n := runs.Load(); n != 2 {
		t.Fatalf("1,000 requests shaped as preflights, a route each, ran the handler %d times, want 2", n)
	}
	var codes []int
	for range 3 {
		codes = append(codes, send(browser, "GET", "/api/items", false))
	}
	if !slices.Equal(codes, []int{200, 200, 429}) {
		t.Fatalf("the browser's GETs after its preflight: %v, want 200 200 429 (the preflight free)", codes)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i := range 50 {
				if code := send(browser, "OPTIONS", "/api/items", true); code != http.StatusNoContent {
					t.Errorf("the browser's preflight over its limit: %d, want 204", code)
				}
				send(flooder, "OPTIONS", fmt.Sprintf("/more/%d", i), true)
			}
		})
	}
	wg.Wait()
	if n := runs.Load(); n != 2 {
		t.Fatalf("with the browser's preflights among them, the flood ran the handler %d times, want 2", n)
	}
}

// TestPreflightShapedConcurrentAtStart: 100 requests shaped as preflights from one client, sent
// at once to a new middleware with no CORS middleware behind it, while the handler takes its
// time: one is passed on to learn what the chain does, and the others are decided first, so the
// handler runs at most once more than the limit of 2 admits.
func TestPreflightShapedConcurrentAtStart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var runs atomic.Int64
		release := make(chan struct{})
		h := Limit(rate.Every(30*time.Second), 2)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			runs.Add(1)
			<-release
			w.Write([]byte("expensive"))
		}))
		var wg sync.WaitGroup
		codes := make([]int, 100)
		for i := range codes {
			wg.Go(func() { codes[i] = serveRequest(h, corsRequest(http.MethodOptions, "http://page.test", true)).Code })
		}
		synctest.Wait()
		close(release)
		wg.Wait()
		if n := runs.Load(); n > 3 {
			t.Errorf("100 requests shaped as preflights, sent at once, ran the handler %d times under a limit of 2 a minute", n)
		}
		if refused := strings.Count(fmt.Sprint(codes), "429"); refused < 97 {
			t.Errorf("%d of 100 refused, want at least 97: %v", refused, codes)
		}
	})
}

// TestPreflightOriginRemembered: CORS middleware that answers the preflights of the page's origin
// and passes those of other origins on to the handler (as CORS middleware does for an origin it
// does not allow). The browser's preflights are answered and free; a client over its limit that
// sends requests shaped as preflights from another origin to the same route, each right after
// one of the browser's, reaches the handler once, the first such request the middleware is ever
// sent (see package internal/door), and never again: what the chain answered for one origin says nothing
// of another.
func TestPreflightOriginRemembered(t *testing.T) {
	var other atomic.Int64
	cors := corsMiddleware(false)(http.NotFoundHandler())
	h := Limit(rate.Every(30*time.Second), 2, WithClock(newClock(t0).Now), WithErrorHook(func(*http.Request, error) {}))(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Origin") == "http://page.test" {
				cors.ServeHTTP(w, r)
				return
			}
			other.Add(1)
		}))
	attacker := func(method string) int {
		r := corsRequest(method, "http://other.test", method == http.MethodOptions)
		r.RemoteAddr = "198.51.100.1:1"
		return serveRequest(h, r).Code
	}
	for range 3 {
		attacker(http.MethodGet)
	}
	before := other.Load()
	for i := range 20 {
		if c := serveRequest(h, corsRequest(http.MethodOptions, "http://page.test", true)).Code; c != http.StatusNoContent {
			t.Fatalf("the browser's preflight %d: %d, want 204", i+1, c)
		}
		if c := attacker(http.MethodOptions); c != http.StatusTooManyRequests {
			t.Fatalf("request %d shaped as a preflight, from another origin and a client over its limit: %d, want 429", i+1, c)
		}
	}
	if n := other.Load() - before; n > 1 {
		t.Errorf("a client over its limit ran the handler %d times with 20 requests shaped as preflights from another origin, want at most once", n)
	}
}

// preflightShaped returns a request shaped as a CORS preflight from remote.
func preflightShaped(remote string) *http.Request {
	r := corsRequest(http.MethodOptions, "http://page.test", true)
	r.RemoteAddr = remote
	return r
}

// TestPreflightShapedMaintenance sends 10 requests shaped as CORS preflights, while maintenance
// is on, to a handler that serves every method with no CORS middleware: each is answered 503,
// and the handler runs at most once (the first passed on to learn what the chain does), or
// never when the chain showed what it does before maintenance began. Until this was so, it ran
// 10 times.
func TestPreflightShapedMaintenance(t *testing.T) {
	for _, seen := range []bool{false, true} {
		runs := 0
		mux := http.NewServeMux()
		mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
			runs++
			w.Write([]byte("migrating data"))
		})
		m := &Maintenance{Now: newClock(t0).Now}
		h := m.Handler(mux)
		if seen {
			serveRequest(h, preflightShaped("192.0.2.1:1"))
			runs = 0
		}
		m.Start(t0.Add(time.Hour))
		for i := range 10 {
			w := serveRequest(h, preflightShaped("192.0.2.1:1"))
			if w.Code != http.StatusServiceUnavailable || strings.Contains(w.Body.String(), "migrating") {
				t.Fatalf("seen before: %v: request %d shaped as a preflight during maintenance: %d %q, want 503", seen, i+1, w.Code, w.Body.String())
			}
		}
		if most := map[bool]int{false: 1, true: 0}[seen]; runs > most {
			t.Errorf("seen before: %v: the handler ran %d times during maintenance, want at most %d", seen, runs, most)
		}
	}
}

// escapedPathMux is a router with CORS middleware on /api/ only, and a fallback on / that
// serves every method (an SPA, a static file server) and counts its runs. net/http's ServeMux
// routes by the escaped path: "/api%2Fx" is one segment and goes to the fallback, although its
// URL.Path is "/api/x", the path of a route whose preflights CORS middleware answers.
func escapedPathMux(fallbackRuns *int) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/api/", corsMiddleware(false)(ok))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		*fallbackRuns++
		w.Write([]byte("fallback"))
	})
	return mux
}

func preflightTo(target, remote string) *http.Request {
	r := httptest.NewRequest(http.MethodOptions, "http://api.test"+target, nil)
	r.RemoteAddr = remote
	r.Header.Set("Origin", "http://page.test")
	r.Header.Set("Access-Control-Request-Method", "GET")
	return r
}

// TestMaintenancePreflightEscapedPath: while maintenance is on, a request only shaped as a
// preflight is refused as any other, and a true preflight that CORS middleware answers never
// is. A request shaped as one to /api%2Fx (URL.Path "/api/x", which net/http routes to the
// fallback) was taken for the route /api/x remembered: it ran the handler, and the route,
// forgotten, left every browser's preflight refused for the rest of the maintenance. The
// handler may run once, for the life of the door, for the first request that teaches it next
// answers one other than as a preflight (see package internal/door).
func TestMaintenancePreflightEscapedPath(t *testing.T) {
	var runs int
	var m Maintenance
	h := m.Handler(escapedPathMux(&runs))

	// While off, browsers' preflights to /api/x teach the switch that CORS answers them.
	if w := serveRequest(h, preflightTo("/api/x", "192.0.2.1:1")); w.Code != http.StatusNoContent {
		t.Fatalf("preflight while off: %d, want 204", w.Code)
	}
	m.Start(time.Now().Add(time.Hour))
	if w := serveRequest(h, preflightTo("/api/x", "192.0.2.1:1")); w.Code != http.StatusNoContent {
		t.Fatalf("true preflight during maintenance: %d, want 204", w.Code)
	}

	// A request shaped as a preflight that CORS middleware does not answer.
	w := serveRequest(h, preflightTo("/api%2Fx", "192.0.2.66:1"))
	if w.Code != http.StatusServiceUnavailable {
		t.Errorf("preflight-shaped request to /api%%2Fx during maintenance: %d, want 503", w.Code)
	}
	if runs > 1 {
		t.Errorf("the fallback handler ran %d times during maintenance for requests only shaped as preflights, want at most the one that teaches the door", runs)
	}

	// A browser's true preflight, which CORS middleware answers, is never refused.
	if w := serveRequest(h, preflightTo("/api/x", "192.0.2.1:1")); w.Code != http.StatusNoContent {
		t.Errorf("true preflight to /api/x after that request: %d, want 204 (CORS middleware answers it)", w.Code)
	}
}

// TestLimitPreflightEscapedPath: a request only shaped as a preflight is limited as any
// other: it reaches the handler only when admitted (but for the one that teaches the door, see
// package internal/door). A client over its limit sends, after each browser's preflight to
// /api/x (free), one to /api%2Fx: taken for the route remembered, it ran the fallback every
// time.
func TestLimitPreflightEscapedPath(t *testing.T) {
	var runs int
	clk := newClock(t0)
	h := Limit(rate.Every(time.Hour), 1, WithClock(clk.Now), WithErrorHook(func(*http.Request, error) {}))(escapedPathMux(&runs))

	const attacker = "192.0.2.66:1"
	// The attacker spends its quota.
	if w := serveRequest(h, newRequest("GET", attacker)); w.Code != http.StatusOK {
		t.Fatalf("first GET: %d", w.Code)
	}
	runs = 0
	for i := range 5 {
		// Other clients' browsers send true preflights, answered by CORS middleware (each from a
		// new client, so admitted even where counted), which make /api/x remembered again.
		other := fmt.Sprintf("198.51.100.%d:1", i+1)
		if w := serveRequest(h, preflightTo("/api/x", other)); w.Code != http.StatusNoContent {
			t.Fatalf("round %d: true preflight: %d, want 204", i, w.Code)
		}
		if w := serveRequest(h, preflightTo("/api%2Fx", attacker)); w.Code != http.StatusTooManyRequests {
			t.Errorf("round %d: preflight-shaped request over the limit: %d, want 429", i, w.Code)
		}
	}
	if runs > 1 {
		t.Errorf("the handler ran %d times for a client over its limit, want at most the one that teaches the door", runs)
	}
}

// TestPreflightShapedHandlerPerRequest: a framework that wraps the middleware around its handler
// anew for every request (echo's WrapMiddleware) gets the door that Limit's and Maintenance's
// doc describe, which learns once: requests shaped as preflights to a handler of every method,
// over a limit of 1, run it once, not each time. What a door learns belonged to the handler
// Handler returned, so each request was the first ever sent, passed on before it was decided.
func TestPreflightShapedHandlerPerRequest(t *testing.T) {
	runs := 0
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { runs++ })
	m := NewMiddleware(NewTokenBucket(rate.Every(time.Hour), 1), WithClock(newClock(t0).Now))
	for range 10 {
		serveRequest(m.Handler(next), corsRequest("OPTIONS", "http://page.test", true))
	}
	if runs != 1 {
		t.Errorf("Middleware: the handler ran %d times for 10 requests over a limit of 1, want 1", runs)
	}
	runs = 0
	maint := &Maintenance{Now: newClock(t0).Now}
	maint.Start(t0.Add(time.Hour))
	for range 10 {
		serveRequest(maint.Handler(next), corsRequest("OPTIONS", "http://page.test", true))
	}
	if runs != 1 {
		t.Errorf("Maintenance: the handler ran %d times for 10 requests during maintenance, want 1", runs)
	}
}

// TestPreflightShapedProbeCharged: the request shaped as a preflight that is passed on to learn
// what next does, and decided when next writes, is charged what its handler reports in a layer
// charged afterwards, as any admitted request is; Charge found no slot and the cost was lost.
func TestPreflightShapedProbeCharged(t *testing.T) {
	tokens := NewTokenBucket(rate.Every(time.Hour), 100)
	charged := false
	h := LimitWith(All(NewTokenBucket(100, 100), ChargedAfter(tokens)), WithClock(newClock(t0).Now))(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusOK) // decided here
			charged = Charge(r, 60)
		}))
	if code := serveRequest(h, corsRequest("OPTIONS", "http://page.test", true)).Code; code != http.StatusOK {
		t.Fatalf("the first request shaped as a preflight: %d", code)
	}
	if d := decide(t, tokens, "192.0.2.1", 0, t0); !charged || d.Remaining != 40 {
		t.Errorf("Charge reported %v, and the key holds %d tokens, want 40 of 100", charged, d.Remaining)
	}
}

// TestPreflightChargeReportsFalse: the handler behind CORS middleware inside the limiter, told
// of a preflight that the middleware answers (free), learns from Charge that nothing charges it:
// the slot the request carries in case it is counted opens only when it is.
func TestPreflightChargeReportsFalse(t *testing.T) {
	tokens := NewTokenBucket(rate.Every(time.Hour), 100)
	charged := false
	h := LimitWith(All(NewTokenBucket(100, 100), ChargedAfter(tokens)), WithClock(newClock(t0).Now), WithErrorHook(func(*http.Request, error) {}))(
		testkit.CORS(true)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { charged = Charge(r, 60) })))
	serveRequest(h, corsRequest("OPTIONS", "http://page.test", true))
	if d := decide(t, tokens, "192.0.2.1", 0, t0); charged || d.Remaining != 100 {
		t.Errorf("Charge of a free preflight reported %v; the key holds %d of 100", charged, d.Remaining)
	}
}

// TestPreflightRoutesPerHandler: one Middleware around two handlers, one with CORS middleware
// inside the limiter, the other a handler of every method: the routes the first answers
// preflights to, which it frees, free no request to the second, which is decided before it
// runs. Once the memory was the Middleware's, each preflight to the first freed one request
// shaped as a preflight to the second (10 runs over a limit of 1).
func TestPreflightRoutesPerHandler(t *testing.T) {
	runs := 0
	plain := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { runs++ })
	m := NewMiddleware(NewTokenBucket(rate.Every(time.Hour), 1), WithClock(newClock(t0).Now), WithErrorHook(func(*http.Request, error) {}))
	withCORS := m.Handler(testkit.CORS(false)(http.NotFoundHandler()))
	everyMethod := m.Handler(plain)
	for i := range 10 {
		teach := corsRequest("OPTIONS", "http://page.test", true)
		teach.RemoteAddr = fmt.Sprintf("198.51.100.%d:1", i) // the page's other clients
		serveRequest(withCORS, teach)
		serveRequest(everyMethod, corsRequest("OPTIONS", "http://page.test", true))
	}
	if runs > 2 {
		t.Errorf("the handler of every method ran %d times for 10 requests over a limit of 1, want at most 2", runs)
	}
}

// mixedCORSMux serves /api/ behind CORS middleware and every other path with a handler of every
// method.
func mixedCORSMux() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/api/", testkit.CORS(false)(http.NotFoundHandler()))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {})
	return mux
}

// TestPreflightRoutesPerRequestHandlers: with handlers made per request (echo's WrapMiddleware)
// and CORS middleware inside the limiter on /api/ only, the routes next answers preflights to
// are remembered across the handlers, under next's identity: a browser's preflights there are
// answered, never counted, for a client over its limit, and during maintenance. Kept with each
// handler, they were forgotten with it, and every preflight was counted (429, 503).
func TestPreflightRoutesPerRequestHandlers(t *testing.T) {
	m := NewMiddleware(NewTokenBucket(rate.Every(time.Hour), 2), WithClock(newClock(t0).Now), WithErrorHook(func(*http.Request, error) {}))
	mux := mixedCORSMux()
	per := func(r *http.Request) int { return serveRequest(m.Handler(mux), r).Code }
	per(preflightTo("/", "192.0.2.1:1234"))          // the first ever: probed, counted, answered not as a preflight: handled
	per(preflightTo("/api/items", "192.0.2.1:1234")) // decided, admitted (2 of 2), answered as a preflight: its route learned
	for i := range 3 {
		if code := per(preflightTo("/api/items", "192.0.2.1:1234")); code != http.StatusNoContent {
			t.Errorf("browser preflight %d to a CORS route, per-request handler: %d, want 204", i, code)
		}
	}
}

func TestPreflightRoutesPerRequestMaintenance(t *testing.T) {
	maint := &Maintenance{Now: newClock(t0).Now}
	mux := mixedCORSMux()
	per := func(r *http.Request) int { return serveRequest(maint.Handler(mux), r).Code }
	per(preflightTo("/", "192.0.2.1:1234"))          // learned while off: handled
	per(preflightTo("/api/items", "192.0.2.1:1234")) // learned while off: answered
	maint.Start(t0.Add(time.Hour))
	if code := per(preflightTo("/api/items", "192.0.2.1:1234")); code != http.StatusNoContent {
		t.Errorf("browser preflight during maintenance, per-request handler: %d, want 204", code)
	}
}
