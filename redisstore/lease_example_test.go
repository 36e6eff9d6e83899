package redisstore_test

import (
	"context"
	"errors"
	"log"
	"net/http"
	"os"
	"os/signal"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/time/rate"

	"github.com/retryafter/retryafter"
	"github.com/retryafter/retryafter/redisstore"
)

// A limit for the whole fleet, 50,000 requests a second with bursts of 5,000, beside one per
// client. The shared key is the hot one: every request of every replica spends it. Leased(256)
// makes each replica take its tokens 256 at a time, in one script call, and admit the requests
// they cover without asking Redis, so that the shared layer costs Redis about one call per 256
// requests instead of one a request; the fleet still admits no more than the shared bucket
// gives out. On shutdown, once the server takes no more requests, Release gives back the tokens
// the replica holds, so that the others may spend them.
//
// The example needs a Redis, so it is compiled but not run; the package's tests run Leased
// limiters against a real server, and BENCHMARKS.md has the fleet's figures.
func ExampleStore_Leased() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
	defer rdb.Close()
	perClient := redisstore.New(rdb, rate.Every(100*time.Millisecond), 20, redisstore.WithPrefix("client:"))
	fleet := redisstore.New(rdb, 50_000, 5_000, redisstore.WithPrefix("fleet:")).Leased(256)
	limiter := retryafter.All(perClient, retryafter.Shared(fleet, "all"))

	hello := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("hello\n")) })
	srv := &http.Server{Addr: "127.0.0.1:8080", Handler: retryafter.LimitWith(limiter)(hello)}
	released := make(chan struct{})
	go func() {
		defer close(released)
		stop := make(chan os.Signal, 1)
		signal.Notify(stop, os.Interrupt)
		<-stop
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		if err := fleet.Release(ctx); err != nil {
			log.Printf("leased tokens not given back: %v", err)
		}
	}()
	if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		log.Fatal(err)
	}
	<-released
}
