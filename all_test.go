package retryafter

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retryafter/retryafter/edge"
	"golang.org/x/time/rate"
)

// gcra is an exact model of one layer: a token bucket of burst tokens, one every interval, kept
// as the theoretical arrival time of each key, in integer nanoseconds (as the Redis store keeps
// it). A request of cost c at t is admitted when max(tat, t) + c·interval ≤ t + burst·interval,
// and then moves tat there; a refusal changes nothing.
type gcra struct {
	interval time.Duration
	burst    int
	tat      map[string]time.Time
}

func newGCRA(interval time.Duration, burst int) *gcra {
	return &gcra{interval: interval, burst: burst, tat: map[string]time.Time{}}
}

// over returns by how much a request of cost at t overshoots the bucket: the wait until it is
// admitted when positive, how early it could have come when not.
func (g *gcra) over(key string, cost int, t time.Time) time.Duration {
	tat := g.tat[key]
	if tat.Before(t) {
		tat = t
	}
	return tat.Add(time.Duration(cost) * g.interval).Sub(t.Add(time.Duration(g.burst) * g.interval))
}

// spend moves key's tat by cost at t, whether or not it fits: an admission, or a charge.
func (g *gcra) spend(key string, cost int, t time.Time) {
	tat := g.tat[key]
	if tat.Before(t) {
		tat = t
	}
	g.tat[key] = tat.Add(time.Duration(cost) * g.interval)
}

// modelLayer is one layer of a random All and its model.
type modelLayer struct {
	bucket   *TokenBucket
	model    *gcra
	shared   bool // counted against one key
	deferred bool // ChargedAfter
}

func (l *modelLayer) key(k string) string {
	if l.shared {
		return "shared"
	}
	return k
}

// TestAllAgainstModel decides random requests of random clients with a random All of token
// buckets, some shared by every client, some charged afterwards, on an injected clock, and checks
// every decision against the exact model: refused exactly when some layer would overshoot, with
// a RetryAfter of the largest overshoot (so that a request of the same cost at now + RetryAfter
// is admitted and one a microsecond earlier is not); a refusal spends nothing in any layer (or
// the model, which spends nothing on one, would part from the limiter); admitted requests spend
// in every layer, so none ever exceeds its burst + rate × elapsed; charges afterwards put keys
// into debt and their next request waits exactly until it is repaid. Every other seed decides
// without the quota, as the middleware does when it writes no rate-limit fields, which takes a
// path of its own.
func TestAllAgainstModel(t *testing.T) {
	const tolerance = 2 * time.Microsecond // the bucket's microsecond of slack, and float arithmetic
	checked := map[string]int{}
	for seed := range uint64(60) {
		rng := rand.New(rand.NewPCG(seed, 7))
		var layers []modelLayer
		var limiters []Limiter
		minBurst := 1 << 30
		for i := range 1 + rng.IntN(4) {
			interval := time.Duration(1+rng.IntN(3000)) * time.Millisecond
			burst := 1 + rng.IntN(8)
			l := modelLayer{bucket: NewTokenBucket(rate.Every(interval), burst), model: newGCRA(interval, burst)}
			l.shared = i > 0 && rng.IntN(3) == 0
			l.deferred = i > 0 && rng.IntN(4) == 0
			var lim Limiter = l.bucket
			if l.shared {
				lim = Shared(lim, "shared")
			}
			if l.deferred {
				lim = ChargedAfter(lim)
			}
			layers = append(layers, l)
			limiters = append(limiters, lim)
			if !l.deferred {
				minBurst = min(minBurst, burst)
			}
		}
		a := All(limiters...)
		decide := a.Decide
		now := t0
		ctx := context.Background()
		for range 400 {
			now = now.Add(time.Duration(rng.Int64N(int64(800 * time.Millisecond))))
			key := fmt.Sprintf("client-%d", rng.IntN(3))
			cost := 1 + rng.IntN(min(minBurst, 3))
			if minBurst == 1<<30 {
				cost = 1
			}
			// The model's verdict: the largest overshoot of any layer. A layer whose bucket
			// is full is exact in float64 too; one that is refilling may be a nanosecond off.
			worst, margin := time.Duration(-1<<62), time.Duration(1<<62)
			for i := range layers {
				l := &layers[i]
				c := cost
				if l.deferred {
					c = 0
				}
				o := l.model.over(l.key(key), c, now)
				worst = max(worst, o)
				if l.model.tat[l.key(key)].After(now) {
					margin = min(margin, max(o, -o))
				}
			}
			d, err := decide(ctx, key, cost, now)
			if err != nil {
				t.Fatal(err)
			}
			if margin < tolerance {
				// Too close to a boundary for float arithmetic to agree to the nanosecond:
				// follow the limiter, and keep the model in step.
				checked["at a boundary"]++
			} else if want := worst <= 0; d.Allowed != want {
				t.Fatalf("seed %d, %s cost %d at %v: allowed %v, the model says %v (overshoot %v)", seed, key, cost, now.Sub(t0), d.Allowed, want, worst)
			} else if !d.Allowed && (d.RetryAfter < worst-tolerance || d.RetryAfter > worst+tolerance) {
				t.Fatalf("seed %d: RetryAfter %v, the model's wait %v", seed, d.RetryAfter, worst)
			}
			if !d.Allowed {
				checked["refused"]++
				continue
			}
			checked["admitted"]++
			for i := range layers {
				if l := &layers[i]; !l.deferred {
					l.model.spend(l.key(key), cost, now)
				}
			}
			if seed%2 == 0 && quotaOfLayers(t, layers, key, now, d, tolerance) {
				checked["quota"]++
			}
			if rng.IntN(3) == 0 { // what the request really cost, charged afterwards
				used := rng.IntN(15)
				later := now.Add(time.Duration(rng.Int64N(int64(time.Second))))
				if err := a.(afterCharger).chargeAfter(ctx, key, used, later); err != nil {
					t.Fatal(err)
				}
				for i := range layers {
					if l := &layers[i]; l.deferred {
						l.model.spend(l.key(key), used, later)
					}
				}
				now = later
				checked["charged"]++
			}
		}
	}
	t.Log(checked)
	if checked["refused"] < 1000 || checked["charged"] < 500 || checked["quota"] < 1000 {
		t.Fatalf("too little was checked: %v", checked)
	}
}

// quotaOfLayers reports whether d, an admitted request's Decision, carries the quota of the
// layer that binds after the spending, by the model: the Limit and Remaining of a layer whose
// share of its quota left is the smallest, Remaining being the largest cost the layer admits at
// now. It fails t where they differ, and reports false, checking nothing, when some layer is
// within tolerance of admitting one more, where float arithmetic may round either way.
func quotaOfLayers(t *testing.T, layers []modelLayer, key string, now time.Time, d Decision, tolerance time.Duration) bool {
	t.Helper()
	type quota struct{ limit, remaining int }
	var qs []quota
	for i := range layers {
		l := &layers[i]
		n := 0
		for n < l.model.burst {
			o := l.model.over(l.key(key), n+1, now)
			if o > -tolerance && o < tolerance {
				return false
			}
			if o > 0 {
				break
			}
			n++
		}
		qs = append(qs, quota{l.model.burst, n})
	}
	least := qs[0]
	for _, q := range qs[1:] {
		if q.remaining < least.remaining {
			least = q
		}
	}
	for _, q := range qs {
		if q.limit == d.Limit && q.remaining == d.Remaining && q.remaining == least.remaining {
			return true
		}
	}
	t.Errorf("admitted %s at %v: Limit %d, Remaining %d; the layers' quotas %v, the binding one %v", key, now, d.Limit, d.Remaining, qs, least)
	return false
}

// TestAllRoundTrip puts an All of a per-client bucket and one shared by every client behind the
// middleware and holds every 429 to the round trip: Retry-After waited exactly is admitted, a
// second less is refused.
func TestAllRoundTrip(t *testing.T) {
	refusals := 0
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 3))
		client := NewTokenBucket(rate.Every(time.Duration(1+rng.IntN(3000))*time.Millisecond), 1+rng.IntN(5))
		service := NewTokenBucket(rate.Every(time.Duration(1+rng.IntN(3000))*time.Millisecond), 1+rng.IntN(5))
		hour := NewTokenBucket(rate.Every(time.Duration(1+rng.IntN(60))*time.Second), 3+rng.IntN(20))
		clk := newClock(t0.Add(time.Duration(rng.Int64N(int64(time.Second)))))
		h := LimitWith(All(client, Shared(service, "service"), hour), WithClock(clk.Now))(ok)
		refusals += checkRoundTrip(t, h, clk, 200, func() time.Duration {
			return time.Duration(rng.Int64N(int64(1500 * time.Millisecond)))
		})
	}
	if refusals < 500 {
		t.Fatalf("only %d refusals checked", refusals)
	}
}

// TestAllRefusalSpendsNothing is the case of the governor issues: a request that one limit
// refuses must not spend another's quota, or every retry is pushed back.
func TestAllRefusalSpendsNothing(t *testing.T) {
	ctx := context.Background()
	perSecond := NewTokenBucket(10, 10)
	perHour := NewTokenBucket(rate.Every(time.Hour), 2)
	a := All(perSecond, perHour)
	for i := range 2 {
		if d, _ := a.Decide(ctx, "k", 1, t0); !d.Allowed {
			t.Fatalf("request %d refused", i)
		}
	}
	for range 100 { // refused by the hourly limit: the per-second one must keep its tokens
		if d, _ := a.Decide(ctx, "k", 1, t0); d.Allowed || d.RetryAfter < 59*time.Minute {
			t.Fatalf("%+v, want a refusal of about an hour", d)
		}
	}
	if d, _ := perSecond.Decide(ctx, "k", 8, t0); !d.Allowed {
		t.Fatalf("the per-second limit lost quota to refusals: %+v", d)
	}
}

// TestAllBindingLayer checks the quota a Decision of All reports: the layer that binds.
func TestAllBindingLayer(t *testing.T) {
	ctx := context.Background()
	small := NewTokenBucket(1, 3)
	big := NewTokenBucket(rate.Every(time.Minute), 10)
	a := All(big, small)
	d, _ := a.Decide(ctx, "k", 1, t0)
	if !d.Allowed || d.Limit != 3 || d.Remaining != 2 {
		t.Fatalf("admitted: %+v, want the small bucket's quota (Limit 3, Remaining 2)", d)
	}
	a.Decide(ctx, "k", 2, t0)
	d, _ = a.Decide(ctx, "k", 1, t0)
	if d.Allowed || d.Limit != 3 || d.RetryAfter != time.Second-slack || d.Reset < d.RetryAfter {
		t.Fatalf("refused: %+v, want the small bucket binding, RetryAfter 1s", d)
	}
	// One a second for 7 s: the small bucket keeps up, the big one's 10 are spent.
	for i := 1; i <= 7; i++ {
		if d, _ := a.Decide(ctx, "k", 1, t0.Add(time.Duration(i)*time.Second)); !d.Allowed {
			t.Fatalf("request at %ds refused: %+v", i, d)
		}
	}
	d, _ = a.Decide(ctx, "k", 1, t0.Add(8*time.Second))
	if d.Allowed || d.Limit != 10 || d.RetryAfter < 50*time.Second || d.Reset < d.RetryAfter {
		t.Fatalf("refused by the big bucket: %+v, want its Limit 10 and a wait near a minute", d)
	}
}

// TestAllRemainingAdmits holds Remaining to what it promises, the largest cost admitted at
// now, over random layers spent at random: X-RateLimit-Remaining says n, and exactly n more
// requests are admitted at that instant. A layer with more of its quota left as a share of its
// Limit (30 of 100, where the other holds 2 of 4) bound, and told 30.
func TestAllRemainingAdmits(t *testing.T) {
	rng := rand.New(rand.NewPCG(30, 100))
	for i := range 300 {
		var layers []Limiter
		for range 2 + rng.IntN(3) {
			burst := 1 + rng.IntN(120)
			b := NewTokenBucket(rate.Every(time.Minute), burst)
			if spend := rng.IntN(burst); spend > 0 {
				decide(t, b, "192.0.2.1", spend, t0)
			}
			layers = append(layers, b)
		}
		h := LimitWith(All(layers...), WithLegacyRateLimitFields(true), WithClock(func() time.Time { return t0 }))(ok)
		w := serve(h, "GET", "192.0.2.1:1")
		if w.Code != http.StatusOK {
			t.Fatalf("draw %d: first request %d", i, w.Code)
		}
		remaining, err := strconv.Atoi(w.Header().Get("X-Ratelimit-Remaining"))
		if err != nil {
			t.Fatalf("draw %d: X-RateLimit-Remaining %q", i, w.Header().Get("X-Ratelimit-Remaining"))
		}
		admitted := 0
		for range remaining + 1 {
			if serve(h, "GET", "192.0.2.1:1").Code == http.StatusOK {
				admitted++
			}
		}
		if admitted != remaining {
			t.Fatalf("draw %d: X-RateLimit-Remaining %d, then %d more admitted at that instant", i, remaining, admitted)
		}
	}
}

// TestAllConcurrent decides layered requests from many goroutines on the real clock, each
// layer's parts locked in one order: nothing deadlocks, and no layer admits more than its burst
// + rate × elapsed (plus one for the microsecond of slack).
func TestAllConcurrent(t *testing.T) {
	const (
		clientRate, clientBurst   = 200, 10
		serviceRate, serviceBurst = 500, 20
	)
	client := NewTokenBucket(clientRate, clientBurst)
	service := NewTokenBucket(serviceRate, serviceBurst)
	other := NewTokenBucket(1000, 5)
	// The same buckets in two orders and two Alls, so that a lock order taken from the
	// arguments would deadlock.
	alls := []Limiter{All(client, Shared(service, "svc"), other), All(other, Shared(service, "svc"), client)}
	var perKey [4]atomic.Int64
	var svc atomic.Int64
	start := time.Now()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := 0; time.Since(start) < 300*time.Millisecond; i++ {
				k := (g + i) % 4
				if d, _ := alls[i%2].Decide(context.Background(), fmt.Sprint("c", k), 1, time.Now()); d.Allowed {
					perKey[k].Add(1)
					svc.Add(1)
				}
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("deadlock: the goroutines did not finish")
	}
	elapsed := time.Since(start).Seconds()
	if n, most := svc.Load(), serviceBurst+serviceRate*elapsed+1; float64(n) > most {
		t.Fatalf("the shared layer admitted %d, at most %.0f", n, most)
	}
	for k := range perKey {
		if n, most := perKey[k].Load(), clientBurst+clientRate*elapsed+1; float64(n) > most {
			t.Fatalf("client %d admitted %d, at most %.0f", k, n, most)
		}
	}
}

// TestChargedAfter runs an LLM-style request: admitted while its key is not in debt, charged
// what it used by the handler, refused until the debt is repaid, exactly.
func TestChargedAfter(t *testing.T) {
	tokens := NewTokenBucket(100, 1000) // 100 tokens a second, 1,000 at once
	clk := newClock(t0)
	var used int
	h := LimitWith(All(NewTokenBucket(10, 10), ChargedAfter(tokens)), WithClock(clk.Now))(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !Charge(r, used) && used > 0 {
				t.Error("Charge reported the request is not charged")
			}
		}))
	used = 3000 // 2,000 over the 1,000 held: 20 s of debt
	if w := serve(h, "GET", "192.0.2.1:1"); w.Code != http.StatusOK {
		t.Fatalf("first request: %d", w.Code)
	}
	used = 0
	w := serve(h, "GET", "192.0.2.1:1")
	if wait := wantRefusal(t, w, http.StatusTooManyRequests, t0); wait != 20*time.Second {
		t.Fatalf("in debt of 2,000 tokens at 100/s: Retry-After %v, want 20s", wait)
	}
	clk.Set(t0.Add(20*time.Second - time.Millisecond))
	if w := serve(h, "GET", "192.0.2.1:1"); w.Code != http.StatusTooManyRequests {
		t.Fatalf("admitted before the debt was repaid: %d", w.Code)
	}
	clk.Set(t0.Add(20 * time.Second))
	if w := serve(h, "GET", "192.0.2.1:1"); w.Code != http.StatusOK {
		t.Fatalf("refused once the debt was repaid: %d", w.Code)
	}
	if w := serve(h, "GET", "192.0.2.2:1"); w.Code != http.StatusOK {
		t.Fatalf("another client refused: %d", w.Code)
	}
	r := httptest.NewRequest("GET", "/", nil)
	if Charge(r, 5) {
		t.Fatal("Charge of a request that no such middleware saw reported true")
	}
}

// TestChargeNestedMiddlewares: a request through two middlewares whose limiters are charged
// afterwards (a daily budget for the service, one per route) is charged what its handler
// reports in both; the inner one's charge hid the outer one's, which was never spent.
func TestChargeNestedMiddlewares(t *testing.T) {
	daily := NewTokenBucket(rate.Every(time.Hour), 1000)
	route := NewTokenBucket(rate.Every(time.Second), 1000)
	clk := func() time.Time { return t0 }
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !Charge(r, 600) {
			t.Error("Charge reported the request is not charged")
		}
	})
	h := LimitWith(ChargedAfter(daily), WithClock(clk))(LimitWith(ChargedAfter(route), WithClock(clk))(handler))
	if w := serve(h, "GET", "192.0.2.1:1"); w.Code != http.StatusOK {
		t.Fatalf("first request: %d", w.Code)
	}
	for name, b := range map[string]*TokenBucket{"route": route, "daily": daily} {
		if d := decide(t, b, "192.0.2.1", 0, t0); d.Remaining != 400 {
			t.Errorf("the %s budget holds %d, want 400: the charge did not reach it", name, d.Remaining)
		}
	}
	if w := serve(h, "GET", "192.0.2.1:1"); w.Code != http.StatusOK {
		t.Fatalf("second request, 400 held: %d", w.Code)
	}
	if w := serve(h, "GET", "192.0.2.1:1"); w.Code != http.StatusTooManyRequests {
		t.Fatalf("third request, both budgets in debt: %d", w.Code)
	}
}

// TestChargeAfterHandlerReturned: Charge called once the handler has returned (from a goroutine
// it left behind) reports false, as nothing charges it any more; it reported true and the
// cost was lost.
func TestChargeAfterHandlerReturned(t *testing.T) {
	tokens := NewTokenBucket(rate.Every(time.Minute), 1000)
	late := make(chan *http.Request, 1)
	h := LimitWith(ChargedAfter(tokens), WithClock(func() time.Time { return t0 }))(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !Charge(r, 1) {
				t.Error("Charge while the handler runs reported false")
			}
			late <- r
		}))
	serve(h, "GET", "192.0.2.1:1")
	if Charge(<-late, 600) {
		t.Error("Charge after the handler returned reported true")
	}
	if d := decide(t, tokens, "192.0.2.1", 0, t0); d.Remaining != 999 {
		t.Errorf("the key holds %d tokens, want 999: charged 1 while its handler ran", d.Remaining)
	}
}

// TestChargeAfterHangUp checks that a request whose client hung up is still charged what it
// cost: the charge does not use the request's ended context.
func TestChargeAfterHangUp(t *testing.T) {
	var seen error
	lim := &ctxCharger{TokenBucket: NewTokenBucket(1, 100)}
	h := LimitWith(ChargedAfter(lim), WithErrorHook(func(_ *http.Request, err error) { seen = err }))(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { Charge(r, 50) }))
	ctx, cancel := context.WithCancel(context.Background())
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "192.0.2.1:1"
	h.ServeHTTP(httptest.NewRecorder(), r.WithContext(ctx))
	cancel()
	h.ServeHTTP(httptest.NewRecorder(), r.WithContext(ctx))
	if seen != nil || lim.charged.Load() != 100 {
		t.Fatalf("charged %d (error %v), want 100", lim.charged.Load(), seen)
	}
}

// ctxCharger is a TokenBucket whose Charge fails, as a store's would, on an ended context.
type ctxCharger struct {
	*TokenBucket
	charged atomic.Int64
}

func (c *ctxCharger) Charge(ctx context.Context, key string, cost int, now time.Time) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.charged.Add(int64(cost))
	return c.TokenBucket.Charge(ctx, key, cost, now)
}

// TestAllMixed decides an All of a TokenBucket and a limiter of another kind, one after the
// other: when the second refuses, the first gets back what it spent.
func TestAllMixed(t *testing.T) {
	ctx := context.Background()
	mem := NewTokenBucket(rate.Every(time.Hour), 3)
	other := &otherKind{NewTokenBucket(rate.Every(time.Minute), 1)}
	a := All(mem, other)
	if d, _ := a.Decide(ctx, "k", 1, t0); !d.Allowed {
		t.Fatalf("first request: %+v", d)
	}
	for range 5 {
		if d, _ := a.Decide(ctx, "k", 1, t0); d.Allowed || d.RetryAfter != time.Minute-slack {
			t.Fatalf("%+v, want refused by the other for a minute", d)
		}
	}
	if d, _ := mem.Decide(ctx, "k", 2, t0); !d.Allowed {
		t.Fatalf("the bucket kept what refusals spent: %+v", d)
	}
	failing := All(NewTokenBucket(1, 1), failingLimiter{errors.New("down")})
	if _, err := failing.Decide(ctx, "k", 1, t0); err == nil {
		t.Fatal("an error of one layer was lost")
	}
}

// otherKind is a Charger that does not combine with TokenBuckets, as a store elsewhere.
type otherKind struct{ b *TokenBucket }

func (o *otherKind) Decide(ctx context.Context, key string, cost int, now time.Time) (Decision, error) {
	return o.b.Decide(ctx, key, cost, now)
}

func (o *otherKind) Charge(ctx context.Context, key string, cost int, now time.Time) error {
	return o.b.Charge(ctx, key, cost, now)
}

// TestMiddlewareAllow limits a login by the user name in its body, inside the handler, and
// checks that the refusal is the middleware's own: Retry-After, Date, fields, hooks.
func TestMiddlewareAllow(t *testing.T) {
	clk := newClock(t0)
	var limited []string
	m := NewMiddleware(NewTokenBucket(rate.Every(30*time.Second), 2), WithClock(clk.Now),
		WithRateLimitFields("login"),
		WithLimitedHook(func(_ *http.Request, key string, _ Decision) { limited = append(limited, key) }))
	login := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !m.Allow(w, r, r.FormValue("user")) {
			return
		}
		w.Write([]byte("welcome"))
	})
	post := func(user string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("POST", "/login?user="+user, nil)
		w := httptest.NewRecorder()
		login.ServeHTTP(w, r)
		return w
	}
	post("ann")
	post("ann")
	w := post("ann")
	if wait := wantRefusal(t, w, http.StatusTooManyRequests, t0); wait != 30*time.Second {
		t.Fatalf("Retry-After %v, want 30s", wait)
	}
	if got := w.Header().Get("RateLimit"); got != `"login";r=0;t=30` {
		t.Fatalf("RateLimit %q", got)
	}
	if w := post("bob"); w.Code != http.StatusOK {
		t.Fatalf("another user refused: %d", w.Code)
	}
	if len(limited) != 1 || limited[0] != "ann" {
		t.Fatalf("limited hook saw %q", limited)
	}
}

// TestAllConstruction checks what All, Shared and ChargedAfter refuse to build.
func TestAllConstruction(t *testing.T) {
	plain := limiterFunc(func(context.Context) (Decision, error) { return Decision{Allowed: true}, nil })
	wantPanics(t, map[string]func(){
		"no limiter":        func() { All() },
		"nil limiter":       func() { All(NewTokenBucket(1, 1), nil) },
		"17 layers":         func() { All(make17()...) },
		"two not refunding": func() { All(plain, NewTokenBucket(1, 1), plain) },
		"shared nil":        func() { Shared(nil, "k") },
		"charged plain":     func() { ChargedAfter(plain) },
		"nil middleware":    func() { NewMiddleware(nil) },
		"peek nil":          func() { Peek(nil) },
	})
	All(plain, NewTokenBucket(1, 1)) // one that cannot give back is decided last
}

func make17() []Limiter {
	var ls []Limiter
	for range 17 {
		ls = append(ls, NewTokenBucket(1, 1))
	}
	return ls
}

func BenchmarkAll(b *testing.B) {
	ctx := context.Background()
	one := NewTokenBucket(plentyRate, plentyBurst)
	two := All(NewTokenBucket(plentyRate, plentyBurst), Shared(NewTokenBucket(plentyRate, plentyBurst), "service"))
	for _, bc := range []struct {
		name string
		l    Limiter
	}{{"one", one}, {"two", two}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				if d, _ := bc.l.Decide(ctx, "192.0.2.1", 1, t0.Add(time.Duration(i))); !d.Allowed {
					b.Fatal("refused")
				}
			}
		})
	}
	b.Run("middleware/two", func(b *testing.B) {
		run(b, LimitWith(two, WithKeyFunc(hostKey))(okBench), requests(1), http.StatusOK)
	})
}

// TestPeek checks that Peek admits every request, spends nothing, and reports the quota.
func TestPeek(t *testing.T) {
	ctx := context.Background()
	b := NewTokenBucket(rate.Every(time.Minute), 2)
	p := Peek(b)
	b.Decide(ctx, "k", 2, t0)
	for range 5 {
		if d, err := p.Decide(ctx, "k", 3, t0); err != nil || !d.Allowed || d.Remaining != 0 || d.Limit != 2 || d.Reset != 2*time.Minute {
			t.Fatalf("peek: %+v, %v", d, err)
		}
	}
	if d, err := p.Decide(ctx, "k", 0, t0); err != nil || !d.Allowed || d.Remaining != 0 {
		t.Fatalf("peek at cost 0: %+v, %v", d, err)
	}
	if _, err := p.Decide(ctx, "k", -1, t0); !errors.Is(err, ErrNegativeCost) {
		t.Fatalf("negative cost: %v", err)
	}
	if d, _ := b.Decide(ctx, "k", 1, t0.Add(time.Minute)); !d.Allowed {
		t.Fatal("the peeks spent quota")
	}
}

// TestAllGroupsByKind checks that the TokenBuckets of an All are decided in one step wherever
// they stand among the layers, with the layers of other kinds after one another.
func TestAllGroupsByKind(t *testing.T) {
	a := All(NewTokenBucket(1, 1), &otherKind{NewTokenBucket(1, 1)}, Shared(NewTokenBucket(1, 1), "s"),
		&otherKind{NewTokenBucket(1, 1)}).(*all)
	if len(a.groups) != 3 || a.groups[0].Limiter == nil || len(a.groups[0].layers) != 2 {
		t.Fatalf("groups %+v, want the two buckets in one, then each of the others", a.groups)
	}
	if d, err := a.Decide(context.Background(), "k", 1, t0); err != nil || !d.Allowed {
		t.Fatalf("%+v, %v", d, err)
	}
}

// nonCharger is a Limiter that cannot give back what it spent, a TokenBucket seen through Decide
// alone, which counts the requests it is asked to decide.
type nonCharger struct {
	b     *TokenBucket
	asked int
}

func (n *nonCharger) Decide(ctx context.Context, key string, cost int, now time.Time) (Decision, error) {
	n.asked++
	return n.b.Decide(ctx, key, cost, now)
}

// recordingCharger is a Charger that counts the charges it is asked for, and fails them while
// fail is set.
type recordingCharger struct {
	b       *TokenBucket
	charges int
	fail    error
}

func (c *recordingCharger) Decide(ctx context.Context, key string, cost int, now time.Time) (Decision, error) {
	return c.b.Decide(ctx, key, cost, now)
}

func (c *recordingCharger) Charge(ctx context.Context, key string, cost int, now time.Time) error {
	c.charges++
	if c.fail != nil {
		return c.fail
	}
	return c.b.Charge(ctx, key, cost, now)
}

// failingCharger is a Charger that cannot decide, as a store that is down.
type failingCharger struct{ err error }

func (f failingCharger) Decide(context.Context, string, int, time.Time) (Decision, error) {
	return Decision{}, f.err
}

func (f failingCharger) Charge(context.Context, string, int, time.Time) error { return f.err }

// pairStore is a Combiner that, as a store holding only some of the layers, combines at most two
// of its kind; each Limiter it makes logs the layers it decides.
type pairStore struct {
	name string
	log  *[]string
}

func (s *pairStore) Decide(context.Context, string, int, time.Time) (Decision, error) {
	*s.log = append(*s.log, s.name)
	return Decision{Allowed: true}, nil
}

func (s *pairStore) Charge(context.Context, string, int, time.Time) error { return nil }

func (s *pairStore) Combine(layers []edge.Layer) (Limiter, bool) {
	if len(layers) > 2 {
		return nil, false
	}
	var names []string
	for _, l := range layers {
		p, ok := l.Limiter.(*pairStore)
		if !ok {
			return nil, false
		}
		names = append(names, p.name)
	}
	return &pairStore{name: strings.Join(names, "+"), log: s.log}, true
}

// TestAllSixteenLayers decides with the most layers All takes: admitted while every layer holds
// quota, then refused by the smallest, spending nothing in any.
func TestAllSixteenLayers(t *testing.T) {
	ctx := context.Background()
	var buckets []*TokenBucket
	var ls []Limiter
	for i := range maxLayers {
		b := NewTokenBucket(rate.Every(time.Minute), 2+i)
		buckets, ls = append(buckets, b), append(ls, b)
	}
	a := All(ls...)
	for i := range 2 {
		if d, err := a.Decide(ctx, "k", 1, t0); err != nil || !d.Allowed {
			t.Fatalf("request %d: %+v, %v", i+1, d, err)
		}
	}
	for range 5 {
		if d, err := a.Decide(ctx, "k", 1, t0); err != nil || d.Allowed || d.RetryAfter != time.Minute-slack || d.Limit != 2 {
			t.Fatalf("%+v, %v: want refused by the burst of 2 for a minute", d, err)
		}
	}
	if d := decide(t, buckets[maxLayers-1], "k", maxLayers-1, t0); !d.Allowed {
		t.Fatalf("the largest layer lost quota to refusals: %+v", d)
	}
}

// TestAllDecidesLastWhatCannotGiveBack puts a Limiter that cannot give back what it spent in an
// All, first and last: it is decided last, and not at all once another layer has refused, so it
// never spends on a refused request.
func TestAllDecidesLastWhatCannotGiveBack(t *testing.T) {
	ctx := context.Background()
	for _, first := range []bool{true, false} {
		plain := &nonCharger{b: NewTokenBucket(rate.Every(time.Minute), 5)}
		small := NewTokenBucket(rate.Every(time.Minute), 1)
		a := All(small, plain)
		if first {
			a = All(plain, small)
		}
		if d, _ := a.Decide(ctx, "k", 1, t0); !d.Allowed {
			t.Fatalf("first request: %+v", d)
		}
		for range 3 {
			if d, _ := a.Decide(ctx, "k", 1, t0); d.Allowed || d.RetryAfter != time.Minute-slack {
				t.Fatalf("%+v, want refused by the small bucket for a minute", d)
			}
		}
		if plain.asked != 1 {
			t.Fatalf("given first %v: the limiter that cannot give back was asked %d times, want once", first, plain.asked)
		}
		if d := decide(t, plain.b, "k", 4, t0); !d.Allowed {
			t.Fatalf("given first %v: it spent on refused requests: %+v", first, d)
		}
	}
}

// TestAllStopsAtAnError checks that a layer that cannot decide ends the decision with its error,
// and that the layers after it spend nothing.
func TestAllStopsAtAnError(t *testing.T) {
	b := NewTokenBucket(rate.Every(time.Minute), 1)
	a := All(failingCharger{errTest}, b)
	if d, err := a.Decide(context.Background(), "k", 1, t0); !errors.Is(err, errTest) || d.Allowed {
		t.Fatalf("%+v, %v: want the layer's error", d, err)
	}
	if d := decide(t, b, "k", 1, t0); !d.Allowed {
		t.Fatalf("the layer after the error spent: %+v", d)
	}
}

// TestAllGivesBackEveryGroup decides three layers one after the other (stores of other kinds):
// when the last refuses, both that admitted get back what they spent, every time.
func TestAllGivesBackEveryGroup(t *testing.T) {
	ctx := context.Background()
	big1 := &otherKind{NewTokenBucket(rate.Every(time.Minute), 3)}
	big2 := &otherKind{NewTokenBucket(rate.Every(time.Minute), 3)}
	a := All(big1, big2, &otherKind{NewTokenBucket(rate.Every(time.Minute), 1)})
	if d, _ := a.Decide(ctx, "k", 1, t0); !d.Allowed {
		t.Fatalf("first request: %+v", d)
	}
	for range 3 {
		if d, _ := a.Decide(ctx, "k", 1, t0); d.Allowed {
			t.Fatalf("admitted past the last layer's burst: %+v", d)
		}
	}
	for i, o := range []*otherKind{big1, big2} {
		if d := decide(t, o.b, "k", 2, t0); !d.Allowed {
			t.Fatalf("layer %d kept what refusals spent: %+v", i+1, d)
		}
	}
}

// TestAllCombinesRuns checks how All groups layers of a Combiner: the longest run of one kind
// that its Combine takes, then the rest, each group decided by the Limiter Combine made.
func TestAllCombinesRuns(t *testing.T) {
	var log []string
	s := func(name string) *pairStore { return &pairStore{name: name, log: &log} }
	for _, c := range []struct {
		all  Limiter
		want string
	}{
		{All(s("a"), s("b")), "a+b"},
		{All(s("a"), s("b"), s("c")), "a+b c"},
		{All(s("a"), s("b"), NewTokenBucket(1, 1), s("c"), s("d"), s("e")), "a+b c+d e"},
	} {
		log = nil
		if d, err := c.all.Decide(context.Background(), "k", 1, t0); err != nil || !d.Allowed {
			t.Fatalf("%+v, %v", d, err)
		}
		if got := strings.Join(log, " "); got != c.want {
			t.Fatalf("decided by %q, want %q", got, c.want)
		}
	}
}

// TestAllSameBucketTwice decides an All that names one TokenBucket twice, for one key: the part
// is locked once (twice would deadlock), each request spends in both layers, and a refusal in
// neither.
func TestAllSameBucketTwice(t *testing.T) {
	b := NewTokenBucket(rate.Every(time.Minute), 4)
	a := All(b, b)
	done := make(chan []Decision)
	go func() {
		var ds []Decision
		for range 4 {
			d, _ := a.Decide(context.Background(), "k", 1, t0)
			ds = append(ds, d)
		}
		done <- ds
	}()
	var ds []Decision
	select {
	case ds = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("deadlock: the bucket's part was locked twice")
	}
	for i, d := range ds {
		if want := i < 2; d.Allowed != want {
			t.Fatalf("request %d: %+v, want allowed %v", i+1, d, want)
		}
	}
	if d := decide(t, b, "k", 1, t0.Add(time.Minute)); !d.Allowed {
		t.Fatalf("the refusals spent: %+v", d)
	}
}

// TestAllSameKeyRefusalSpendsNothing holds All's promise for layers on one bucket and key,
// which count together as if reserved one after the other: a refusal gives back what each
// reserved, however many there are and whatever the rate (x/time/rate's cancellation of
// reservations made one after the other on one bucket gives back less than they took when its
// float arithmetic is inexact, as at 100 a minute), and the wait it tells admits. Decide and
// Reserve (a MaxWait shorter than the wait) alike.
func TestAllSameKeyRefusalSpendsNothing(t *testing.T) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(7, 56))
	rates := []rate.Limit{100.0 / 60, 1, 7.0 / 60, 3, 0.5, 1.0 / 3, 10, 1000.0 / 7}
	for i := range 400 {
		limit := rates[rng.IntN(len(rates))]
		burst := 1 + rng.IntN(100)
		held := rng.IntN(burst + 1)         // tokens the key holds before the request
		layers := 2 + rng.IntN(maxLayers-1) // all on the same bucket and key
		cost := 1 + rng.IntN(max(1, burst/layers))
		if layers*cost <= held {
			held = layers*cost - 1
		}
		now := t0.Add(time.Duration(rng.Int64N(int64(time.Hour))))
		b := NewTokenBucket(limit, burst)
		if held < burst {
			if d := decide(t, b, "k", burst-held, now); !d.Allowed {
				t.Fatalf("draw %d: the first spend refused: %+v", i, d)
			}
		}
		ls := make([]Limiter, layers)
		for j := range ls {
			ls[j] = Shared(b, "k")
		}
		a := All(ls...)
		var d Decision
		var err error
		if rng.IntN(2) == 0 {
			d, err = a.Decide(ctx, "client", cost, now)
		} else {
			d, err = a.(edge.Reserver).Reserve(ctx, "client", cost, now, time.Nanosecond)
		}
		if err != nil || d.Allowed {
			t.Fatalf("draw %d: %d layers of cost %d with %d held: %+v, %v; want a refusal", i, layers, cost, held, d, err)
		}
		if q := decide(t, b, "k", 0, now); q.Remaining != held {
			t.Fatalf("draw %d (rate %v, burst %d, %d layers of cost %d): the key holds %d whole tokens after the refusal, want %d",
				i, limit, burst, layers, cost, q.Remaining, held)
		}
		if d.RetryAfter < rate.InfDuration {
			if again, _ := a.Decide(ctx, "client", cost, now.Add(d.RetryAfter)); !again.Allowed {
				t.Fatalf("draw %d: refused again after the wait told, %v: %+v", i, d.RetryAfter, again)
			}
		}
	}
}

// TestAllSameKeyHugeCost: layers on one bucket and key count a request's cost once each, and
// a cost whose sum over them passes the largest int is refused, spending nothing, and leaves
// the key as it was: summed with wrapping, it reserved a negative cost, which filled the key.
func TestAllSameKeyHugeCost(t *testing.T) {
	ctx := context.Background()
	for _, cost := range []int{math.MaxInt/2 + 1, math.MaxInt/3 + 1, math.MaxInt - 1, math.MaxInt} {
		for layers := 2; layers <= 4; layers++ {
			b := NewTokenBucket(rate.Every(time.Minute), 5)
			ls := []Limiter{b}
			for range layers - 1 {
				ls = append(ls, Shared(b, "k"))
			}
			decide(t, b, "k", 5, t0)
			a := All(ls...)
			for _, reserve := range []bool{false, true} {
				var d Decision
				var err error
				if reserve {
					d, err = a.(edge.Reserver).Reserve(ctx, "k", cost, t0, time.Hour)
				} else {
					d, err = a.Decide(ctx, "k", cost, t0)
				}
				if err != nil || d.Allowed || d.RetryAfter != rate.InfDuration {
					t.Fatalf("cost %d in %d layers on one key: %+v, %v; want a refusal that never admits", cost, layers, plain(d), err)
				}
				if q := decide(t, b, "k", 0, t0); q.Remaining != 0 {
					t.Fatalf("cost %d in %d layers on one key: the refusal left the key %d tokens, want 0", cost, layers, q.Remaining)
				}
			}
		}
	}
}

// TestAllSameKeyRemaining: where layers share a bucket and key, a request spends its cost once
// for each of them, so Remaining is what that many of it leaves room for: that many more
// requests of cost 1 are admitted, and no more.
func TestAllSameKeyRemaining(t *testing.T) {
	ctx := context.Background()
	for burst := 1; burst <= 13; burst++ {
		for layers := 2; layers <= 4; layers++ {
			b := NewTokenBucket(rate.Every(time.Minute), burst)
			ls := []Limiter{b}
			for range layers - 1 {
				ls = append(ls, Shared(b, "k"))
			}
			a := All(ls...)
			d, _ := a.Decide(ctx, "k", 1, t0)
			admitted := 0
			for range burst + 1 {
				if e, _ := a.Decide(ctx, "k", 1, t0); e.Allowed {
					admitted++
				}
			}
			if d.Allowed && admitted != d.Remaining || !d.Allowed && d.Remaining != 0 {
				t.Fatalf("burst %d, %d layers on one key: %+v, then %d more admitted", burst, layers, plain(d), admitted)
			}
		}
	}
}

// TestBinding checks Binding against a model over random Decisions: refused if any is, with the
// first of the longest waits; otherwise the first of the layers with the least Remaining,
// among those that have a Limit (the first of all when none has).
func TestBinding(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 9))
	model := func(ds []Decision) Decision {
		best := -1
		for i, d := range ds {
			if !d.Allowed && (best < 0 || d.RetryAfter > ds[best].RetryAfter) {
				best = i
			}
		}
		if best >= 0 {
			return ds[best]
		}
		best = 0
		for i, d := range ds {
			b := ds[best]
			if d.Limit > 0 && (b.Limit == 0 || d.Remaining < b.Remaining) {
				best = i
			}
		}
		return ds[best]
	}
	for range 20_000 {
		ds := make([]Decision, 1+rng.IntN(5))
		for i := range ds {
			d := Decision{Allowed: rng.IntN(3) > 0, Limit: rng.IntN(4), Reset: time.Duration(i)} // Reset tells them apart
			if d.Limit > 0 {
				d.Remaining = rng.IntN(d.Limit + 1)
			}
			if !d.Allowed {
				d.RetryAfter = time.Duration(1+rng.IntN(3)) * time.Second
			}
			ds[i] = d
		}
		got, want := edge.Binding(ds...), model(ds)
		if plain(got) != want {
			t.Fatalf("edge.Binding(%+v) = %+v, want %+v", ds, got, want)
		}
		if layers := got.Layers(); (len(ds) > 1) != (layers != nil) || (layers != nil && !slices.Equal(layers, ds)) {
			t.Fatalf("edge.Binding(%+v) lists the layers %+v", ds, layers)
		}
	}
}

// TestChargedAfterCharges checks what the middleware charges a layer charged afterwards: a cost of
// 1 reported with Charge; nothing, not even a call, when the handler reports nothing; and that a
// failed charge goes to the error hook, once, and a successful one does not (nor, without a hook,
// anywhere). A refusal by another layer gives such a layer nothing back: it spent nothing.
func TestChargedAfterCharges(t *testing.T) {
	rc := &recordingCharger{b: NewTokenBucket(rate.Every(time.Minute), 100)}
	report := 0
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if report > 0 && !Charge(r, report) {
			t.Errorf("Charge(r, %d) reported the request is not charged", report)
		}
	})
	var hooked []error
	h := LimitWith(ChargedAfter(rc), WithClock(func() time.Time { return t0 }),
		WithErrorHook(func(_ *http.Request, err error) { hooked = append(hooked, err) }))(handler)
	report = 1
	serve(h, "GET", "192.0.2.1:1")
	if d := decide(t, rc.b, "192.0.2.1", 0, t0); rc.charges != 1 || d.Remaining != 99 || len(hooked) != 0 {
		t.Fatalf("a cost of 1: %d charges, Remaining %d, hook %v", rc.charges, d.Remaining, hooked)
	}
	report = 0
	serve(h, "GET", "192.0.2.1:1")
	if rc.charges != 1 {
		t.Fatalf("a request that reported nothing was charged: %d charges", rc.charges)
	}
	rc.fail, report = errTest, 2
	serve(h, "GET", "192.0.2.1:1")
	if len(hooked) != 1 || !errors.Is(hooked[0], errTest) {
		t.Fatalf("a failed charge reached the hook as %v", hooked)
	}
	serve(LimitWith(ChargedAfter(rc))(handler), "GET", "192.0.2.1:1") // no hook: no panic

	rc = &recordingCharger{b: NewTokenBucket(rate.Every(time.Minute), 100)}
	a := All(ChargedAfter(rc), NewTokenBucket(rate.Every(time.Minute), 1))
	for i := range 3 {
		if d, _ := a.Decide(context.Background(), "k", 1, t0); d.Allowed != (i == 0) {
			t.Fatalf("request %d: %+v", i+1, d)
		}
	}
	if rc.charges != 0 {
		t.Fatalf("refusals gave back %d times what a layer charged afterwards never spent", rc.charges)
	}
}

// TestAllOfManyLayers decides Alls of more layers than allow takes (the long way of decide, by
// Decide with the quota and as the middleware does without), an unlimited layer first and one
// bucket named twice: each request spends 2 in that bucket, a refusal spends nothing, the wait
// is exact, and the quota is the binding layer's, whose Remaining counts requests that spend 2
// (the 2 tokens left after the first are room for one).
func TestAllOfManyLayers(t *testing.T) {
	for _, quota := range []bool{true} {
		b, other := NewTokenBucket(rate.Every(time.Minute), 4), NewTokenBucket(rate.Every(time.Minute), 10)
		inf := NewTokenBucket(rate.Inf, 1)
		a := All(inf, b, inf, b, other, Shared(other, "s"))
		decide := func(now time.Time) Decision {
			d, err := a.Decide(context.Background(), "k", 1, now)
			if err != nil {
				t.Fatal(err)
			}
			return d
		}
		pol := Policy{Limit: rate.Every(time.Minute), Burst: 4}
		for i, want := range []Decision{
			{Allowed: true, Limit: 4, Remaining: 1, Reset: 2 * time.Minute, Policy: pol},
			{Allowed: true, Limit: 4, Remaining: 0, Reset: 4 * time.Minute, Policy: pol},
			{RetryAfter: 2*time.Minute - slack, Limit: 4, Reset: 4 * time.Minute, Policy: pol},
		} {
			d := decide(t0)
			if plain(d) != want || len(d.Layers()) != 6 {
				t.Fatalf("quota %v, request %d: %+v, want %+v", quota, i+1, d, want)
			}
		}
		// One token back in b, where each request needs two.
		if d := decide(t0.Add(time.Minute)); d.Allowed || d.RetryAfter != time.Minute-slack {
			t.Fatalf("quota %v, with one token of the two: %+v", quota, d)
		}
		if d := decide(t0.Add(2 * time.Minute)); !d.Allowed {
			t.Fatalf("quota %v, on time: %+v", quota, d)
		}
	}
}

// TestAllRecordsItsInstant checks that each part an All decides in records the instant it
// decided at, the latest any of them had seen: a bucket spent at that instant and then asked
// about alone at the request's own, earlier, instant would move its clock back and credit the
// time between twice.
func TestAllRecordsItsInstant(t *testing.T) {
	ahead, b := NewTokenBucket(rate.Every(time.Minute), 1), NewTokenBucket(rate.Every(time.Minute), 1)
	seen := t0.Add(time.Second)
	decide(t, ahead, "k", 0, seen) // its part has seen t0 + 1 s
	if d, err := All(ahead, b).Decide(context.Background(), "k", 1, t0); err != nil || !d.Allowed || d.Reset != time.Minute+time.Second {
		t.Fatalf("%+v, %v: want admitted, full again a minute after the instant decided at", d, err)
	}
	if d := decide(t, b, "k", 1, t0); d.Allowed || d.RetryAfter != time.Minute+time.Second-slack {
		t.Fatalf("%+v: want refused until a minute after the instant the All decided at", d)
	}
	if d := decide(t, b, "k", 1, seen.Add(time.Minute-time.Millisecond)); d.Allowed {
		t.Fatalf("admitted a millisecond before the token spent at %v is back: %+v", seen, d)
	}
}

// TestAllDecidesAtTheLatestInstant decides an All whose layers' parts have seen different
// instants, an unlimited layer and a bucket named twice among them: every layer is decided at the
// latest instant any of their parts has seen, under the locks of all of them, and the wait is
// exact from the request's own instant.
func TestAllDecidesAtTheLatestInstant(t *testing.T) {
	b := NewTokenBucket(10, 5)
	late := NewTokenBucket(1, 1)
	decide(t, late, "k", 1, t0.Add(time.Second)) // its part has seen t0 + 1 s; a token is due at 2 s
	a := All(NewTokenBucket(rate.Inf, 1), b, b, late)
	d, err := a.Decide(context.Background(), "k", 1, t0)
	if err != nil || d.Allowed || d.RetryAfter != 2*time.Second-slack {
		t.Fatalf("%+v, %v: want refused by the last layer, until 2 s from the request's instant", d, err)
	}
	if d := decide(t, b, "k", 5, t0.Add(time.Second)); !d.Allowed {
		t.Fatalf("the refusal spent in the bucket named twice: %+v", d)
	}
}

// TestAllTableFull decides an All in which one bucket's table has no room for a new key: the
// refusal's wait is still the longest of all the layers', and nothing is spent.
func TestAllTableFull(t *testing.T) {
	full := NewTokenBucket(rate.Every(10*time.Second), 1, WithMaxMemory(16<<10)) // one key a part
	ks := keysInPart(full, 0, 2, 10, "k")
	decide(t, full, ks[0], 1, t0) // holds the part for 10 s
	minute := NewTokenBucket(rate.Every(time.Minute), 2)
	decide(t, minute, ks[1], 2, t0)
	d, err := All(full, minute).Decide(context.Background(), ks[1], 1, t0)
	if err != nil || d.Allowed || d.RetryAfter != time.Minute-slack {
		t.Fatalf("%+v, %v: want refused for the minute of the second layer, the longer wait", d, err)
	}
	if d, err := All(full, NewTokenBucket(1, 1)).Decide(context.Background(), ks[1], 1, t0); err != nil || d.Allowed || d.RetryAfter != 10*time.Second || d.Reset != d.RetryAfter {
		t.Fatalf("%+v, %v: want refused until the key held has wholly refilled", d, err)
	}
}

// TestAllKeepsItsBucketsAtTheBound decides a request in two layers of one TokenBucket whose keys
// fall in one part, at its bound, where the only key that could make room is the first layer's:
// making room for the second layer's new key must neither drop the bucket the first layer holds
// nor count on it. Both layers would then spend one bucket, and the first key's spending would
// be lost. The request is refused until another key refills, and every bucket is as it was.
func TestAllKeepsItsBucketsAtTheBound(t *testing.T) {
	for _, layers := range []int{2, 5} {
		for _, quota := range []bool{true} {
			b := NewTokenBucket(rate.Every(time.Hour), 2, WithMaxMemory(partCount*(2*keyCost(10)+keyCost(10)/2)))
			ks := keysInPart(b, 0, 3, 10, "k")
			client, other, service := ks[0], ks[1], ks[2]
			decide(t, b, client, 1, t0)                           // full again an hour on
			decide(t, b, other, 2, t0.Add(time.Hour+time.Second)) // full two hours after that
			now := t0.Add(time.Hour + 2*time.Second)
			ls := []Limiter{b}
			for range layers - 2 {
				ls = append(ls, NewTokenBucket(1, 1))
			}
			ls = append(ls, Shared(b, service))
			d, _ := All(ls...).Decide(context.Background(), client, 1, now)
			if want := 2*time.Hour - time.Second; d.Allowed || d.RetryAfter != want {
				t.Fatalf("%d layers, quota %v: %+v; want refused for %v, until the other key refills", layers, quota, d, want)
			}
			p := &b.parts[0]
			checkPart(t, p)
			lim, ok := p.keys[client]
			if !ok || lim.TokensAt(now) != 2 {
				t.Fatalf("%d layers, quota %v: the first layer's key is held %v: want held, its bucket full", layers, quota, ok)
			}
			if _, ok := p.keys[service]; ok {
				t.Fatalf("%d layers, quota %v: the second layer's key was added, in place of the first's", layers, quota)
			}
			// Kept for that decision only, which spent its bucket and gave it back, or only
			// looked: a new key of its own takes the full bucket's place.
			if d := decide(t, b, service, 1, now); !d.Allowed {
				t.Fatalf("%d layers, quota %v: then a key alone: %+v, want admitted in the first key's place", layers, quota, d)
			}
			checkPart(t, p)
		}
	}
	// A part that holds one key can never hold both: refused, with no Retry-After.
	b := NewTokenBucket(rate.Every(time.Hour), 2, WithMaxMemory(16<<10))
	ks := keysInPart(b, 0, 2, 10, "k")
	decide(t, b, ks[0], 1, t0)
	d, err := All(b, Shared(b, ks[1])).Decide(context.Background(), ks[0], 1, t0.Add(time.Hour))
	if err != nil || d.Allowed || d.RetryAfter != rate.InfDuration {
		t.Fatalf("one key a part: %+v, %v; want refused, never to be admitted", d, err)
	}
	checkPart(t, &b.parts[0])
}

// TestCombineLayers checks what a TokenBucket combines: up to the 16 layers All decides, and a
// Decision that lists its layers only when there are several.
func TestCombineLayers(t *testing.T) {
	b := NewTokenBucket(1, 10)
	layers := make([]edge.Layer, 17)
	for i := range layers {
		layers[i] = edge.Layer{Limiter: b}
	}
	if _, ok := b.Combine(layers[:16]); !ok {
		t.Fatal("16 layers not combined")
	}
	if _, ok := b.Combine(layers); ok {
		t.Fatal("17 layers combined")
	}
	one, _ := b.Combine(layers[:1])
	if d, _ := one.Decide(context.Background(), "k", 1, t0); !d.Allowed || d.Layers() != nil {
		t.Fatalf("one layer: %+v, layers %v, want admitted with no list", d, d.Layers())
	}
	two, _ := b.Combine(layers[:2])
	if d, _ := two.Decide(context.Background(), "k", 1, t0); !d.Allowed || len(d.Layers()) != 2 {
		t.Fatalf("two layers: %+v, want admitted, listing both", d)
	}
	five, _ := b.Combine(layers[:5])
	// 2 tokens are left of 10, and a request spends 5: Remaining, the largest cost admitted, is 0.
	if d, _ := five.Decide(context.Background(), "k", 1, t0); !d.Allowed || len(d.Layers()) != 5 || d.Remaining != 0 {
		t.Fatalf("five layers of one bucket: %+v, want admitted, listing five, with room for none more", d)
	}
}

// TestAllLayersOfAGroup decides two TokenBuckets, which All decides as one group whose Decision
// lists both, and a limiter of another kind after them: the Decision lists the three, in order.
func TestAllLayersOfAGroup(t *testing.T) {
	d, err := All(NewTokenBucket(1, 1), NewTokenBucket(1, 2), &otherKind{NewTokenBucket(1, 3)}).Decide(context.Background(), "k", 1, t0)
	if err != nil || !d.Allowed {
		t.Fatalf("%+v, %v", d, err)
	}
	var limits []int
	for _, l := range d.Layers() {
		limits = append(limits, l.Limit)
	}
	if !slices.Equal(limits, []int{1, 2, 3}) {
		t.Fatalf("the layers' limits %v, want [1 2 3]", limits)
	}
}

// TestCompositeUnwrap checks that what All, Shared, ChargedAfter and Peek return says through
// its type that it decides through others, and which, and that a store does not.
func TestCompositeUnwrap(t *testing.T) {
	a, b := NewTokenBucket(1, 1), NewTokenBucket(2, 2)
	g, _ := a.Combine([]edge.Layer{{Limiter: a}, {Limiter: b}})
	for name, tt := range map[string]struct {
		l    Limiter
		want []Limiter
	}{
		"All":          {All(a, Shared(b, "s")), []Limiter{a, b}},
		"Shared":       {Shared(a, "s"), []Limiter{a}},
		"ChargedAfter": {ChargedAfter(b), []Limiter{b}},
		"Peek":         {Peek(a), []Limiter{a}},
		"Combine":      {g, []Limiter{a, b}},
	} {
		c, ok := tt.l.(edge.Composite)
		if !ok {
			t.Fatalf("%s is not a edge.Composite", name)
		}
		if got := c.Unwrap(); !slices.Equal(got, tt.want) {
			t.Errorf("%s: Unwrap() = %v, want %v", name, got, tt.want)
		}
	}
	if _, ok := Limiter(a).(edge.Composite); ok {
		t.Error("a TokenBucket is a edge.Composite")
	}
}

// admitsLate is a Limiter that breaks the contract: it admits every request with a wait, from
// Decide, where only Reserve may give a place; it can give back.
type admitsLate struct{}

func (admitsLate) Decide(context.Context, string, int, time.Time) (Decision, error) {
	return Decision{Allowed: true, RetryAfter: time.Second, Limit: 1}, nil
}

func (admitsLate) Charge(context.Context, string, int, time.Time) error { return nil }

// TestAllLimiterAdmitsWithAWait: an All of such a Limiter and a bucket that refuses, asked to
// decide or to reserve within less than the bucket's wait, returns, refused with the bucket's
// wait, rather than asking again and again.
func TestAllLimiterAdmitsWithAWait(t *testing.T) {
	l := All(admitsLate{}, NewTokenBucket(1, 1)).(*all)
	ctx := context.Background()
	l.Decide(ctx, "k", 1, t0)
	for _, maxWait := range []time.Duration{0, time.Millisecond} {
		d, err := l.Reserve(ctx, "k", 1, t0, maxWait)
		if err != nil || d.Allowed || d.RetryAfter != time.Second-slack {
			t.Fatalf("maxWait %v: %+v, %v; want refused with the bucket's wait", maxWait, d, err)
		}
	}
}
