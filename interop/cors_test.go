package interop

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/cors"
	"golang.org/x/time/rate"

	"github.com/retryafter/retryafter"
)

// corsAPI returns an API on chi with go-chi/cors allowing origin and the header X-Test, and
// retryafter.Limit (one request a second, bursts of burst), mounted CORS first when corsFirst
// and the limiter first otherwise; every error of the limiter's hook is appended to errs.
func corsAPI(origin string, corsFirst bool, burst int, now func() time.Time, errs *syncErrors) http.Handler {
	c := cors.Handler(cors.Options{
		AllowedOrigins: []string{origin},
		AllowedMethods: []string{"GET"},
		AllowedHeaders: []string{"X-Test"},
	})
	opts := []retryafter.Option{retryafter.WithErrorHook(func(r *http.Request, err error) { errs.add(err) })}
	if now != nil {
		opts = append(opts, retryafter.WithClock(now))
	}
	limit := retryafter.Limit(rate.Every(time.Second), burst, opts...)
	r := chi.NewRouter()
	if corsFirst {
		r.Use(c, limit)
	} else {
		r.Use(limit, c)
	}
	r.Get("/thing", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("thing")) })
	return r
}

// syncErrors collects errors from several goroutines.
type syncErrors struct {
	mu   sync.Mutex
	errs []error
}

func (s *syncErrors) add(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.errs = append(s.errs, err)
}

func (s *syncErrors) list() []error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.errs)
}

// TestGoChiCORSOrders sends what a browser sends for a preflighted fetch (a preflight, then the
// GET) through go-chi/cors and the limiter, in both mount orders, without a browser: no
// preflight is counted or refused; with CORS first the 429 carries Access-Control-Allow-Origin
// and exposes Retry-After and Date; with the limiter first it carries neither, and the limiter
// has reported ErrCORSMountOrder, once, at the first preflight.
func TestGoChiCORSOrders(t *testing.T) {
	const origin = "http://127.0.0.1:1"
	for _, corsFirst := range []bool{true, false} {
		now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
		var errs syncErrors
		h := corsAPI(origin, corsFirst, 2, func() time.Time { return now }, &errs)
		send := func(method string) *httptest.ResponseRecorder {
			r := httptest.NewRequest(method, "http://api.test/thing", nil)
			r.RemoteAddr = "192.0.2.1:1234"
			r.Header.Set("Origin", origin)
			if method == http.MethodOptions {
				r.Header.Set("Access-Control-Request-Method", "GET")
				r.Header.Set("Access-Control-Request-Headers", "x-test")
			} else {
				r.Header.Set("X-Test", "1")
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			return w
		}
		var statuses []int
		for range 3 {
			if w := send(http.MethodOptions); w.Code != http.StatusOK || w.Header().Get("Access-Control-Allow-Origin") != origin {
				t.Fatalf("CORS first %v: preflight %d, Access-Control-Allow-Origin %q", corsFirst, w.Code, w.Header().Get("Access-Control-Allow-Origin"))
			}
			statuses = append(statuses, send(http.MethodGet).Code)
		}
		if !slices.Equal(statuses, []int{200, 200, 429}) {
			t.Fatalf("CORS first %v: GETs answered %v, want 200 200 429 (preflights uncounted)", corsFirst, statuses)
		}
		w := send(http.MethodGet)
		allow, expose := w.Header().Get("Access-Control-Allow-Origin"), w.Header().Get("Access-Control-Expose-Headers")
		reported := errs.list()
		if corsFirst {
			if allow != origin || !strings.Contains(expose, "Retry-After") || !strings.Contains(expose, "Date") || len(reported) != 0 {
				t.Fatalf("CORS first: 429 with Access-Control-Allow-Origin %q, exposing %q; reported %v", allow, expose, reported)
			}
			continue
		}
		if allow != "" || len(reported) != 1 || !errors.Is(reported[0], retryafter.ErrCORSMountOrder) {
			t.Fatalf("limiter first: 429 with Access-Control-Allow-Origin %q; reported %v, want ErrCORSMountOrder once", allow, reported)
		}
	}
}

// TestGoChiCORSPreflightShaped mounts the limiter first on a chi router whose /api routes have
// go-chi/cors and whose other routes a handler that serves every method: a client that spent its
// quota before it sent a preflight gets every preflight to /api answered, and a client that sends
// 1,000 requests shaped as preflights to the other routes, each to another, runs that handler no
// more often than its limit admits.
func TestGoChiCORSPreflightShaped(t *testing.T) {
	const origin = "http://127.0.0.1:1"
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	runs := 0
	r := chi.NewRouter()
	r.Use(retryafter.Limit(rate.Every(30*time.Second), 2,
		retryafter.WithClock(func() time.Time { return now }), retryafter.WithErrorHook(func(*http.Request, error) {})))
	r.Route("/api", func(r chi.Router) {
		r.Use(cors.Handler(cors.Options{AllowedOrigins: []string{origin}, AllowedMethods: []string{"GET"}, AllowedHeaders: []string{"X-Test"}}))
		r.Get("/thing", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("thing")) })
	})
	r.Handle("/*", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { runs++ }))
	send := func(client, method, path string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(method, "http://api.test"+path, nil)
		req.RemoteAddr = client
		req.Header.Set("Origin", origin)
		if method == http.MethodOptions {
			req.Header.Set("Access-Control-Request-Method", "GET")
			req.Header.Set("Access-Control-Request-Headers", "x-test")
		}
		w := httptest.NewRecorder()
		r.ServeHTTP(w, req)
		return w
	}
	const browser, flooder = "192.0.2.1:1234", "198.51.100.1:1234"
	var codes []int
	for range 3 {
		codes = append(codes, send(browser, http.MethodGet, "/api/thing").Code)
	}
	if !slices.Equal(codes, []int{200, 200, 429}) {
		t.Fatalf("GETs answered %v, want 200 200 429", codes)
	}
	preflight := func() {
		t.Helper()
		for i := range 10 {
			if w := send(browser, http.MethodOptions, "/api/thing"); w.Code != http.StatusOK || w.Header().Get("Access-Control-Allow-Origin") != origin {
				t.Fatalf("preflight %d over the limit: %d, Access-Control-Allow-Origin %q", i+1, w.Code, w.Header().Get("Access-Control-Allow-Origin"))
			}
		}
	}
	preflight()
	for i := range 1000 {
		send(flooder, http.MethodOptions, "/page/"+strconv.Itoa(i))
	}
	if runs != 2 {
		t.Fatalf("1,000 requests shaped as preflights ran the handler %d times, want 2", runs)
	}
	preflight()
}

// TestGoChiCORSEmptyRequestMethod: go-chi/cors, mounted after the limiter, answers every real
// preflight, and takes an OPTIONS whose Access-Control-Request-Method is empty for an ordinary
// request. One such OPTIONS, from anyone, must not make the limiter count the real preflights
// of a client over its limit: each stays free and is answered by go-chi/cors.
func TestGoChiCORSEmptyRequestMethod(t *testing.T) {
	const origin = "http://127.0.0.1:1"
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	r := chi.NewRouter()
	r.Use(retryafter.Limit(rate.Every(30*time.Second), 1,
		retryafter.WithClock(func() time.Time { return now }), retryafter.WithErrorHook(func(*http.Request, error) {})))
	r.Use(cors.Handler(cors.Options{AllowedOrigins: []string{origin}, AllowedMethods: []string{"GET"}}))
	r.Get("/api/items/{id}", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("item")) })
	send := func(client, method, path string, requestMethod []string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(method, "http://api.test"+path, nil)
		req.RemoteAddr = client
		req.Header.Set("Origin", origin)
		if requestMethod != nil {
			req.Header["Access-Control-Request-Method"] = requestMethod
		}
		w := httptest.NewRecorder()
		r.ServeHTTP(w, req)
		return w
	}
	const browser, other = "192.0.2.1:1", "198.51.100.7:1"
	if c := send(browser, http.MethodGet, "/api/items/0", nil).Code; c != http.StatusOK {
		t.Fatalf("first GET: %d", c)
	}
	if c := send(browser, http.MethodGet, "/api/items/0", nil).Code; c != http.StatusTooManyRequests {
		t.Fatalf("second GET: %d, want 429", c)
	}
	for _, empty := range [][]string{{""}, {}} {
		send(other, http.MethodOptions, "/anything", empty)
	}
	for i := range 20 {
		w := send(browser, http.MethodOptions, "/api/items/"+strconv.Itoa(i+1), []string{"GET"})
		if w.Code != http.StatusOK || w.Header().Get("Access-Control-Allow-Origin") != origin {
			t.Fatalf("real preflight %d from a client over its limit, after OPTIONS with an empty Access-Control-Request-Method: %d, Access-Control-Allow-Origin %q",
				i+1, w.Code, w.Header().Get("Access-Control-Allow-Origin"))
		}
	}
}
