package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/redis/go-redis/v9"

	"github.com/retryafter/retryafter"
	"github.com/retryafter/retryafter/internal/testkit/redistest"
	"github.com/retryafter/retryafter/redisstore"
)

// TestHeadWhereverGet checks that HEAD is answered wherever GET is, and as GET is: 200 with
// GET's headers and no body when admitted, 429 with Retry-After when limited (a HEAD counts
// as a request), 503 during maintenance but for the exempt health check. Without it chi answers
// an admitted HEAD 405 Method Not Allowed, so that a HEAD probe saw 405 or 429 depending on load.
func TestHeadWhereverGet(t *testing.T) {
	m := &retryafter.Maintenance{Exempt: func(r *http.Request) bool { return r.URL.Path == "/healthz" }}
	srv := httptest.NewServer(newRouter(m, retryafter.NewTokenBucket(rate.Every(time.Hour), 4)))
	defer srv.Close()
	client := srv.Client()
	client.Timeout = 5 * time.Second
	do := func(method, path string) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest(method, srv.URL+path, nil)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp, string(body)
	}

	for _, path := range []string{"/", "/healthz"} {
		get, _ := do("GET", path)
		head, body := do("HEAD", path)
		if head.StatusCode != http.StatusOK || get.StatusCode != http.StatusOK || body != "" ||
			head.Header.Get("Content-Type") != get.Header.Get("Content-Type") || head.ContentLength != get.ContentLength {
			t.Fatalf("HEAD %s: %d, Content-Type %q, length %d, body %q; GET: %d, %q, %d",
				path, head.StatusCode, head.Header.Get("Content-Type"), head.ContentLength, body,
				get.StatusCode, get.Header.Get("Content-Type"), get.ContentLength)
		}
	}
	// The health check is exempt: only the two requests to / spent the burst of 4.
	do("GET", "/")
	do("GET", "/")
	// The burst is spent: HEAD is limited as GET is, with the same Retry-After.
	for _, method := range []string{"HEAD", "GET"} {
		resp, _ := do(method, "/")
		if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
			t.Fatalf("%s / after the burst: %d, Retry-After %q; want 429 with one", method, resp.StatusCode, resp.Header.Get("Retry-After"))
		}
	}
	m.Start(time.Now().Add(time.Minute))
	if resp, _ := do("HEAD", "/"); resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("HEAD / in maintenance: %d, Retry-After %q; want 503 with one", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if resp, _ := do("HEAD", "/nowhere"); resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("HEAD /nowhere in maintenance: %d; want 503", resp.StatusCode)
	}
	m.Stop()
	if resp, _ := do("HEAD", "/nowhere"); resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("HEAD /nowhere: %d; want 429, since the limiter runs before routing", resp.StatusCode)
	}
}

// TestPlansAndDryRun sends requests with and without a known API key, to the limiter in memory
// and, with the same plans, in a real Redis: the pro key gets its own burst of 20 and names its
// plan in the fields, inventing a key buys nothing, and a dry run admits what it would have
// refused.
func TestPlansAndDryRun(t *testing.T) {
	t.Run("memory", func(t *testing.T) { testPlansAndDryRun(t, newLimiter) })
	t.Run("redis", func(t *testing.T) {
		rdb := redis.NewClient(&redis.Options{Addr: redistest.Start(t).Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
		t.Cleanup(func() { rdb.Close() })
		testPlansAndDryRun(t, func(limit rate.Limit, burst int) retryafter.Limiter {
			return redisstore.New(rdb, limit, burst, redisstore.WithPrefix(t.Name()+":"), redisstore.WithPolicyFunc(planOf))
		})
	})
}

func testPlansAndDryRun(t *testing.T, newLimiter func(rate.Limit, int) retryafter.Limiter) {
	m := &retryafter.Maintenance{}
	do := func(h http.Handler, key string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = "192.0.2.1:1234"
		if key != "" {
			r.Header.Set("X-API-Key", key)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	h := newRouter(m, newLimiter(rate.Every(time.Second), 5))
	for i := range 20 {
		if w := do(h, "demo-pro"); w.Code != http.StatusOK || w.Header().Get("RateLimit-Policy") != `"pro";q=20;w=2` {
			t.Fatalf("pro request %d: %d, RateLimit-Policy %q", i+1, w.Code, w.Header().Get("RateLimit-Policy"))
		}
	}
	if w := do(h, "demo-pro"); w.Code != http.StatusTooManyRequests {
		t.Fatalf("pro request 21: %d, want 429", w.Code)
	}
	for i := range 5 {
		if w := do(h, "made-up-"+string(rune('a'+i))); w.Code != http.StatusOK || w.Header().Get("RateLimit-Policy") != `"free";q=5;w=5` {
			t.Fatalf("free request %d: %d, RateLimit-Policy %q", i+1, w.Code, w.Header().Get("RateLimit-Policy"))
		}
	}
	if w := do(h, "made-up-z"); w.Code != http.StatusTooManyRequests {
		t.Fatalf("a sixth request under an invented key: %d, want 429: it is the same client", w.Code)
	}
	dry := newRouter(m, newLimiter(rate.Every(time.Second), 5), retryafter.WithDryRun(true))
	for i := range 10 {
		if w := do(dry, ""); w.Code != http.StatusOK || w.Header().Get("Retry-After") != "" {
			t.Fatalf("dry run, request %d: %d, Retry-After %q", i+1, w.Code, w.Header().Get("Retry-After"))
		}
	}
}
