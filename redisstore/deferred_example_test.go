package redisstore_test

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/time/rate"

	"github.com/retryafter/retryafter"
	"github.com/retryafter/retryafter/redisstore"
)

// Tokens charged after each answer (a model's tokens, say), 100 a key with one more every 36 s,
// held back for 50 ms: Charge returns at once, and the key's next decision carries the charge to
// Redis in its own round trip, so that a charged request costs Redis one round trip, not two. A
// charge that no decision carries goes out with the others held then, in one pipelined round
// trip per 1,000 keys, when the oldest of them is 50 ms old: a held charge reaches Redis at most
// the delay plus one round trip (within the store's timeout, here 1 s) after it was made, and
// that is all a crash can lose. Flush sends them at once, for a graceful shutdown. A decision
// never misses a charge its Store holds: it carries it, or waits for the round trip it is in.
func ExampleWithDeferredCharges() {
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr(), ContextTimeoutEnabled: true})
	defer rdb.Close()
	prefix := fmt.Sprintf("example-deferred-%d:", time.Now().UnixNano())
	tokens := redisstore.New(rdb, rate.Every(36*time.Second), 100, redisstore.WithPrefix(prefix), redisstore.WithTimeout(time.Second),
		redisstore.WithDeferredCharges(50*time.Millisecond))
	other := redisstore.New(rdb, rate.Every(36*time.Second), 100, redisstore.WithPrefix(prefix), redisstore.WithTimeout(time.Second)) // another replica
	ctx := context.Background()

	// alice's answer took 80 tokens: held, and Charge returns at once.
	if err := tokens.Charge(ctx, "alice", 80, time.Now()); err != nil {
		fmt.Println(err)
		return
	}
	// Her next request of 30 carries the charge: 100 - 80 leaves 20, too few.
	d, _ := tokens.Decide(ctx, "alice", 30, time.Now())
	fmt.Println("alice asks for 30:", d.Allowed, d.Remaining, "left")

	// bob's charge goes out with the flush, within 50 ms and a round trip.
	if err := tokens.Charge(ctx, "bob", 60, time.Now()); err != nil {
		fmt.Println(err)
		return
	}
	var seen retryafter.Decision
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if seen, _ = other.Decide(ctx, "bob", 0, time.Now()); seen.Remaining < 100 {
			break
		}
	}
	fmt.Println("another replica sees bob with", seen.Remaining, "tokens")

	// On shutdown, Flush sends what is held: nothing is lost.
	if err := tokens.Charge(ctx, "carol", 10, time.Now()); err != nil {
		fmt.Println(err)
		return
	}
	if err := tokens.Flush(ctx); err != nil {
		fmt.Println(err)
		return
	}
	seen, _ = other.Decide(ctx, "carol", 0, time.Now())
	fmt.Println("after Flush, another replica sees carol with", seen.Remaining, "tokens")
	// Output:
	// alice asks for 30: false 20 left
	// another replica sees bob with 40 tokens
	// after Flush, another replica sees carol with 90 tokens
}
