package grpclimit_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"

	"github.com/retryafter/retryafter"
	"github.com/retryafter/retryafter/grpclimit"
	"github.com/retryafter/retryafter/limitertest"
)

// TestContract runs the Limiter contract through the interceptor: each decision is a call to a
// real grpc-go server on loopback, and what the client reads back (OK, or RESOURCE_EXHAUSTED
// with RetryInfo and pushback) is the Decision. The interceptor's resolution is the
// millisecond, so the rates are at most one token a millisecond: above that, a wait rounded up
// to the millisecond restores more than the one token the contract's ExactWait counts on.
func TestContract(t *testing.T) {
	for _, c := range []struct {
		name  string
		burst int
		new   func() retryafter.Limiter
	}{
		{"TokenBucket 10/s", 3, func() retryafter.Limiter { return retryafter.NewTokenBucket(10, 3) }},
		{"TokenBucket 1/min", 1, func() retryafter.Limiter { return retryafter.NewTokenBucket(rate.Every(time.Minute), 1) }},
		{"TokenBucket 500/s", 5, func() retryafter.Limiter { return retryafter.NewTokenBucket(500, 5) }},
		{"Shared", 3, func() retryafter.Limiter { return retryafter.Shared(retryafter.NewTokenBucket(10, 3), "everyone") }},
		{"plans", 4, func() retryafter.Limiter {
			return retryafter.NewTokenBucket(1, 1, retryafter.WithPolicyFunc(func(string) retryafter.Policy {
				return retryafter.Policy{Name: "pro", Limit: 20, Burst: 4}
			}))
		}},
		{"All", 2, func() retryafter.Limiter {
			return retryafter.All(retryafter.NewTokenBucket(7, 2), retryafter.NewTokenBucket(rate.Every(time.Hour), 100))
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			limitertest.Run(t, limitertest.Config{
				New:        func(t *testing.T) retryafter.Limiter { return throughGRPC(t, c.new()) },
				Burst:      c.burst,
				Resolution: time.Millisecond,
			})
		})
	}
}

// throughGRPC returns a Limiter that decides each request of cost 1 or more by a call to a
// server that l limits, on the server's clock set to the request's instant. The interceptor
// never asks l about a cost below 1 (WithCost counts it as 1), so those are l's own.
func throughGRPC(t *testing.T, l retryafter.Limiter) retryafter.Limiter {
	clk := newClock(t0)
	addr, _ := serve(t, grpc.UnaryInterceptor(grpclimit.UnaryServerInterceptor(l,
		grpclimit.WithClock(clk.now), grpclimit.WithKeyFunc(keyFromMetadata), grpclimit.WithCost(costFromMetadata))))
	return &viaGRPC{l: l, clk: clk, client: dial(t, addr)}
}

type viaGRPC struct {
	l      retryafter.Limiter
	clk    *clock
	client testpb.TestServiceClient
}

func (v *viaGRPC) Decide(ctx context.Context, key string, cost int, now time.Time) (retryafter.Decision, error) {
	if cost < 1 {
		return v.l.Decide(ctx, key, cost, now)
	}
	v.clk.set(now)
	a := call(withKey(ctx, key, cost), v.client)
	switch a.st.Code() {
	case codes.OK:
		return retryafter.Decision{Allowed: true}, nil
	case codes.ResourceExhausted:
	default:
		return retryafter.Decision{}, a.err
	}
	if len(a.pushback) == 1 && a.pushback[0] == "-1" && a.retryInfo == nil {
		return retryafter.Decision{RetryAfter: rate.InfDuration}, nil
	}
	wait := a.retryInfo.GetRetryDelay().AsDuration()
	if len(a.pushback) != 1 || a.pushback[0] != fmt.Sprint(wait.Milliseconds()) || wait%time.Millisecond != 0 {
		return retryafter.Decision{}, fmt.Errorf("RetryInfo %v and pushback %q disagree", wait, a.pushback)
	}
	return retryafter.Decision{RetryAfter: wait}, nil
}
