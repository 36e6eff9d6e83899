package retryafter

import (
	"container/heap"
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
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/retryafter/retryafter/internal/header"
)

// returnEvent is a client's request at an instant, in the simulation of TestSpreadShared.
type returnEvent struct {
	at     time.Time
	client int
	retry  bool
}

type returnEvents []returnEvent

func (e returnEvents) Len() int           { return len(e) }
func (e returnEvents) Less(i, j int) bool { return e[i].at.Before(e[j].at) }
func (e returnEvents) Swap(i, j int)      { e[i], e[j] = e[j], e[i] }
func (e *returnEvents) Push(x any)        { *e = append(*e, x.(returnEvent)) }
func (e *returnEvents) Pop() any {
	old := *e
	x := old[len(old)-1]
	*e = old[:len(old)-1]
	return x
}

// TestSpreadShared is the promise of Spread as a property: a herd of clients at a Shared token
// bucket, each retrying once, exactly Retry-After (as the middleware rounds it) after its
// refusal. Every client is told no less than the bucket's own wait; when the herd comes at one
// instant, every retry is admitted; and the retries come back, in each second, at most at the
// bucket's rate and burst.
func TestSpreadShared(t *testing.T) {
	rng := rand.New(rand.NewPCG(35, 2))
	for trial := range 60 {
		limit := rate.Limit([]float64{1, 5, 10, 40, 100}[trial%5])
		burst := []int{1, int(limit), 2 * int(limit)}[rng.IntN(3)]
		bucket := NewTokenBucket(limit, burst)
		l := Spread(Shared(bucket, "service"), limit, burst)
		clients := 50 + rng.IntN(400)
		start := t0.Add(time.Duration(rng.Int64N(int64(time.Second))))
		herd := time.Duration(0) // how long the herd takes to arrive: all at once, or over 3 s
		if trial%3 != 0 {
			herd = time.Duration(rng.Int64N(int64(3 * time.Second)))
		}
		var q returnEvents
		for i := range clients {
			heap.Push(&q, returnEvent{at: start.Add(time.Duration(rng.Int64N(int64(herd) + 1))), client: i})
		}
		perSecond := map[int64]int{}
		refusedYet := false
		stolen, refusedRetries := 0, 0 // new requests admitted after the first refusal; retries refused
		for q.Len() > 0 {
			e := heap.Pop(&q).(returnEvent)
			d, err := l.Decide(context.Background(), "any", 1, e.at)
			if err != nil {
				t.Fatal(err)
			}
			if e.retry {
				perSecond[e.at.Unix()]++
				if !d.Allowed {
					refusedRetries++
				}
				continue
			}
			if d.Allowed {
				if refusedYet {
					stolen++
				}
				continue
			}
			refusedYet = true
			own, _ := bucket.Decide(context.Background(), "service", 1, e.at)
			if d.RetryAfter < own.RetryAfter || d.RetryAfter%time.Second != 0 {
				t.Fatalf("told %v, where the bucket's own wait is %v", d.RetryAfter, own.RetryAfter)
			}
			wait := time.Duration(header.DelaySeconds(d.RetryAfter)) * time.Second
			heap.Push(&q, returnEvent{at: e.at.Add(wait), client: e.client, retry: true})
		}
		// A herd refused at one instant: every client that waits as told is admitted. (Over
		// several seconds, new requests spend the quota meanwhile, and clients refused at
		// different fractions of a second may meet: see Spread.)
		if herd == 0 && (refusedRetries > 0 || stolen > 0) {
			t.Fatalf("limit %v burst %d, a herd at one instant: %d clients that waited as told were refused", limit, burst, refusedRetries)
		}
		for sec, n := range perSecond {
			if float64(n) > math.Ceil(float64(limit)) || n > burst {
				t.Fatalf("limit %v burst %d: %d retries in second %d", limit, burst, n, sec)
			}
		}
	}
}

// TestSpreadPassesThrough: what Spread does not spread it leaves as it was.
func TestSpreadPassesThrough(t *testing.T) {
	ctx := context.Background()
	never := Spread(Shared(NewTokenBucket(0, 1), "k"), 1, 1)
	never.Decide(ctx, "a", 1, t0)
	if d, _ := never.Decide(ctx, "a", 1, t0); d.Allowed || d.RetryAfter != rate.InfDuration {
		t.Errorf("a request never admitted: %+v, want RetryAfter InfDuration", d)
	}
	// Without a rate of its own or in the Policy, the wait is the limiter's.
	noRate := limiterFunc(func(context.Context) (Decision, error) {
		return Decision{RetryAfter: 1500*time.Millisecond - time.Microsecond, Limit: 1}, nil
	})
	s := Spread(noRate, 0, 0)
	for range 3 {
		if d, _ := s.Decide(ctx, "a", 1, t0); d.RetryAfter != 1500*time.Millisecond-time.Microsecond {
			t.Errorf("no rate: RetryAfter %v, want the limiter's 1.499999s", d.RetryAfter)
		}
	}
	// A TokenBucket names its rate in the Policy: its refusals are spread at it.
	b := NewTokenBucket(rate.Every(1500*time.Millisecond), 1)
	bs := Spread(b, 0, 0)
	bs.Decide(ctx, "a", 1, t0)
	if d, _ := bs.Decide(ctx, "a", 1, t0); d.Allowed || d.RetryAfter < 1500*time.Millisecond-time.Microsecond {
		t.Errorf("a bucket's refusal: %+v, want at least its own wait", d)
	}
	// With a rate in the Policy, it is spread at that rate.
	pol := limiterFunc(func(context.Context) (Decision, error) {
		return Decision{RetryAfter: 100 * time.Millisecond, Policy: Policy{Limit: 1, Burst: 1}}, nil
	})
	p := Spread(pol, 0, 0)
	for i := range 3 {
		if d, _ := p.Decide(ctx, "a", 1, t0); d.RetryAfter != time.Duration(i+1)*time.Second {
			t.Errorf("refusal %d at the Policy's 1/s: %v, want %ds", i, d.RetryAfter, i+1)
		}
	}
	// A cost of n counts for n.
	p = Spread(pol, 4, 4)
	for i, want := range []time.Duration{1, 1, 2, 2} {
		if d, _ := p.Decide(ctx, "a", 2, t0); d.RetryAfter != want*time.Second {
			t.Errorf("refusal %d of cost 2 at 4/s: %v, want %v", i, d.RetryAfter, want*time.Second)
		}
	}
	// And against the burst: 4 at once is two of cost 2, though 10/s is 5 of them a second.
	p = Spread(pol, 10, 4)
	for i, want := range []time.Duration{1, 1, 2, 2} {
		if d, _ := p.Decide(ctx, "a", 2, t0); d.RetryAfter != want*time.Second {
			t.Errorf("refusal %d of cost 2 at 10/s, burst 4: %v, want %v", i, d.RetryAfter, want*time.Second)
		}
	}
	// A burst of 0 bounds nothing at one instant: the rate alone spreads.
	p = Spread(pol, 3, 0)
	for i, want := range []time.Duration{1, 1, 1, 2} {
		if d, _ := p.Decide(ctx, "a", 1, t0); d.RetryAfter != want*time.Second {
			t.Errorf("refusal %d at 3/s, burst 0: %v, want %v", i, d.RetryAfter, want*time.Second)
		}
	}
	p = Spread(pol, 4, 0)
	for i, want := range []time.Duration{1, 1, 2, 2} {
		if d, _ := p.Decide(ctx, "a", 2, t0); d.RetryAfter != want*time.Second {
			t.Errorf("refusal %d of cost 2 at 4/s, burst 0: %v, want %v", i, d.RetryAfter, want*time.Second)
		}
	}
	// Errors, whatever Decision comes with them, and refusals without a wait pass unchanged.
	boom := errors.New("boom")
	late := Decision{RetryAfter: time.Second, Policy: Policy{Limit: 1, Burst: 1}}
	e := Spread(limiterFunc(func(context.Context) (Decision, error) { return late, boom }), 1, 1)
	if d, err := e.Decide(ctx, "a", 1, t0); err != boom || d != late {
		t.Errorf("an error with a wait: %+v, %v; want the limiter's", d, err)
	}
	noWait := Decision{Policy: Policy{Limit: 1, Burst: 1}}
	z := Spread(limiterFunc(func(context.Context) (Decision, error) { return noWait, nil }), 1, 1)
	if d, err := z.Decide(ctx, "a", 1, t0); err != nil || d != noWait {
		t.Errorf("a refusal without a wait: %+v, %v; want it unchanged", d, err)
	}
	// A Charger stays one.
	if _, ok := Spread(b, 1, 1).(Charger); !ok {
		t.Error("Spread of a TokenBucket is not a Charger")
	}
	if err := Spread(b, 1, 1).(Charger).Charge(ctx, "c", 1, t0); err != nil {
		t.Error(err)
	}
	if d, _ := b.Decide(ctx, "c", 1, t0); d.Allowed {
		t.Error("Charge through Spread did not charge the bucket")
	}
}

// TestSpreadThroughMiddleware: All of a per-client limit and a spread Shared one, behind the
// middleware, tells the clients the Shared layer refuses different seconds, and each that
// waits what the bundled parser reads and retries is admitted.
func TestSpreadThroughMiddleware(t *testing.T) {
	clk := newClock(t0)
	service := NewTokenBucket(2, 2)
	h := LimitWith(All(NewTokenBucket(10, 10), Spread(Shared(service, "all"), 2, 2)), WithClock(clk.Now))(ok)
	var waits []time.Duration
	var refused []string
	for i := range 8 {
		client := "192.0.2." + string(rune('1'+i)) + ":1"
		w := serve(h, "GET", client)
		if w.Code == http.StatusOK {
			continue
		}
		waits = append(waits, wantRefusal(t, w, http.StatusTooManyRequests, t0))
		refused = append(refused, client)
	}
	want := []time.Duration{1, 1, 2, 2, 3, 3}
	if len(waits) != len(want) {
		t.Fatalf("waits %v, want %v seconds", waits, want)
	}
	for i := range want {
		if waits[i] != want[i]*time.Second {
			t.Fatalf("waits %v, want %v seconds", waits, want)
		}
	}
	// Each waits exactly what it was told, on the clock, and is admitted.
	for i, client := range refused {
		clk.Set(t0.Add(waits[i]))
		if w := serve(h, "GET", client); w.Code != http.StatusOK {
			t.Errorf("%s, told %v, refused again after waiting it: %d, Retry-After %s", client, waits[i], w.Code, w.Header().Get("Retry-After"))
		}
	}
}

// TestMaintenanceReturnRate is the promise for a Maintenance as a property: clients refused at
// random instants of the window, in either form, are told never to come back before the end,
// and come back, in each second after it, at most ReturnRate of them.
func TestMaintenanceReturnRate(t *testing.T) {
	rng := rand.New(rand.NewPCG(35, 3))
	for trial := range 40 {
		clk := newClock(t0)
		m := &Maintenance{ReturnRate: rate.Limit([]float64{1, 3.5, 20, 100}[trial%4]), HTTPDate: trial%2 == 1, Now: clk.Now}
		end := t0.Add(time.Duration(rng.Int64N(int64(10 * time.Minute))))
		m.Start(end)
		h := m.Handler(ok)
		perSecond := map[int64]int{}
		at := t0
		for range 500 {
			at = at.Add(time.Duration(rng.Int64N(int64(time.Second))))
			if !at.Before(end) {
				break
			}
			clk.Set(at)
			w := serve(h, "GET", "192.0.2.1:1")
			wait := wantRefusal503(t, w, at, m.HTTPDate)
			back := at.Add(wait)
			if back.Before(end) {
				t.Fatalf("refused at %v, told to come back at %v, before the end %v", at, back, end)
			}
			perSecond[back.Unix()]++
		}
		for sec, n := range perSecond {
			if float64(n) > math.Ceil(float64(m.ReturnRate)) {
				t.Fatalf("ReturnRate %v: %d clients told to come back in second %d", m.ReturnRate, n, sec)
			}
		}
	}
}

// wantRefusal503 checks a 503 of a Maintenance and returns the wait it states, measured as the
// bundled parser does (a date against Date).
func wantRefusal503(t *testing.T, w *httptest.ResponseRecorder, now time.Time, date bool) time.Duration {
	t.Helper()
	if !date {
		return wantRefusal(t, w, http.StatusServiceUnavailable, now)
	}
	if w.Code != http.StatusServiceUnavailable {
		t.Fatalf("status %d, want 503", w.Code)
	}
	wait, ok := ParseRetryAfter(w.Header(), now)
	if !ok {
		t.Fatalf("Retry-After %q does not parse", w.Header().Get("Retry-After"))
	}
	return wait
}

// TestWrappersKeepCharges stacks the package's wrappers (Spread, Shared, All; all but Peek,
// which charges nothing) at random, in every order, around a layer charged afterwards, the
// ChargedAfter inside Spread or outside it: the middleware still charges what the handler
// reports, so a budget that holds one request's cost admits one of 10, and Charge reports the
// request charged. Until this was so, Spread hid the deferred layer: 10 of 10 admitted, none
// charged, and ChargedAfter(Spread(...)) panicked. What cannot be charged afterwards (an All)
// panics at construction, saying why.
func TestWrappersKeepCharges(t *testing.T) {
	rng := rand.New(rand.NewPCG(54, 3))
	wrap := func(l Limiter, i int) (Limiter, string) {
		switch i {
		case 0:
			return Spread(l, 0, 0), "Spread"
		case 1:
			return Spread(l, 1, 1), "Spread1"
		case 2:
			return Shared(l, "svc"), "Shared"
		case 3:
			return All(NewTokenBucket(rate.Every(time.Millisecond), 100), l), "All(per,"
		}
		return All(l), "All"
	}
	for range 200 {
		tokens := NewTokenBucket(rate.Every(time.Hour), 10)
		var l Limiter = Shared(tokens, "all")
		name := "Shared(tokens)"
		n := rng.IntN(4)
		deferredAt := rng.IntN(n + 1) // how many wrappers go inside ChargedAfter
		for i := range n + 1 {
			if i == deferredAt {
				l, name = ChargedAfter(l), "ChargedAfter("+name+")"
				if i == n {
					break
				}
			}
			if i == n {
				break
			}
			var w string
			k := rng.IntN(5)
			if i < deferredAt {
				k = rng.IntN(3) // inside ChargedAfter: what is a Charger stays one
			}
			l, w = wrap(l, k)
			name = w + "(" + name + ")"
		}
		var charged int
		h := LimitWith(l, WithClock(func() time.Time { return t0 }))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if Charge(r, 20) {
				charged++
			}
		}))
		admitted := 0
		for range 10 {
			if serve(h, "GET", "192.0.2.1:1").Code == http.StatusOK {
				admitted++
			}
		}
		if admitted != 1 || charged != 1 {
			t.Fatalf("%s: %d of 10 admitted, %d charged; want 1 and 1", name, admitted, charged)
		}
	}
	wantPanics(t, map[string]func(){
		"ChargedAfter(Spread(All))": func() { ChargedAfter(Spread(All(NewTokenBucket(1, 1)), 1, 1)) },
		"ChargedAfter(All)":         func() { ChargedAfter(All(NewTokenBucket(1, 1), NewTokenBucket(1, 1))) },
	})
}

// refuser is a Limiter that refuses every request with the wait it holds.
type refuser struct{ wait time.Duration }

func (f *refuser) Decide(context.Context, string, int, time.Time) (Decision, error) {
	return Decision{RetryAfter: f.wait}, nil
}

// TestReturnsFollowTheClock books refused clients, about one a second, through Spread at 2 a
// second, on a clock without monotonic readings that steps back and forward at random by a
// second to ten years: each is told a whole number of seconds, never less than its own wait,
// and at most a few seconds more, however the clock stepped. Until this was so, the schedule
// never moved its first second back, and every wait after a step back grew by the step.
func TestReturnsFollowTheClock(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 54))
	ctx := context.Background()
	for trial := range 40 {
		f := &refuser{}
		l := Spread(f, 2, 0)
		real, offset := time.Duration(0), time.Duration(0)
		var steps []time.Duration
		for range 8 {
			for range 10 + rng.IntN(40) {
				real += time.Duration(500+rng.IntN(1000)) * time.Millisecond
				f.wait = time.Duration(rng.Int64N(int64(5 * time.Second)))
				d, _ := l.Decide(ctx, "k", 1, t0.Add(real+offset))
				told := d.RetryAfter
				if told%time.Second != 0 || told < max(f.wait, time.Second) || told > f.wait+6*time.Second {
					t.Fatalf("trial %d, after steps %v: wait %v told %v, want whole seconds from it to 6 s more", trial, steps, f.wait, told)
				}
			}
			step := logUniformStep(rng)
			offset += step
			steps = append(steps, step)
		}
	}
}

// TestMaintenanceAfterAStepBack sets the clock of a Maintenance with a ReturnRate back a day:
// its refusals, its end 10 minutes away on the clock as it now reads, are told 600 s, not the
// day (package overload's TestConcurrencyAfterAStepBack does as much for a Concurrency).
func TestMaintenanceAfterAStepBack(t *testing.T) {
	clk := newClock(t0)
	m := &Maintenance{ReturnRate: 10, Now: clk.Now}
	h := m.Handler(ok)
	m.Start(t0.Add(10 * time.Minute))
	serve(h, "GET", "192.0.2.1:1")
	clk.Set(t0.Add(-24 * time.Hour))
	m.Start(clk.Now().Add(10 * time.Minute))
	if got := wantRefusal(t, serve(h, "GET", "192.0.2.1:1"), http.StatusServiceUnavailable, clk.Now()); got < 10*time.Minute || got > 10*time.Minute+time.Second {
		t.Fatalf("a Maintenance ending 10 minutes on, its clock stepped back a day: Retry-After %v, want 600s", got)
	}
}

// rateLimitT returns the t of each item of a RateLimit field, by the item's name.
func rateLimitT(t *testing.T, field string) map[string]int64 {
	t.Helper()
	ts := map[string]int64{}
	for _, item := range strings.Split(field, ", ") {
		name, params, _ := strings.Cut(item, ";")
		for _, p := range strings.Split(params, ";") {
			if v, ok := strings.CutPrefix(p, "t="); ok {
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					t.Fatalf("RateLimit %q: %v", field, err)
				}
				ts[name] = n
			}
		}
	}
	return ts
}

// TestSpreadFieldsAgree sends bursts of requests from many clients through Spread around an All,
// and through an All around a Spread, with the RateLimit fields on: on every 429 the t of the
// layer that refused, the largest, equals the Retry-After, however far Spread put it. Until
// this was so, Spread(All(...)) told Retry-After 2, 3, 4, 5 and t=1 to every client, who came
// back in the same second.
func TestSpreadFieldsAgree(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 54))
	refused := 0
	for trial := range 20 {
		clk := newClock(t0)
		service := NewTokenBucket(2, 2)
		var l Limiter
		switch trial % 3 {
		case 0:
			l = Spread(All(NewTokenBucket(10, 10), Shared(service, "all")), 0, 0)
		case 1:
			l = Spread(All(NewTokenBucket(10, 10), Shared(service, "all")), 2, 2)
		default:
			l = All(NewTokenBucket(10, 10), Spread(Shared(service, "all"), 2, 2))
		}
		h := LimitWith(l, WithClock(clk.Now), WithRateLimitFields(""))(ok)
		for i := range 5 + rng.IntN(30) {
			clk.Set(t0.Add(time.Duration(rng.Int64N(int64(time.Second)))))
			w := serve(h, "GET", fmt.Sprintf("192.0.2.%d:1", i+1))
			if w.Code != http.StatusTooManyRequests {
				continue
			}
			refused++
			wait := wantRefusal(t, w, http.StatusTooManyRequests, clk.Now())
			var most int64
			for _, v := range rateLimitT(t, w.Header().Get("RateLimit")) {
				most = max(most, v)
			}
			if most != int64(wait/time.Second) {
				t.Fatalf("trial %d: Retry-After %v, RateLimit %q: the refusing layer's t is not the Retry-After", trial, wait, w.Header().Get("RateLimit"))
			}
		}
	}
	if refused < 100 {
		t.Fatalf("%d refusals in all, want at least 100", refused)
	}
}

// TestSpreadBooksCost refuses bursts of clients with random mixes of costs, all at one instant,
// through Spread around a shared TokenBucket whose burst holds 10 s of its limit (a limit of
// 10, 3 or 2.5 a second, so that some costs exceed what one second holds): each comes back
// exactly when told, in any order within its second, and is admitted, since the schedule books
// cost, not requests. Until this was so, a second that held one return of cost 10 still took
// nine of cost 1, and most of those that came back as told were refused again.
func TestSpreadBooksCost(t *testing.T) {
	rng := rand.New(rand.NewPCG(6, 54))
	ctx := context.Background()
	for trial := range 60 {
		limit := []rate.Limit{10, 3, 2.5}[trial%3]
		burst := int(10 * limit)
		maxCost := 1 + rng.IntN(burst/2)
		service := NewTokenBucket(limit, burst)
		l := Spread(Shared(service, "all"), limit, burst)
		service.Decide(ctx, "all", burst, t0) // spent
		type back struct {
			at   time.Time
			cost int
		}
		var backs []back
		for range 20 + rng.IntN(40) {
			cost := 1 + rng.IntN(maxCost)
			d, _ := l.Decide(ctx, "c", cost, t0)
			if d.Allowed {
				t.Fatalf("trial %d: admitted with the burst spent", trial)
			}
			backs = append(backs, back{t0.Add(d.RetryAfter), cost})
		}
		rng.Shuffle(len(backs), func(i, j int) { backs[i], backs[j] = backs[j], backs[i] })
		slices.SortStableFunc(backs, func(a, b back) int { return a.at.Compare(b.at) })
		for i, b := range backs {
			if d, _ := service.Decide(ctx, "all", b.cost, b.at); !d.Allowed {
				t.Fatalf("trial %d, limit %v, costs up to %d: return %d of %d, cost %d, told %v, refused again", trial, limit, maxCost, i+1, len(backs), b.cost, b.at.Sub(t0))
			}
		}
	}
}

// TestMaintenanceReturnRateLongWindow announces an end two hours ahead with a ReturnRate of 1:
// the clients refused in its first seconds are told seconds of their own after the end. The
// schedule booked the hour after the present, so all were told the end's second.
func TestMaintenanceReturnRateLongWindow(t *testing.T) {
	for _, date := range []bool{false, true} {
		clk := newClock(t0)
		m := &Maintenance{ReturnRate: 1, HTTPDate: date, Now: clk.Now}
		end := t0.Add(2 * time.Hour)
		m.Start(end)
		h := m.Handler(ok)
		perSecond := map[int64]int{}
		for i := range 20 {
			at := t0.Add(time.Duration(i) * 100 * time.Millisecond)
			clk.Set(at)
			wait := wantRefusal503(t, serve(h, "GET", "192.0.2.1:1"), at, date)
			if back := at.Add(wait); back.Before(end) || back.After(end.Add(time.Hour)) {
				t.Fatalf("HTTPDate %v: refused at %v, told to come back at %v, want from the end %v to an hour after", date, at, back, end)
			}
			perSecond[at.Add(wait).Unix()]++
		}
		for sec, n := range perSecond {
			if n > 1 {
				t.Errorf("HTTPDate %v: %d of 20 clients told to come back in second %v (ReturnRate 1)", date, n, time.Unix(sec, 0).UTC())
			}
		}
	}
}
