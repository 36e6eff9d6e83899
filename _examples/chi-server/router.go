package main

import (
	"fmt"
	"log"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"

	"github.com/retryafter/retryafter"
)

// newRouter returns the service's routes behind the maintenance switch m and the rate limiter
// l, with opts; the key is the API key of a known plan or the client's address, and /healthz is
// never limited. HEAD is served wherever GET is, so that a HEAD probe sees what a GET would
// (200, 429 or 503) rather than 405 Method Not Allowed when admitted.
func newRouter(m *retryafter.Maintenance, l retryafter.Limiter, opts ...retryafter.Option) http.Handler {
	r := chi.NewRouter()
	r.Use(m.Handler) // before the limiter: a 503 costs no quota
	opts = append([]retryafter.Option{
		retryafter.WithErrorHook(logLimitError),
		retryafter.WithKeyFunc(apiKey(retryafter.ClientIP())),
		retryafter.WithExempt(func(r *http.Request) bool { return r.URL.Path == "/healthz" }),
		retryafter.WithRateLimitFields(""),
	}, opts...)
	r.Use(retryafter.LimitWith(l, opts...))
	r.Use(middleware.GetHead)
	r.Get("/", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "hello")
	})
	r.Get("/work", func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(100 * time.Millisecond) // a request that keeps the server busy, for -max-concurrent
		fmt.Fprintln(w, "done")
	})
	r.Get("/healthz", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	return r
}

// logLimitError logs why a request could not be decided (a request with no client address).
func logLimitError(r *http.Request, err error) {
	log.Printf("rate limit for %s: %v", r.RemoteAddr, err)
}
