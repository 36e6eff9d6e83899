package main

import (
	"net/http"
	"strings"

	"golang.org/x/time/rate"

	"github.com/retryafter/retryafter"
)

// plans names the plan of each API key this demo knows; a real service reads them from its
// accounts, and may change them while it runs (the policy function is asked on every request).
var plans = map[string]retryafter.Policy{
	"demo-pro": {Name: "pro", Limit: 10, Burst: 20},
}

// freePlan is the limit of a client without a known API key, counted by its address.
var freePlan = retryafter.Policy{Name: "free", Limit: rate.Limit(1), Burst: 5}

// apiKey is the key function: a known API key (X-API-Key) is its own client, on its plan;
// anyone else is its address, on the free plan, so that inventing keys buys nothing.
func apiKey(clientIP retryafter.KeyFunc) retryafter.KeyFunc {
	return func(r *http.Request) (string, error) {
		if k := r.Header.Get("X-API-Key"); k != "" {
			if _, ok := plans[k]; ok {
				return "key:" + k, nil
			}
		}
		return clientIP(r)
	}
}

// planOf is the policy function: the plan of a key that apiKey named, the free plan otherwise.
func planOf(key string) retryafter.Policy {
	if k, ok := strings.CutPrefix(key, "key:"); ok {
		if p, ok := plans[k]; ok {
			return p
		}
	}
	return freePlan
}
