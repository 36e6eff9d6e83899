package redisstore_test

import (
	"context"
	"log"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/redis/go-redis/v9"
	"golang.org/x/time/rate"

	"github.com/retryafter/retryafter"
	"github.com/retryafter/retryafter/internal/testkit/redistest"
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

// Three limits of an LLM-style API, kept in Redis and decided in one round trip: 60 requests
// per key (one a second after the first 60), 1,000 a second for the whole service, and 100,000
// tokens a minute per key, charged after each answer with the tokens it took, so that a key in
// debt waits until it is repaid. The prefixes share the hash tag {llm}, which puts every key of
// the three Stores in one slot of a Redis Cluster, on one master, so that they combine into one
// script there too; on one server (a *redis.Client) no tag is needed. The tokens' charges are
// held back for the key's next request to carry (WithDeferredCharges), so that a request costs
// Redis one round trip, and flushed when the server shuts down.
//
// The example needs a Redis Cluster, so it is compiled but not run; the package's tests run the
// same layers against a real server and cluster.
func ExampleStore_Combine() {
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:7000"}, ContextTimeoutEnabled: true})
	defer rdb.Close()
	requests := redisstore.New(rdb, rate.Every(time.Second), 60, redisstore.WithPrefix("{llm}:requests:"))
	service := redisstore.New(rdb, 1000, 1000, redisstore.WithPrefix("{llm}:service:"))
	tokens := redisstore.New(rdb, rate.Every(time.Minute/100_000), 100_000, redisstore.WithPrefix("{llm}:tokens:"),
		redisstore.WithDeferredCharges(100*time.Millisecond))
	limiter := retryafter.All(requests, retryafter.Shared(service, "all"), retryafter.ChargedAfter(tokens))

	r := chi.NewRouter()
	r.Use(retryafter.LimitWith(limiter))
	r.Post("/v1/complete", func(w http.ResponseWriter, r *http.Request) {
		answer, used := complete(r)
		retryafter.Charge(r, used)
		w.Write(answer)
	})
	srv := &http.Server{Addr: "127.0.0.1:8080", Handler: r}
	go func() {
		stop := make(chan os.Signal, 1)
		signal.Notify(stop, os.Interrupt)
		<-stop
		srv.Shutdown(context.Background()) // the requests in flight end, and are charged
	}()
	if err := srv.ListenAndServe(); err != http.ErrServerClosed {
		log.Fatal(err)
	}
	if err := tokens.Flush(context.Background()); err != nil {
		log.Printf("charges lost on shutdown: %v", err)
	}
}

// complete stands for a model that answers a prompt and reports the tokens it took.
func complete(*http.Request) ([]byte, int) { return []byte("42\n"), 1200 }

// redisAddr returns the address of the Redis the runnable examples use: REDIS_ADDR, as CI sets
// it, or the redis-server that the package's tests start (see package redistest), asked for
// through testing.Benchmark, which gives the examples the testing.TB they lack. Without either
// the examples fail, as the tests fail under CI=true.
var redisAddr = sync.OnceValue(func() string {
	if addr := os.Getenv("REDIS_ADDR"); addr != "" {
		return addr
	}
	var addr string
	testing.Benchmark(func(b *testing.B) { addr = redistest.Addr(b) })
	return addr
})
