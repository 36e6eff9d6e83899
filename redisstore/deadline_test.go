package redisstore

import (
	"testing"
	"testing/synctest"
	"time"
)

// TestDeadlinesShared checks, on testing/synctest's clock, that the deadlines within one step
// share a channel, at the edges of the step too, so that decisions made at one instant cost no
// timer each; that a deadline past the step gets a channel of its own; and that every channel
// closes at or after its deadline and at most a step later.
func TestDeadlinesShared(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const step = 10 * time.Millisecond
		d := deadlines{step: step}
		now := time.Now()
		first := d.doneBy(now)
		for _, at := range []time.Duration{0, time.Nanosecond, step / 2, step} {
			if d.doneBy(now.Add(at)) != first {
				t.Fatalf("a deadline %v after the first does not share its channel, which closes %v after it", at, step-at)
			}
		}
		type deadline struct {
			at   time.Duration // after now
			done <-chan struct{}
		}
		var all []deadline // in the order of their instants
		for _, at := range []time.Duration{-time.Nanosecond, step + time.Nanosecond} {
			c := d.doneBy(now.Add(at))
			if c == first {
				t.Fatalf("a deadline %v after the first shares its channel, which closes %v after it", at, step-at)
			}
			all = append(all, deadline{at, c})
			if at < 0 {
				all = append(all, deadline{0, first})
			}
		}
		closed := func(c <-chan struct{}) bool {
			synctest.Wait()
			select {
			case <-c:
				return true
			default:
				return false
			}
		}
		for _, dl := range all {
			if early := now.Add(dl.at - time.Nanosecond); early.After(time.Now()) {
				time.Sleep(time.Until(early))
				if closed(dl.done) {
					t.Fatalf("the channel of the deadline at %+v closed before it", dl.at)
				}
			}
			time.Sleep(time.Until(now.Add(dl.at + step)))
			if !closed(dl.done) {
				t.Fatalf("the channel of the deadline at %+v still open a step after it", dl.at)
			}
		}
	})
}
