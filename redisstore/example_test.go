package redisstore_test

import (
	"log"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/redis/go-redis/v9"
	"golang.org/x/time/rate"

	"github.com/retryafter/retryafter"
	"github.com/retryafter/retryafter/redisstore"
)

// Every replica of a service runs the same code against the same Redis, and clients get one
// limit between them: 5 requests/s each, bursts of 10. ContextTimeoutEnabled lets the store's
// 100 ms timeout bound each call (New refuses a client without it); when Redis is down or slow,
// requests are answered 503 with Retry-After: 1 (WithFailOpen(true) would admit them instead),
// at once while the store knows Redis is down, and the hook logs why.
//
// The example needs a Redis, so it is compiled but not run; the package's tests run the same
// setup against a real server.
func ExampleNew() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
	defer rdb.Close()
	store := redisstore.New(rdb, rate.Every(200*time.Millisecond), 10, redisstore.WithPrefix("api:"))

	r := chi.NewRouter()
	r.Use(retryafter.LimitWith(store, retryafter.WithErrorHook(func(r *http.Request, err error) {
		log.Printf("rate limit: %v", err)
	})))
	r.Get("/", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("hello\n")) })
	log.Fatal(http.ListenAndServe("127.0.0.1:8080", r))
}
