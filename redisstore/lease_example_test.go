package redisstore_test

import (
	"context"
	"errors"
	"fmt"
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

// Two replicas share one key's bucket, 100 tokens with one more every 36 s, each through a
// Leased(16): a request that a replica's lease covers is admitted without asking Redis, and one
// that it does not takes the next lot of up to 16 tokens in one script call. Tokens are spent in
// Redis when they are leased, so the fleet admits no more than the bucket gives out (here the
// 100 tokens, of 300 requests) and, over any stretch of time, at most 16 tokens per replica more
// than a Store would, those of the leases held at its start. Release gives back what a replica
// holds, for a graceful shutdown.
func ExampleStore_Leased() {
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr(), ContextTimeoutEnabled: true})
	defer rdb.Close()
	prefix := fmt.Sprintf("example-leased-%d:", time.Now().UnixNano())
	store := redisstore.New(rdb, rate.Every(36*time.Second), 100, redisstore.WithPrefix(prefix), redisstore.WithTimeout(time.Second))
	ctx := context.Background()
	replicas := []*redisstore.Leased{
		store.Leased(16),
		redisstore.New(rdb, rate.Every(36*time.Second), 100, redisstore.WithPrefix(prefix), redisstore.WithTimeout(time.Second)).Leased(16),
	}

	admitted := 0
	for i := range 300 {
		d, err := replicas[i%2].Decide(ctx, "fleet", 1, time.Now())
		if err != nil {
			fmt.Println(err)
			return
		}
		if d.Allowed {
			admitted++
		}
	}
	fmt.Println("admitted", admitted, "of 300 requests in", replicas[0].RoundTrips()+replicas[1].RoundTrips(), "script calls")

	// A replica's lease of another key, and what Redis holds meanwhile.
	replicas[0].Decide(ctx, "other", 1, time.Now())
	d, _ := store.Decide(ctx, "other", 0, time.Now())
	fmt.Println("leased: Redis holds", d.Remaining)
	if err := replicas[0].Release(ctx); err != nil {
		fmt.Println(err)
		return
	}
	d, _ = store.Decide(ctx, "other", 0, time.Now())
	fmt.Println("released: Redis holds", d.Remaining)
	// Output:
	// admitted 100 of 300 requests in 8 script calls
	// leased: Redis holds 84
	// released: Redis holds 99
}

// A limit for the whole fleet, 50,000 requests a second with bursts of 5,000, beside one per
// client. The shared key is the hot one: every request of every replica spends it. Leased(256)
// makes each replica take its tokens 256 at a time, in one script call, and admit the requests
// they cover without asking Redis, so that the shared layer costs Redis about one call per 256
// requests instead of one a request; the fleet still admits no more than the shared bucket
// gives out. On shutdown, once the server takes no more requests, Release gives back the tokens
// the replica holds, so that the others may spend them.
//
// The example serves until interrupted, so it is compiled but not run; ExampleStore_Leased
// runs, and BENCHMARKS.md has the fleet's figures.
func ExampleStore_Leased_shutdown() {
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
