package edge_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"
	"testing/synctest"
	"time"

	"golang.org/x/time/rate"

	"github.com/retryafter/retryafter"
	"github.com/retryafter/retryafter/edge"
)

// TestCoreRoundTripWaiting is TestCoreRoundTrip with MaxWait, over random policies, costs and
// waits: requests at one instant wait for places until the next would wait too long, and that one
// is refused with a wait after which it is admitted at once; no request waits longer than
// MaxWait.
func TestCoreRoundTripWaiting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(3, 4))
		for range 300 {
			limit := rate.Limit(0.01 + rng.Float64()*20)
			burst := 1 + rng.IntN(20)
			now := t0
			c := config(&now)
			c.MaxWait = time.Duration(rng.Int64N(int64(3 * time.Second)))
			var l edge.Limiter = retryafter.NewTokenBucket(limit, burst)
			if rng.IntN(2) == 0 {
				l = retryafter.All(l, retryafter.Shared(retryafter.NewTokenBucket(limit*2, burst), "all"))
			}
			core := edge.New(l, c)
			r := request{client: "a", cost: 1 + rng.IntN(burst)}
			v := core.Decide(context.Background(), r)
			for v.Outcome == edge.Admitted || v.Outcome == edge.Waited {
				if v.Outcome == edge.Waited && (v.Decision.RetryAfter <= 0 || v.Decision.RetryAfter > c.MaxWait) {
					t.Fatalf("%v/%d cost %d: waited %v, MaxWait %v", limit, burst, r.cost, v.Decision.RetryAfter, c.MaxWait)
				}
				v = core.Decide(context.Background(), r)
			}
			if v.Outcome != edge.Refused || v.Wait() <= c.MaxWait {
				t.Fatalf("%v/%d cost %d: %v with a wait of %v, want a refusal beyond MaxWait %v", limit, burst, r.cost, v.Outcome, v.Wait(), c.MaxWait)
			}
			secs, _ := edge.DelaySeconds(v.Wait())
			now = now.Add(time.Duration(secs) * time.Second)
			if v := core.Decide(context.Background(), r); v.Outcome != edge.Admitted {
				t.Fatalf("%v/%d cost %d: waited %d s as told, then %v", limit, burst, r.cost, secs, v.Outcome)
			}
		}
	})
}

// TestCoreWaitingRefusesAsBefore: a layer charged afterwards does not wait: a key in its debt is
// refused at once, as without MaxWait.
func TestCoreWaitingRefusesAsBefore(t *testing.T) {
	now := t0
	c := config(&now)
	c.MaxWait = time.Hour
	tb := retryafter.NewTokenBucket(1, 1)
	if err := tb.Charge(context.Background(), "a", 3, now); err != nil {
		t.Fatal(err)
	}
	for _, l := range []edge.Limiter{retryafter.ChargedAfter(tb), retryafter.All(retryafter.NewTokenBucket(1, 1), retryafter.ChargedAfter(tb))} {
		if v := edge.New(l, c).Decide(context.Background(), request{client: "a"}); v.Outcome != edge.Refused {
			t.Errorf("%T in debt: %v, want Refused", l, v.Outcome)
		}
	}
}

// releaseFails is a TokenBucket whose Release fails.
type releaseFails struct{ *retryafter.TokenBucket }

func (releaseFails) Release(context.Context, string, int, time.Time) error {
	return errors.New("store down")
}

// TestCoreHangUpReleaseFails: a client that leaves while it waits is answered as canceled, and
// a Release that fails goes to the error hooks.
func TestCoreHangUpReleaseFails(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		now := t0
		c := config(&now)
		c.MaxWait = time.Second
		var errs []error
		c.OnError = append(c.OnError, func(_ request, err error) { errs = append(errs, err) })
		core := edge.New(releaseFails{retryafter.NewTokenBucket(10, 1)}, c)
		core.Decide(context.Background(), request{client: "a"})
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(50*time.Millisecond, cancel)
		v := core.Decide(ctx, request{client: "a"})
		if v.Outcome != edge.FailedClosed || v.Failure != edge.Canceled || len(errs) != 1 || errs[0].Error() != "store down" {
			t.Fatalf("%v %v, errors %v; want FailedClosed, Canceled, the Release's error", v.Outcome, v.Failure, errs)
		}
	})
}
