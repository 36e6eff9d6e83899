// Command capacity measures how many IPv4 clients a TokenBucket holds at its default memory
// bound (192 MiB), and the live heap they take: it feeds 2,097,152 new client addresses, each
// refused after its first request, and counts the clients the table holds at the end.
//
//	go run ./capacity   (from _benchmarks)
package main

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"time"

	"golang.org/x/time/rate"

	"github.com/retryafter/retryafter"
)

func main() {
	t0 := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	before := liveHeap()
	b := retryafter.NewTokenBucket(rate.Every(time.Minute), 1)
	ctx := context.Background()
	// Twice as many clients as fit: every part of the table reaches its bound, and from then on a
	// new client replaces one whose bucket has refilled (none has, here: each new one is held in
	// the place of another).
	const clients = 2 << 20
	for i := range clients {
		if _, err := b.Decide(ctx, addr(i), 1, t0); err != nil {
			panic(err)
		}
	}
	held := b.Len()
	heap := liveHeap() - before
	runtime.KeepAlive(b)
	fmt.Printf("%d IPv4 clients held at the default bound; live heap %.1f MiB (%.0f B a client)\n",
		held, float64(heap)/(1<<20), float64(heap)/float64(held))
}

// addr is the i-th client address of 10.0.0.0/8, as retryafter.ClientIP keys an IPv4 client.
func addr(i int) string {
	return "10." + strconv.Itoa(i>>16&255) + "." + strconv.Itoa(i>>8&255) + "." + strconv.Itoa(i&255)
}

func liveHeap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
