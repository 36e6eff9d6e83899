package edge_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/retryafter/retryafter"
	"github.com/retryafter/retryafter/edge"
)

var t0 = time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)

// request is the request of the tests' edge: a client and a cost.
type request struct {
	client string
	cost   int
}

func config(now *time.Time) edge.Config[request] {
	return edge.Config[request]{
		Now:  func() time.Time { return *now },
		Key:  func(r request) (string, error) { return r.client, nil },
		Cost: func(r request) int { return r.cost },
	}
}

// TestCoreRoundTrip is the promise every edge keeps, through the core alone, over random
// policies and costs: a refused request whose client waits exactly the delay-seconds it is told
// and comes back is admitted.
func TestCoreRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 300 {
		limit := rate.Limit(0.01 + rng.Float64()*20)
		burst := 1 + rng.IntN(20)
		now := t0
		c := edge.New(retryafter.NewTokenBucket(limit, burst), config(&now))
		r := request{client: "a", cost: 1 + rng.IntN(burst)}
		v := c.Decide(context.Background(), r)
		for v.Outcome == edge.Admitted {
			v = c.Decide(context.Background(), r)
		}
		if v.Outcome != edge.Refused || v.Pass() {
			t.Fatalf("%v/%d cost %d: %v, want a refusal", limit, burst, r.cost, v.Outcome)
		}
		secs, ok := edge.DelaySeconds(v.Wait())
		if !ok || secs < 1 {
			t.Fatalf("%v/%d cost %d: DelaySeconds(%v) = %d, %v", limit, burst, r.cost, v.Wait(), secs, ok)
		}
		now = now.Add(time.Duration(secs) * time.Second)
		if v := c.Decide(context.Background(), r); v.Outcome != edge.Admitted {
			t.Fatalf("%v/%d cost %d: waited %d s as told, then %v", limit, burst, r.cost, secs, v.Outcome)
		}
	}
}

// failing is a Limiter that fails, and cancels the request's context first when cancel is set.
type failing struct{ cancel context.CancelFunc }

func (f failing) Decide(context.Context, string, int, time.Time) (edge.Decision, error) {
	if f.cancel != nil {
		f.cancel()
	}
	return edge.Decision{}, errors.New("down")
}

// TestCoreVerdicts: what each way a request can go becomes, and what the hooks are told.
func TestCoreVerdicts(t *testing.T) {
	errKey := errors.New("no key")
	for _, tt := range []struct {
		name    string
		l       func(cancel context.CancelFunc) edge.Limiter
		set     func(*edge.Config[request])
		want    edge.Outcome
		failure edge.Failure
		wait    time.Duration
		errors  int
		pass    bool
	}{
		{"admitted", bucket, nil, edge.Admitted, 0, 0, 0, true},
		{"refused", spent, nil, edge.Refused, 0, time.Second - time.Microsecond, 0, false}, // the bucket's slack
		{"dry run", spent, func(c *edge.Config[request]) { c.DryRun = true }, edge.DryRunRefused, 0, 0, 0, true},
		{"exempt", spent, func(c *edge.Config[request]) { c.Exempt = func(request) bool { return true } }, edge.Exempt, 0, 0, 0, true},
		{"key fails", bucket, func(c *edge.Config[request]) { c.Key = func(request) (string, error) { return "", errKey } }, edge.FailedClosed, edge.KeyFailed, 0, 1, false},
		{"key fails open", bucket, func(c *edge.Config[request]) {
			c.Key = func(request) (string, error) { return "", errKey }
			c.FailOpen = true
		}, edge.FailedOpen, edge.KeyFailed, 0, 1, true},
		{"limiter fails", down, nil, edge.FailedClosed, edge.LimiterFailed, edge.FailWait, 1, false},
		{"limiter fails open", down, func(c *edge.Config[request]) { c.FailOpen = true }, edge.FailedOpen, edge.LimiterFailed, 0, 1, true},
		{"client gone", hungUp, func(c *edge.Config[request]) { c.FailOpen = true }, edge.FailedClosed, edge.Canceled, edge.FailWait, 0, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			now := t0
			c := config(&now)
			var decided []edge.Outcome
			errs := 0
			c.OnDecided = append(c.OnDecided, func(_ request, o edge.Outcome, _ edge.Decision) { decided = append(decided, o) })
			c.OnError = append(c.OnError, func(request, error) { errs++ })
			if tt.set != nil {
				tt.set(&c)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			core := edge.New(tt.l(cancel), c)
			v := core.Decide(ctx, request{client: "a", cost: 1})
			if v.Outcome != tt.want || v.Failure != tt.failure || v.Wait() != tt.wait || v.Pass() != tt.pass {
				t.Fatalf("verdict %+v (wait %v, pass %v); want %v, failure %v, wait %v, pass %v", v, v.Wait(), v.Pass(), tt.want, tt.failure, tt.wait, tt.pass)
			}
			if len(decided) != 1 || decided[0] != tt.want || errs != tt.errors {
				t.Fatalf("hooks told %v and %d errors; want [%v] and %d", decided, errs, tt.want, tt.errors)
			}
			if tt.want != edge.Exempt && v.Now != t0 {
				t.Fatalf("Now %v, want the clock's one reading %v", v.Now, t0)
			}
		})
	}
}

func bucket(context.CancelFunc) edge.Limiter { return retryafter.NewTokenBucket(1, 1) }

func spent(context.CancelFunc) edge.Limiter {
	b := retryafter.NewTokenBucket(1, 1)
	b.Decide(context.Background(), "a", 1, t0)
	return b
}

func down(context.CancelFunc) edge.Limiter { return failing{} }

func hungUp(cancel context.CancelFunc) edge.Limiter { return failing{cancel: cancel} }

// quick is a TokenBucket that records which of its methods the core asked.
type quick struct {
	*retryafter.TokenBucket
	allowed, decided int
}

func (q *quick) Decide(ctx context.Context, key string, cost int, now time.Time) (edge.Decision, error) {
	q.decided++
	return q.TokenBucket.Decide(ctx, key, cost, now)
}

func (q *quick) Allow(ctx context.Context, key string, cost int, now time.Time) (time.Duration, edge.Policy, error) {
	q.allowed++
	return q.TokenBucket.Allow(ctx, key, cost, now)
}

// TestCoreAllower: the core asks an Allower's Allow only when nothing reads the quota.
func TestCoreAllower(t *testing.T) {
	for _, tt := range []struct {
		name  string
		set   func(*edge.Config[request])
		allow bool
	}{
		{"nothing reads the quota", nil, true},
		{"the edge does", func(c *edge.Config[request]) { c.Quota = true }, false},
		{"a decision hook does", func(c *edge.Config[request]) {
			c.OnDecided = append(c.OnDecided, func(request, edge.Outcome, edge.Decision) {})
		}, false},
		{"a limited hook does", func(c *edge.Config[request]) {
			c.OnLimited = append(c.OnLimited, func(request, string, edge.Decision) {})
		}, false},
	} {
		now := t0
		c := config(&now)
		if tt.set != nil {
			tt.set(&c)
		}
		q := &quick{TokenBucket: retryafter.NewTokenBucket(1, 1)}
		edge.New(edge.Limiter(q), c).Decide(context.Background(), request{client: "a", cost: 1})
		if got := q.allowed == 1 && q.decided == 0; got != tt.allow {
			t.Errorf("%s: Allow asked %d times, Decide %d; want Allow: %v", tt.name, q.allowed, q.decided, tt.allow)
		}
	}
}

// TestCoreAllowerVerdicts: what Allow reports makes the Verdict that Decide's Decision makes, but
// for the quota it leaves out, over random costs, times and policies.
func TestCoreAllowerVerdicts(t *testing.T) {
	rng := rand.New(rand.NewPCG(56, 0))
	for range 200 {
		pol := edge.Policy{Name: "p", Limit: rate.Limit(rng.Float64() * 10), Burst: 1 + rng.IntN(5)}
		plan := retryafter.WithPolicyFunc(func(string) edge.Policy { return pol })
		now := t0
		c := config(&now)
		quota := c
		quota.Quota = true // Decide, with the quota
		q := &quick{TokenBucket: retryafter.NewTokenBucket(1, 1, plan)}
		allow, decide := edge.New(edge.Limiter(q), c), edge.New(retryafter.NewTokenBucket(1, 1, plan), quota)
		for range 20 {
			now = now.Add(time.Duration(rng.Int64N(int64(2 * time.Second))))
			r := request{client: "a", cost: rng.IntN(pol.Burst + 2)}
			a, d := allow.Decide(context.Background(), r), decide.Decide(context.Background(), r)
			d.Decision.Remaining, d.Decision.Reset = 0, 0
			if a.Outcome != d.Outcome || a.Decision != d.Decision {
				t.Fatalf("%+v, cost %d at %v: Allow's verdict %+v, Decide's %+v", pol, r.cost, now.Sub(t0), a, d)
			}
		}
		if q.allowed == 0 || q.decided != 0 {
			t.Fatalf("Allow asked %d times, Decide %d", q.allowed, q.decided)
		}
	}
}
