package httpratestore

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/retryafter/retryafter"
)

// TestPolicy checks, over random limits and windows and every kind of answer (admitted, refused,
// a peek, a cost above the limit), that each Decision names the Store's policy: a Burst of the
// request limit and a Limit whose window, Burst / Limit, is the window length.
func TestPolicy(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	ctx := context.Background()
	for range 200 {
		limit := 1 + rng.IntN(1000)
		window := time.Duration(1 + rng.Int64N(int64(24*time.Hour)))
		s := New(limit, window, nil)
		now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
		var kinds [2]int
		for i := range 2*limit + 2 {
			cost := 1
			switch i % 7 {
			case 3:
				cost = 0
			case 5:
				cost = limit + 1
			}
			d, err := s.Decide(ctx, "k", cost, now)
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed {
				kinds[0]++
			} else {
				kinds[1]++
			}
			if d.Policy.Burst != limit || d.Policy.Name != "" {
				t.Fatalf("%d per %v: Policy %+v, want Burst %d", limit, window, d.Policy, limit)
			}
			got := time.Duration(float64(d.Policy.Burst) / float64(d.Policy.Limit) * float64(time.Second))
			if diff := (got - window).Abs(); diff > window/1e9+1 {
				t.Fatalf("%d per %v: Policy %+v has a window of %v, want %v", limit, window, d.Policy, got, window)
			}
		}
		if kinds[0] == 0 || kinds[1] == 0 {
			t.Fatalf("%d per %v: %d admitted and %d refused, want both", limit, window, kinds[0], kinds[1])
		}
	}
}

// withoutPolicy returns d with no Policy, for the tests that check the rest of a Decision
// (TestPolicy checks the Policy).
func withoutPolicy(d retryafter.Decision) retryafter.Decision {
	d.Policy = retryafter.Policy{}
	return d
}
