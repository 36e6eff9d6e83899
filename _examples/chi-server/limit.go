package main

import (
	"log"
	"net/http"

	"github.com/redis/go-redis/v9"
	"golang.org/x/time/rate"

	"github.com/retryafter/retryafter"
	"github.com/retryafter/retryafter/redisstore"
)

// newLimiter returns the limiter that lets each client make requests at limit per second with
// bursts of up to burst, on the plan of each key (planOf): in memory when redisAddr is empty;
// otherwise in the Redis at redisAddr, so that every replica started with the same -redis shares
// one limit per client. When that Redis does not answer within 100 ms, the middleware answers
// 503 with Retry-After: 1.
func newLimiter(redisAddr string, limit rate.Limit, burst int) retryafter.Limiter {
	if redisAddr == "" {
		return retryafter.NewTokenBucket(limit, burst, retryafter.WithPolicyFunc(planOf))
	}
	log.Printf("counting requests in the Redis at %s", redisAddr)
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
	return redisstore.New(rdb, limit, burst, redisstore.WithPrefix("chi-server:"), redisstore.WithPolicyFunc(planOf))
}

// logLimitError logs why the limiter could not decide (a Redis that is down, say).
func logLimitError(r *http.Request, err error) {
	log.Printf("rate limit for %s: %v", r.RemoteAddr, err)
}
