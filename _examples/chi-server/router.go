package main

import (
	"fmt"
	"net/http"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"

	"github.com/retryafter/retryafter"
)

// newRouter returns the service's routes behind the maintenance switch m and the rate limiter
// l. HEAD is served wherever GET is, so that a HEAD health check or probe sees what a GET
// would (200, 429 or 503) rather than 405 Method Not Allowed when admitted.
func newRouter(m *retryafter.Maintenance, l retryafter.Limiter) http.Handler {
	r := chi.NewRouter()
	r.Use(m.Handler) // before the limiter: a 503 costs no quota
	r.Use(retryafter.LimitWith(l, retryafter.WithErrorHook(logLimitError)))
	r.Use(middleware.GetHead)
	r.Get("/", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "hello")
	})
	r.Get("/healthz", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	return r
}
