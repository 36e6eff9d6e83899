package edge_test

import (
	"context"
	"fmt"
	"time"

	"github.com/retryafter/retryafter"
	"github.com/retryafter/retryafter/edge"
)

// A job is the request of an edge of one's own: a queue consumer that limits each tenant's jobs
// and tells a refused producer when to send again.
type job struct {
	tenant string
	size   int
}

// Example is a third-party edge: it reads its own request, asks the core, and writes the
// answer in its own way, with the wait in delay-seconds.
func Example() {
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	core := edge.New(retryafter.NewTokenBucket(1, 2), edge.Config[job]{
		Now:  func() time.Time { return now },
		Key:  func(j job) (string, error) { return j.tenant, nil },
		Cost: func(j job) int { return j.size },
	})
	accept := func(j job) string {
		v := core.Decide(context.Background(), j)
		if v.Pass() {
			return "accepted"
		}
		if secs, ok := edge.DelaySeconds(v.Wait()); ok {
			return fmt.Sprintf("%v: send again in %d s", v.Outcome, secs)
		}
		return fmt.Sprintf("%v: never", v.Outcome)
	}
	fmt.Println(accept(job{"acme", 2}))
	fmt.Println(accept(job{"acme", 1}))
	fmt.Println(accept(job{"acme", 3}))
	now = now.Add(time.Second)
	fmt.Println(accept(job{"acme", 1}))
	// Output:
	// accepted
	// refused: send again in 1 s
	// refused: never
	// accepted
}
