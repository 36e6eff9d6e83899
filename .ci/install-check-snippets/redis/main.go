// The README's Redis snippet (Production: several replicas, one limit), as a user builds it.
package main

import (
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/redis/go-redis/v9"
	"golang.org/x/time/rate"

	"github.com/retryafter/retryafter"
	"github.com/retryafter/retryafter/redisstore"
)

func main() {
	r := chi.NewRouter()
	// snippet from README.md
	rdb := redis.NewClient(&redis.Options{Addr: "10.0.0.5:6379", ContextTimeoutEnabled: true})
	r.Use(retryafter.LimitWith(redisstore.New(rdb, rate.Every(200*time.Millisecond), 10)))
	// end of snippet
	r.Get("/", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("hello\n")) })
	http.ListenAndServe("127.0.0.1:8080", r)
}
