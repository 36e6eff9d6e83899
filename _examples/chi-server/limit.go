package main

import (
	"golang.org/x/time/rate"

	"github.com/retryafter/retryafter"
)

// newLimiter returns the limiter that lets each client make requests at limit per second with
// bursts of up to burst, on the plan of each key (planOf), counted in memory.
func newLimiter(limit rate.Limit, burst int) retryafter.Limiter {
	return retryafter.NewTokenBucket(limit, burst, retryafter.WithPolicyFunc(planOf))
}
