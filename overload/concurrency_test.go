package overload

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/retryafter/retryafter"
	"github.com/retryafter/retryafter/internal/testkit"
	"golang.org/x/time/rate"
)

// gate is a handler that holds every request until it is opened, counting those it holds.
type gate struct {
	mu      sync.Mutex
	open    chan struct{}
	running int
	most    int
}

func newGate() *gate { return &gate{open: make(chan struct{})} }

func (g *gate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g.mu.Lock()
	g.running++
	g.most = max(g.most, g.running)
	g.mu.Unlock()
	<-g.open
	g.mu.Lock()
	g.running--
	g.mu.Unlock()
}

// A pending is a request served on a goroutine of its own.
type pending struct {
	w    *httptest.ResponseRecorder
	done chan struct{}
}

// concurrent sends one request from remote through h on a goroutine of its own, counted in wg.
func concurrent(wg *sync.WaitGroup, h http.Handler, remote string) *pending {
	p := &pending{w: httptest.NewRecorder(), done: make(chan struct{})}
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = remote
	wg.Go(func() {
		defer close(p.done)
		h.ServeHTTP(p.w, r)
	})
	return p
}

// answered reports whether the request has been answered, without waiting.
func (p *pending) answered() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// result waits for the answer.
func (p *pending) result() *httptest.ResponseRecorder {
	<-p.done
	return p.w
}

// shedLog records what a Concurrency's hook is told.
type shedLog struct {
	mu    sync.Mutex
	sheds []Shed
}

func (l *shedLog) hook(r *http.Request, s Shed) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sheds = append(l.sheds, s)
}

func (l *shedLog) reasons() []ShedReason {
	l.mu.Lock()
	defer l.mu.Unlock()
	var rs []ShedReason
	for _, s := range l.sheds {
		rs = append(rs, s.Reason)
	}
	return rs
}

func (l *shedLog) all() []Shed {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Shed(nil), l.sheds...)
}

func TestConcurrencyRunsAtMostMax(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var log shedLog
		c := &Concurrency{Max: 3, OnShed: log.hook}
		g := newGate()
		h := c.Handler(g)
		var wg sync.WaitGroup
		var ps []*pending
		for range 5 {
			ps = append(ps, concurrent(&wg, h, "192.0.2.1:1"))
			synctest.Wait()
		}
		now := time.Now()
		close(g.open)
		wg.Wait()
		admitted := 0
		for _, p := range ps {
			w := p.result()
			if w.Code == http.StatusOK {
				admitted++
				continue
			}
			// ServiceTime (1 s) per slot, 3 slots, no queue: the first refused is told a
			// second, and both fit in that second.
			if got := wantRefusal(t, w, http.StatusServiceUnavailable, now); got != time.Second {
				t.Errorf("Retry-After = %v, want 1s", got)
			}
		}
		if admitted != 3 || g.most != 3 {
			t.Errorf("admitted %d, at most %d at once; want 3 and 3", admitted, g.most)
		}
		if sheds := log.all(); len(sheds) != 2 || sheds[0].Reason != ShedFull || sheds[0].Running != 3 || sheds[0].RetryAfter != time.Second {
			t.Errorf("hook told %+v, want two ShedFull with 3 running and RetryAfter 1s", sheds)
		}
	})
}

func TestConcurrencyQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var log shedLog
		c := &Concurrency{Max: 1, Queue: 1, QueueWait: 2 * time.Second, OnShed: log.hook}
		g := newGate()
		h := c.Handler(g)
		var wg sync.WaitGroup
		first := concurrent(&wg, h, "192.0.2.1:1")
		synctest.Wait()
		queued := concurrent(&wg, h, "192.0.2.1:2")
		synctest.Wait()
		full := concurrent(&wg, h, "192.0.2.1:3").result()
		if rs := log.reasons(); full.Code != http.StatusServiceUnavailable || len(rs) != 1 || rs[0] != ShedFull {
			t.Fatalf("with the slot and the queue taken: %d, reasons %v; want 503 ShedFull", full.Code, rs)
		}
		time.Sleep(time.Second) // the queued request waits, within QueueWait
		close(g.open)
		if first.result().Code != http.StatusOK || queued.result().Code != http.StatusOK {
			t.Errorf("first %d, queued %d; want both 200", first.w.Code, queued.w.Code)
		}

		// A request that waits QueueWait without a slot is refused, not before.
		g = newGate()
		h = c.Handler(g)
		concurrent(&wg, h, "192.0.2.1:1")
		synctest.Wait()
		start := time.Now()
		late := concurrent(&wg, h, "192.0.2.1:2")
		time.Sleep(2*time.Second - 1)
		synctest.Wait()
		if late.answered() {
			t.Fatalf("answered %d before QueueWait", late.result().Code)
		}
		time.Sleep(time.Nanosecond)
		wantRefusal(t, late.result(), http.StatusServiceUnavailable, start.Add(2*time.Second))
		if rs := log.reasons(); len(rs) != 2 || rs[1] != ShedTimeout {
			t.Errorf("reasons %v, want ShedTimeout second", rs)
		}
		close(g.open)
		wg.Wait()
	})
}

func TestConcurrencyClientLeavesQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var log shedLog
		c := &Concurrency{Max: 1, Queue: 1, QueueWait: time.Minute, OnShed: log.hook}
		g := newGate()
		h := c.Handler(g)
		var wg sync.WaitGroup
		concurrent(&wg, h, "192.0.2.1:1")
		synctest.Wait()
		ctx, cancel := context.WithCancel(context.Background())
		r := httptest.NewRequestWithContext(ctx, "GET", "/", nil)
		gone := httptest.NewRecorder()
		done := make(chan struct{})
		go func() {
			defer close(done)
			h.ServeHTTP(gone, r)
		}()
		synctest.Wait()
		cancel()
		<-done
		if rs := log.reasons(); gone.Code != http.StatusServiceUnavailable || len(rs) != 1 || rs[0] != ShedCanceled {
			t.Fatalf("a client that hung up: %d, reasons %v; want 503 ShedCanceled at once", gone.Code, rs)
		}
		// It left the queue: another request takes its place, and runs.
		next := concurrent(&wg, h, "192.0.2.1:3")
		synctest.Wait()
		if rs := log.reasons(); len(rs) != 1 {
			t.Fatalf("the queue still held the client that left: reasons %v", rs)
		}
		close(g.open)
		if next.result().Code != http.StatusOK {
			t.Errorf("next = %d, want 200", next.w.Code)
		}
		wg.Wait()
	})
}

func TestConcurrencyPanicFreesSlot(t *testing.T) {
	c := &Concurrency{Max: 1}
	boom := errors.New("boom")
	panicking := c.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { panic(boom) }))
	for range 3 {
		func() {
			defer func() {
				if v := recover(); v != boom {
					t.Fatalf("recovered %v, want the handler's own panic value", v)
				}
			}()
			serve(panicking, "GET", "192.0.2.1:1")
		}()
	}
	if w := serve(c.Handler(ok), "GET", "192.0.2.1:1"); w.Code != http.StatusOK {
		t.Errorf("after handlers that panicked: %d, want 200 (their slots freed)", w.Code)
	}
	if c.state.running != 0 {
		t.Errorf("running = %d, want 0", c.state.running)
	}
}

func TestConcurrencyPerKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var log shedLog
		c := &Concurrency{Max: 10, MaxPerKey: 2, ServiceTime: 4 * time.Second, OnShed: log.hook}
		g := newGate()
		h := c.Handler(g)
		var wg sync.WaitGroup
		for range 2 {
			concurrent(&wg, h, "192.0.2.1:1")
		}
		synctest.Wait()
		over := concurrent(&wg, h, "192.0.2.1:2").result()
		other := concurrent(&wg, h, "192.0.2.2:1")
		// Two slots of 4 s: one frees every 2 s.
		if got := wantRefusal(t, over, http.StatusServiceUnavailable, time.Now()); got != 2*time.Second {
			t.Errorf("Retry-After = %v, want 2s", got)
		}
		if sheds := log.all(); len(sheds) != 1 || sheds[0].Reason != ShedKey || sheds[0].Key != "192.0.2.1" {
			t.Errorf("hook told %+v, want one ShedKey for 192.0.2.1", sheds)
		}
		close(g.open)
		wg.Wait()
		if other.result().Code != http.StatusOK {
			t.Errorf("another client: %d, want 200", other.w.Code)
		}
		c.mu.Lock()
		if n := len(c.state.keys); n != 0 {
			t.Errorf("%d keys kept after every request ended, want 0", n)
		}
		c.mu.Unlock()
	})
	// Three slots of 4 s: one frees every 1.33 s, told as 2 s.
	synctest.Test(t, func(t *testing.T) {
		c := &Concurrency{Max: 10, MaxPerKey: 3, ServiceTime: 4 * time.Second}
		g := newGate()
		h := c.Handler(g)
		var wg sync.WaitGroup
		for range 3 {
			concurrent(&wg, h, "192.0.2.1:1")
		}
		synctest.Wait()
		if got := wantRefusal(t, serve(h, "GET", "192.0.2.1:2"), http.StatusServiceUnavailable, time.Now()); got != 2*time.Second {
			t.Errorf("Retry-After = %v, want 2s", got)
		}
		close(g.open)
		wg.Wait()
	})
	c := &Concurrency{Max: 1, MaxPerKey: 1, Key: func(*http.Request) (string, error) { return "", errors.New("no key") }}
	if w := serve(c.Handler(ok), "GET", "192.0.2.1:1"); w.Code != http.StatusInternalServerError || w.Body.String() != "Internal Server Error\n" {
		t.Errorf("a key function that fails: %d %q, want 500 without the error's text", w.Code, w.Body)
	}
	// Without MaxPerKey the key function is not called, so that its failure refuses nothing.
	c = &Concurrency{Max: 1, Key: func(*http.Request) (string, error) { return "", errors.New("no key") }}
	if w := serve(c.Handler(ok), "GET", "192.0.2.1:1"); w.Code != http.StatusOK {
		t.Errorf("a key function that fails, without MaxPerKey: %d, want 200", w.Code)
	}
}

// TestConcurrencySpreadsRefusals: clients refused at one instant are told seconds that each take
// at most what the slots free in a second, queue or not. Two slots of 10 ms free 200 times a
// second; with the queue of 50 full, 450 refused at once are told 1, 2 and 3 s, 200 a second.
func TestConcurrencySpreadsRefusals(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &Concurrency{Max: 2, Queue: 50, QueueWait: 100 * time.Millisecond, ServiceTime: 10 * time.Millisecond}
		g := newGate()
		h := c.Handler(g)
		var wg sync.WaitGroup
		for range 2 + 50 {
			concurrent(&wg, h, "192.0.2.1:1")
		}
		synctest.Wait()
		told := map[time.Duration]int{}
		for range 450 {
			told[wantRefusal(t, serve(h, "GET", "192.0.2.1:2"), http.StatusServiceUnavailable, time.Now())]++
		}
		want := map[time.Duration]int{time.Second: 200, 2 * time.Second: 200, 3 * time.Second: 50}
		if !maps.Equal(told, want) {
			t.Errorf("450 refused at once told %v, want %v", told, want)
		}
		close(g.open)
		wg.Wait()
	})
}

// TestConcurrencyMeasures: the wait follows what requests take. Requests of 3 s in 2 slots
// complete 2 every 3 s; with the queue full, the one refused waits behind the queue.
func TestConcurrencyMeasures(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &Concurrency{Max: 2, Queue: 4, QueueWait: time.Hour}
		h := c.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { time.Sleep(3 * time.Second) }))
		var wg sync.WaitGroup
		for range 2 { // measure: two requests of 3 s
			concurrent(&wg, h, "192.0.2.1:1")
		}
		wg.Wait()
		for range 6 {
			concurrent(&wg, h, "192.0.2.1:1")
		}
		synctest.Wait()
		if l := c.Load(); l != (ConcurrencyLoad{Running: 2, Queued: 4, ServiceTime: 3 * time.Second}) {
			t.Errorf("Load() = %+v, want 2 running, 4 queued, 3 s", l)
		}
		w := serve(h, "GET", "192.0.2.1:1")
		// 4 waiting and this one: 5 × 1.5 s = 7.5 s, rounded up.
		if got := wantRefusal(t, w, http.StatusServiceUnavailable, time.Now()); got != 8*time.Second {
			t.Errorf("Retry-After = %v, want 8s", got)
		}
		wg.Wait()

		// Requests that get stuck: the age of those running lengthens the wait.
		stuck := make(chan struct{})
		h = c.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-stuck }))
		for range 6 {
			concurrent(&wg, h, "192.0.2.1:1")
		}
		time.Sleep(time.Minute)
		synctest.Wait()
		w = serve(h, "GET", "192.0.2.1:1")
		if got := wantRefusal(t, w, http.StatusServiceUnavailable, time.Now()); got < 2*time.Minute {
			t.Errorf("with requests stuck for a minute, Retry-After = %v, want at least 5 × 60 s / 2", got)
		}
		close(stuck)
		wg.Wait()
	})
}

// TestConcurrencyServiceTime: what Load reports is the moving average of the times measured
// (a sixteenth of the newest), or, when longer, the mean age of the requests running, which counts
// each as it starts and no longer once it ends.
func TestConcurrencyServiceTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &Concurrency{Max: 3}
		release := map[string]chan struct{}{}
		for _, p := range []string{"/a", "/b", "/c"} {
			release[p] = make(chan struct{})
		}
		h := c.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if ch := release[r.URL.Path]; ch != nil {
				<-ch
				return
			}
			d, _ := time.ParseDuration(r.URL.Path[1:])
			time.Sleep(d)
		}))
		var wg sync.WaitGroup
		start := func(path string) {
			r := httptest.NewRequest("GET", path, nil)
			wg.Go(func() { h.ServeHTTP(httptest.NewRecorder(), r) })
			synctest.Wait()
		}
		load := func(what string, want ConcurrencyLoad) {
			t.Helper()
			if got := c.Load(); got != want {
				t.Fatalf("%s: Load() = %+v, want %+v", what, got, want)
			}
		}
		load("nothing measured", ConcurrencyLoad{ServiceTime: time.Second}) // the default
		start("/3s")
		wg.Wait()
		start("/19s")
		wg.Wait()
		load("3 s, then 19 s", ConcurrencyLoad{ServiceTime: 4 * time.Second}) // 3 + (19 - 3) / 16

		start("/a")
		time.Sleep(10 * time.Second)
		start("/b")
		time.Sleep(10 * time.Second)
		start("/c")
		time.Sleep(10 * time.Second)
		load("running for 30, 20 and 10 s", ConcurrencyLoad{Running: 3, ServiceTime: 20 * time.Second})
		close(release["/b"]) // 20 s: the average is now 5 s
		synctest.Wait()
		load("running for 30 and 10 s", ConcurrencyLoad{Running: 2, ServiceTime: 20 * time.Second})
		close(release["/a"])
		synctest.Wait()
		load("running for 10 s", ConcurrencyLoad{Running: 1, ServiceTime: 10 * time.Second})
		close(release["/c"])
		wg.Wait()
		// The average of 5 s, then 30 s (/a): 6.5625 s, then 10 s (/c): 6.77734375 s.
		load("none running", ConcurrencyLoad{ServiceTime: 6777343750 * time.Nanosecond})
	})
	// A request stuck for 200 years: the mean age saturates at 2^62 ns, 146 years, and the
	// wait told is whole seconds from it.
	synctest.Test(t, func(t *testing.T) {
		c := &Concurrency{Max: 1}
		stuck := make(chan struct{})
		h := c.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { <-stuck }))
		var wg sync.WaitGroup
		concurrent(&wg, h, "192.0.2.1:1")
		time.Sleep(200 * 365 * 24 * time.Hour)
		synctest.Wait()
		if l := c.Load(); l != (ConcurrencyLoad{Running: 1, ServiceTime: 1 << 62}) {
			t.Errorf("Load() = %+v, want 1 running for 2^62 ns", l)
		}
		if got := wantRefusal(t, serve(h, "GET", "192.0.2.1:2"), http.StatusServiceUnavailable, time.Now()); got != (1<<62/time.Second+1)*time.Second {
			t.Errorf("Retry-After = %v, want 2^62 ns rounded up", got)
		}
		close(stuck)
		wg.Wait()
	})
}

func TestConcurrencyProblemDetails(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &Concurrency{Max: 1, Respond: retryafter.ProblemDetails{Always: true}.Respond}
		g := newGate()
		h := c.Handler(g)
		var wg sync.WaitGroup
		concurrent(&wg, h, "192.0.2.1:1")
		synctest.Wait()
		w := serve(h, "GET", "192.0.2.1:2")
		wantRefusal(t, w, http.StatusServiceUnavailable, time.Now())
		var p problemObject
		if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil {
			t.Fatal(err)
		}
		if p.Type != retryafter.ProblemReducedCapacity || p.Status != 503 || p.RetryAfter != 1 || p.Title != "Temporary Reduced Capacity" {
			t.Errorf("problem %+v, want temporary-reduced-capacity, 503, retry-after 1", p)
		}
		close(g.open)
		wg.Wait()
	})
	// A retryafter.Maintenance's 503 keeps about:blank.
	m := &retryafter.Maintenance{Respond: retryafter.ProblemDetails{Always: true}.Respond}
	m.Start(time.Time{})
	w := serve(m.Handler(ok), "GET", "192.0.2.1:1")
	var p problemObject
	if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil || p.Type != "about:blank" {
		t.Errorf("maintenance problem %+v (%v), want about:blank", p, err)
	}
}

// TestConcurrencyWithLimit mounts both: the rate limit's 429 and the concurrency limit's 503
// each keep their own answer.
func TestConcurrencyWithLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &Concurrency{Max: 1}
		g := newGate()
		h := c.Handler(retryafter.Limit(rate.Every(time.Minute), 2)(g))
		var wg sync.WaitGroup
		running := concurrent(&wg, h, "192.0.2.1:1")
		synctest.Wait()
		if w := serve(h, "GET", "192.0.2.1:1"); w.Code != http.StatusServiceUnavailable {
			t.Errorf("over the concurrency limit: %d, want 503", w.Code)
		}
		close(g.open)
		wg.Wait()
		if running.result().Code != http.StatusOK {
			t.Fatalf("first: %d", running.w.Code)
		}
		serve(h, "GET", "192.0.2.1:1") // the second token: the 503 cost none
		w := serve(h, "GET", "192.0.2.1:1")
		if got := wantRefusal(t, w, http.StatusTooManyRequests, time.Now()); got != time.Minute {
			t.Errorf("over the rate limit: Retry-After %v, want 60s", got)
		}
	})
}

func TestConcurrencyPreflightPasses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &Concurrency{Max: 1}
		g := newGate()
		h := c.Handler(g)
		var wg sync.WaitGroup
		concurrent(&wg, h, "192.0.2.1:1")
		synctest.Wait()
		r := httptest.NewRequest("OPTIONS", "/", nil)
		r.Header.Set("Origin", "https://example.com")
		r.Header.Set("Access-Control-Request-Method", "POST")
		w := httptest.NewRecorder()
		c.Handler(corsMiddleware(false)(ok)).ServeHTTP(w, r) // a preflight that CORS middleware answers
		if w.Code != http.StatusNoContent {
			t.Errorf("preflight: %d, want 204", w.Code)
		}
		close(g.open)
		wg.Wait()
	})
}

func TestConcurrencyPanics(t *testing.T) {
	wantPanics(t, map[string]func(){
		"nil next":                    func() { (&Concurrency{Max: 1}).Handler(nil) },
		"zero Max":                    func() { (&Concurrency{}).Handler(ok) },
		"negative per key":            func() { (&Concurrency{Max: 1, MaxPerKey: -1}).Handler(ok) },
		"negative queue":              func() { (&Concurrency{Max: 1, Queue: -1}).Handler(ok) },
		"negative wait":               func() { (&Concurrency{Max: 1, QueueWait: -1}).Handler(ok) },
		"negative service":            func() { (&Concurrency{Max: 1, ServiceTime: -1}).Handler(ok) },
		"retryafter.Spread(nil)":      func() { retryafter.Spread(nil, 1, 1) },
		"retryafter.Spread limit < 0": func() { retryafter.Spread(retryafter.NewTokenBucket(1, 1), -1, 1) },
		"retryafter.Spread limit NaN": func() { retryafter.Spread(retryafter.NewTokenBucket(1, 1), rate.Limit(math.NaN()), 1) },
		"retryafter.Spread burst < 0": func() { retryafter.Spread(retryafter.NewTokenBucket(1, 1), 1, -1) },
	})
	for r, want := range map[ShedReason]string{ShedFull: "full", ShedTimeout: "timeout", ShedKey: "key", ShedCanceled: "canceled", 0: "unknown"} {
		if r.String() != want {
			t.Errorf("%d.String() = %q, want %q", int(r), r.String(), want)
		}
	}
}

// sleepKey is the context key of how long a request of TestConcurrencyInvariants takes.
type sleepKey struct{}

// TestConcurrencyInvariants runs random traffic (arrivals, durations, clients, hang-ups)
// through a Concurrency and checks what must hold whatever the order: never more than Max
// running, nor more than MaxPerKey of one client; every request answered 200, or 503 with a
// Retry-After of whole seconds and a Date; the hook told of each 503; and nothing held after.
func TestConcurrencyInvariants(t *testing.T) {
	for seed := range uint64(20) {
		synctest.Test(t, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 35))
			var log shedLog
			c := &Concurrency{Max: 5, MaxPerKey: 3, Queue: 5, QueueWait: 500 * time.Millisecond, OnShed: log.hook}
			var mu sync.Mutex
			running, most := 0, 0
			perKey := map[string]int{}
			h := c.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				key, _ := retryafter.ClientIP()(r)
				mu.Lock()
				running++
				perKey[key]++
				most = max(most, running)
				if perKey[key] > 3 {
					t.Errorf("%d requests of %s running, MaxPerKey 3", perKey[key], key)
				}
				mu.Unlock()
				time.Sleep(r.Context().Value(sleepKey{}).(time.Duration))
				mu.Lock()
				running--
				perKey[key]--
				mu.Unlock()
			}))
			type req struct {
				at, takes, cancelAfter time.Duration
				client                 int
			}
			reqs := make([]req, 200)
			for i := range reqs {
				reqs[i] = req{at: time.Duration(rng.Int64N(int64(2 * time.Second))), client: rng.IntN(8),
					takes: time.Duration(rng.Int64N(int64(400 * time.Millisecond)))}
				if rng.IntN(5) == 0 {
					reqs[i].cancelAfter = time.Duration(rng.Int64N(int64(300*time.Millisecond))) + 1
				}
			}
			var wg sync.WaitGroup
			codes := make([]int, len(reqs))
			for i, q := range reqs {
				wg.Go(func() {
					time.Sleep(q.at)
					ctx, cancel := context.WithCancel(context.WithValue(context.Background(), sleepKey{}, q.takes))
					defer cancel()
					if q.cancelAfter > 0 {
						time.AfterFunc(q.cancelAfter, cancel)
					}
					r := httptest.NewRequestWithContext(ctx, "GET", "/", nil)
					r.RemoteAddr = "192.0.2." + strconv.Itoa(q.client+1) + ":1"
					w := httptest.NewRecorder()
					h.ServeHTTP(w, r)
					if w.Code == http.StatusServiceUnavailable {
						wantRefusal(t, w, http.StatusServiceUnavailable, time.Now())
					} else if w.Code != http.StatusOK {
						t.Errorf("status %d", w.Code)
					}
					codes[i] = w.Code
				})
			}
			wg.Wait()
			shed := 0
			for _, code := range codes {
				if code == http.StatusServiceUnavailable {
					shed++
				}
			}
			if most > 5 {
				t.Errorf("%d running at once, Max 5", most)
			}
			if n := len(log.all()); n != shed {
				t.Errorf("hook told of %d, %d answered 503", n, shed)
			}
			if l := c.Load(); l.Running != 0 || l.Queued != 0 || len(c.state.keys) != 0 {
				t.Errorf("after every request: %+v, %d keys", l, len(c.state.keys))
			}
			if shed == 0 || shed == len(reqs) {
				t.Errorf("%d of %d shed: the traffic tests nothing", shed, len(reqs))
			}
		})
	}
}

// BenchmarkConcurrencyAdmitted is an admitted request through a Concurrency, with and without
// a limit per client.
func BenchmarkConcurrencyAdmitted(b *testing.B) {
	for _, perKey := range []int{0, 4} {
		b.Run("MaxPerKey="+strconv.Itoa(perKey), func(b *testing.B) {
			h := (&Concurrency{Max: 64, MaxPerKey: perKey}).Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
			r := httptest.NewRequest("GET", "/", nil)
			w := httptest.NewRecorder()
			b.ReportAllocs()
			for b.Loop() {
				h.ServeHTTP(w, r)
			}
		})
	}
}

// sleeper is a handler that holds its slot as long as the request's context says (sleepKey),
// and no time without it.
var sleeper = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	d, _ := r.Context().Value(sleepKey{}).(time.Duration)
	time.Sleep(d)
})

// serveFor sends one request through h that holds its slot for d, and returns its status.
func serveFor(h http.Handler, d time.Duration) int {
	r := httptest.NewRequestWithContext(context.WithValue(context.Background(), sleepKey{}, d), "GET", "/", nil)
	r.RemoteAddr = "192.0.2.1:1"
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w.Code
}

// slotLoop keeps one slot of h busy: it sends requests one after another, each holding its slot
// for what next returns, until stop is closed. A refused request is sent again a millisecond
// later.
func slotLoop(h http.Handler, stop <-chan struct{}, next func() time.Duration) {
	d := next()
	for {
		select {
		case <-stop:
			return
		default:
		}
		if serveFor(h, d) == http.StatusServiceUnavailable {
			time.Sleep(time.Millisecond)
			continue
		}
		d = next()
	}
}

// flood sends n requests of d through h at once and returns the waits the refused ones were
// told, once every request was answered.
func flood(t *testing.T, h http.Handler, n int, d time.Duration) []time.Duration {
	t.Helper()
	var wg sync.WaitGroup
	ws := make([]*httptest.ResponseRecorder, n)
	now := time.Now()
	for i := range ws {
		r := httptest.NewRequestWithContext(context.WithValue(context.Background(), sleepKey{}, d), "GET", "/", nil)
		ws[i] = httptest.NewRecorder()
		wg.Go(func() { h.ServeHTTP(ws[i], r) })
	}
	wg.Wait()
	var told []time.Duration
	for _, w := range ws {
		if w.Code != http.StatusOK {
			told = append(told, wantRefusal(t, w, http.StatusServiceUnavailable, now))
		}
	}
	return told
}

// TestConcurrencyOneSlotHeld: with Max 4, three slots completing a request every 10 ms and one
// held for 10 minutes, the refused are told what the three slots can take, while the one is held
// and as it frees (to complete a request every 10 ms too): a flood of 200 fills the queue of 100,
// and the 100 refused are told at most 3 s.
func TestConcurrencyOneSlotHeld(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &Concurrency{Max: 4, Queue: 100}
		h := c.Handler(sleeper)
		start := time.Now()
		stop := make(chan struct{})
		var wg sync.WaitGroup
		short := func() time.Duration { return 10 * time.Millisecond }
		wg.Go(func() {
			serveFor(h, 10*time.Minute)
			slotLoop(h, stop, short)
		})
		synctest.Wait()
		for range 3 {
			wg.Go(func() { slotLoop(h, stop, short) })
		}
		// Between two completions, so that every slot is taken; the last just after the held
		// request ended.
		for _, at := range []time.Duration{time.Second, time.Minute, 5 * time.Minute, 10*time.Minute - time.Second, 10 * time.Minute} {
			time.Sleep(time.Until(start.Add(at + 5*time.Millisecond)))
			told := flood(t, h, 200, 10*time.Millisecond)
			if len(told) != 100 || slices.Max(told) > 3*time.Second {
				t.Errorf("a flood at %v: %d refused, told at most %v; want 100, told at most 3s", at, len(told), slices.Max(told))
			}
		}
		close(stop)
		wg.Wait()
	})
}

// TestConcurrencyOneSlotShare: over random mixes of slot times, one slot held for any length of
// time changes what the others are told by its share at most. Each mix has 2 to 6 slots; all but
// one take requests of their own length (1 s to 1 min, ±20% each), and the one takes requests of
// 1 s to 3 h in turn. The same refused requests, sent where that slot is not there (Max one
// lower), are told W; with it, they are told at most W × Max/(Max-1), rounded up, plus as much
// again for the spread of returns when fewer than one slot frees a second, and a second.
func TestConcurrencyOneSlotShare(t *testing.T) {
	const run = time.Hour
	for seed := range uint64(12) {
		rng := rand.New(rand.NewPCG(seed, 41))
		slots := 2 + rng.IntN(5)
		lengths := make([]time.Duration, slots)
		for i := range lengths {
			lengths[i] = logUniform(rng, time.Second, time.Minute)
		}
		var probes []time.Duration // between two whole milliseconds, where no request starts or ends
		for at := time.Duration(0); at < run; {
			at += logUniform(rng, 10*time.Second, 4*time.Minute) + time.Millisecond/2
			probes = append(probes, at)
		}
		told := func(held bool) []time.Duration {
			var waits []time.Duration
			synctest.Test(t, func(t *testing.T) {
				c := &Concurrency{Max: slots - 1}
				if held {
					c.Max = slots
				}
				h := c.Handler(sleeper)
				start := time.Now()
				stop := make(chan struct{})
				var wg sync.WaitGroup
				for i := range slots {
					if i == 0 && !held {
						continue
					}
					rng := rand.New(rand.NewPCG(seed, uint64(i)))
					next := func() time.Duration {
						if i == 0 {
							return logUniform(rng, time.Second, 3*time.Hour)
						}
						return (lengths[i] * time.Duration(80+rng.IntN(41)) / 100).Round(time.Millisecond)
					}
					wg.Go(func() { slotLoop(h, stop, next) })
				}
				for _, at := range probes {
					time.Sleep(time.Until(start.Add(at)))
					waits = append(waits, wantRefusal(t, serve(h, "GET", "192.0.2.9:1"), http.StatusServiceUnavailable, time.Now()))
				}
				close(stop)
				wg.Wait()
			})
			return waits
		}
		without, with := told(false), told(true)
		for j, w := range without {
			share := (w*time.Duration(slots) + time.Duration(slots-2)) / time.Duration(slots-1)
			share = (share + time.Second - 1).Truncate(time.Second)
			if with[j] > 2*share+time.Second {
				t.Errorf("seed %d, %d slots of %v: at %v, told %v with the held slot, %v without it; want at most %v",
					seed, slots, lengths[1:], probes[j].Round(time.Second), with[j], w, 2*share+time.Second)
			}
		}
	}
}

// logUniform returns a duration between lo and hi, whole milliseconds, evenly spread on a log
// scale.
func logUniform(rng *rand.Rand, lo, hi time.Duration) time.Duration {
	f := math.Exp(math.Log(float64(lo)) + rng.Float64()*(math.Log(float64(hi))-math.Log(float64(lo))))
	return time.Duration(f).Round(time.Millisecond)
}

// TestConcurrencyAllSlowDown: when every request takes longer, the waits lengthen, from the
// ages of the requests running before any of them completes, and from what they take after.
// Four slots complete requests of 1 to 1.75 s, then of 30 times that.
func TestConcurrencyAllSlowDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &Concurrency{Max: 4}
		h := c.Handler(sleeper)
		start := time.Now()
		slow := start.Add(2 * time.Minute)
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for i := range 4 {
			length := time.Second + time.Duration(i)*250*time.Millisecond
			wg.Go(func() {
				slotLoop(h, stop, func() time.Duration {
					if time.Now().Before(slow) {
						return length
					}
					return 30 * length
				})
			})
		}
		probe := func(at time.Duration) time.Duration {
			time.Sleep(time.Until(start.Add(at + time.Millisecond/2)))
			return wantRefusal(t, serve(h, "GET", "192.0.2.9:1"), http.StatusServiceUnavailable, time.Now())
		}
		// The slots free 2.4 times a second, then once every 12 s.
		if got := probe(time.Minute); got != time.Second {
			t.Errorf("before: told %v, want 1s", got)
		}
		if got := probe(2*time.Minute + 20*time.Second); got < 4*time.Second || got > 10*time.Second {
			t.Errorf("20 s into the slow-down: told %v, want 4s to 10s, from the ages of 20 s", got)
		}
		if got := probe(12 * time.Minute); got < 8*time.Second || got > 30*time.Second {
			t.Errorf("10 minutes into the slow-down: told %v, want about 10s", got)
		}
		close(stop)
		wg.Wait()
	})
}

// TestConcurrencyPerKeyHeld: a client over MaxPerKey is told the pace of its own slots. One of
// its requests held long changes that by its share: with two slots, one held half an hour and
// one completing a request a second, it is told at most 2 s. With one slot, held half an hour,
// it is told that its request has run at least that long.
func TestConcurrencyPerKeyHeld(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &Concurrency{Max: 8, MaxPerKey: 2}
		h := c.Handler(sleeper)
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() { serveFor(h, time.Hour) })
		synctest.Wait()
		wg.Go(func() { slotLoop(h, stop, func() time.Duration { return time.Second }) })
		time.Sleep(30*time.Minute + time.Millisecond/2)
		if got := wantRefusal(t, serve(h, "GET", "192.0.2.1:1"), http.StatusServiceUnavailable, time.Now()); got > 2*time.Second {
			t.Errorf("with one of two slots held 30 min: told %v, want at most 2s", got)
		}
		close(stop)
		wg.Wait()
	})
	synctest.Test(t, func(t *testing.T) {
		c := &Concurrency{Max: 8, MaxPerKey: 1}
		h := c.Handler(sleeper)
		var wg sync.WaitGroup
		wg.Go(func() { serveFor(h, time.Hour) })
		time.Sleep(30 * time.Minute)
		if got := wantRefusal(t, serve(h, "GET", "192.0.2.1:1"), http.StatusServiceUnavailable, time.Now()); got < 30*time.Minute {
			t.Errorf("with its one slot held 30 min: told %v, want at least 30m", got)
		}
		wg.Wait()
	})
}

// TestConcurrencyMeasureShare: a completion moves the moving average as it always did, unless it
// would slow the pace of Max slots below that of Max-1; a longer one slows it to exactly that.
func TestConcurrencyMeasureShare(t *testing.T) {
	rng := rand.New(rand.NewPCG(41, 5))
	for range 10000 {
		slots := 1 + rng.IntN(100)
		s := math.Exp(rng.Float64()*20 - 10) // e^-10 s to e^10 s
		d := math.Exp(rng.Float64()*30 - 10)
		c := &Concurrency{Max: slots}
		c.state.service = s
		c.measure(d)
		got, plain := c.state.service, s+serviceWeight*(d-s)
		switch floor := float64(slots-1) / s; {
		case float64(slots)/plain >= floor:
			if got != plain {
				t.Fatalf("Max %d, average %g s, a completion of %g s: average %g, want %g", slots, s, d, got, plain)
			}
		case math.Abs(float64(slots)/got-floor) > 1e-9*floor:
			t.Fatalf("Max %d, average %g s, a completion of %g s: the pace falls to %g, want %g, that of Max-1", slots, s, d, float64(slots)/got, floor)
		}
	}
}

// TestConcurrencyHeldSlotBeforeTheyFree: over random slot holds, one slot held for any length of
// time changes what a flood is told, in the moment before the other slots free (their requests
// about to complete, none completing during the flood), by the held slot's share at most. Each
// mix has 2 to 6 slots, requests of 1 ms to 1 s, a queue of 0 to 50, and one slot held 1 s to
// 3 h; the same flood where that slot completes requests as the others do is told W, and with
// it held at most W × Max/(Max-1), rounded up, and a second.
func TestConcurrencyHeldSlotBeforeTheyFree(t *testing.T) {
	for seed := range uint64(40) {
		rng := rand.New(rand.NewPCG(seed, 54))
		slots, queue := 2+rng.IntN(5), []int{0, 0, 10, 50}[rng.IntN(4)]
		length := logUniform(rng, time.Millisecond, time.Second)
		hold := logUniform(rng, time.Second, 3*time.Hour)
		heldFor := time.Duration(rng.Int64N(int64(hold)))  // how long it has been held
		before := time.Duration(rng.Int64N(int64(length))) // into the others' requests
		flooded := 20 + rng.IntN(200)
		told := func(held bool) time.Duration {
			var most time.Duration
			synctest.Test(t, func(t *testing.T) {
				c := &Concurrency{Max: slots, Queue: queue, QueueWait: 24 * time.Hour} // none refused after waiting
				h := c.Handler(sleeper)
				for range 50 {
					serveFor(h, length)
				}
				var wg sync.WaitGroup
				others := slots
				if held {
					wg.Go(func() { serveFor(h, hold) })
					synctest.Wait()
					time.Sleep(heldFor)
					others--
				}
				for range others {
					wg.Go(func() { serveFor(h, length) })
				}
				synctest.Wait()
				time.Sleep(before)
				most = slices.Max(append(flood(t, h, flooded, length), 0))
				wg.Wait()
			})
			return most
		}
		without, with := told(false), told(true)
		share := (without*time.Duration(slots) + time.Duration(slots-2)) / time.Duration(slots-1)
		share = (share + time.Second - 1).Truncate(time.Second)
		if with > share+time.Second {
			t.Errorf("seed %d: %d slots of %v, queue %d, one held %v of %v, a flood of %d: told %v, %v without the held slot; want at most %v",
				seed, slots, length, queue, heldFor, hold, flooded, with, without, share+time.Second)
		}
	}
}

// TestConcurrencyHeldSlotFlood is issue 54's shape: Concurrency{Max: 4} after 50 requests of
// 10 ms; one request then runs for 10 minutes; three more start beside it; 100 requests arrive
// in the moment before the three complete. The three slots free 300 times a second, so each
// second takes the returns of that pace: none of the 100 is told more than 3 s, wherever in the
// ten minutes and in the three's 10 ms the flood comes.
func TestConcurrencyHeldSlotFlood(t *testing.T) {
	for _, heldFor := range []time.Duration{0, time.Second, time.Minute, 5 * time.Minute, 10*time.Minute - 20*time.Millisecond} {
		for _, before := range []time.Duration{time.Microsecond, 5 * time.Millisecond, 10*time.Millisecond - time.Microsecond} {
			var told []time.Duration
			synctest.Test(t, func(t *testing.T) {
				c := &Concurrency{Max: 4}
				h := c.Handler(sleeper)
				for range 50 {
					serveFor(h, 10*time.Millisecond)
				}
				var wg sync.WaitGroup
				wg.Go(func() { serveFor(h, 10*time.Minute) })
				synctest.Wait()
				time.Sleep(heldFor)
				for range 3 {
					wg.Go(func() { serveFor(h, 10*time.Millisecond) })
				}
				synctest.Wait()
				time.Sleep(before)
				told = flood(t, h, 100, 10*time.Millisecond)
				wg.Wait()
			})
			if len(told) != 100 || slices.Max(told) > 3*time.Second {
				t.Errorf("one slot held %v, the three %v into their requests: %d refused, told at most %v; want 100, told at most 3s",
					heldFor, before, len(told), slices.Max(append(told, 0)))
			}
		}
	}
}

// TestConcurrencyHeldSlotsPace: over random slot holds, a flood in the moment before the slots
// free is told the pace of the slots not held, and no second is told more than the pace. Each
// mix has 2 to 8 slots, requests of 1 ms to 5 s, a queue of 0 to 50, 1 to Max-1 slots held
// (ages of 1 ms to 30 days, some a moment, some far beyond the others' requests) and a flood of
// 1 to 300. The Queue waiting and the nth refused are served once Queue+n slots free, at P a
// second, P = (Max − held)/length: the nth shortest wait is at most (Queue+n+1)/P rounded up,
// the one more slot's turn being the whole seconds the returns are booked in. The returns told
// any k seconds in a row are at most k times the pace the Concurrency counts, rounded up: each
// slot once per length, or per its age when it is held longer. (A billionth is allowed for the
// float arithmetic of the pace.)
func TestConcurrencyHeldSlotsPace(t *testing.T) {
	const slack = 1 + 1e-9
	for seed := range uint64(60) {
		rng := rand.New(rand.NewPCG(seed, 548))
		slots, queue := 2+rng.IntN(7), []int{0, 0, 10, 50}[rng.IntN(4)]
		length := logUniform(rng, time.Millisecond, 5*time.Second)
		ages := make([]time.Duration, 1+rng.IntN(slots-1))
		pace := float64(slots-len(ages)) / length.Seconds()
		for i := range ages {
			ages[i] = logUniform(rng, time.Millisecond, 30*24*time.Hour)
			pace += 1 / max(ages[i], length).Seconds()
		}
		before := 1 + time.Duration(rng.Int64N(int64(length-1))) // into the others' requests, none ending
		flooded := 1 + rng.IntN(300)
		var told []time.Duration
		synctest.Test(t, func(t *testing.T) {
			c := &Concurrency{Max: slots, Queue: queue, QueueWait: 24 * time.Hour} // none refused after waiting
			h := c.Handler(sleeper)
			for range 50 {
				serveFor(h, length)
			}
			at := time.Now().Add(slices.Max(ages) + length) // the flood's instant
			var wg sync.WaitGroup
			start := func(from time.Time, d time.Duration) {
				wg.Go(func() {
					time.Sleep(time.Until(from))
					serveFor(h, d)
				})
			}
			for _, age := range ages {
				start(at.Add(-age), age+length)
			}
			for range slots - len(ages) {
				start(at.Add(-before), length)
			}
			time.Sleep(time.Until(at))
			told = flood(t, h, flooded, length)
			wg.Wait()
		})
		slices.Sort(told)
		p0 := float64(slots-len(ages)) / length.Seconds()
		for n, w := range told {
			if most := time.Duration(math.Ceil(float64(queue+n+2)/p0*slack)) * time.Second; w > most {
				t.Fatalf("seed %d: %d slots of %v, queue %d, held for %v, a flood of %d: refused %d of %d told %v, want at most %v",
					seed, slots, length, queue, ages, flooded, n+1, len(told), w, most)
			}
		}
		perSecond := map[time.Duration]int{}
		for _, w := range told {
			perSecond[w/time.Second]++
		}
		for from := range perSecond {
			in := 0
			for k := time.Duration(1); k <= 10; k++ {
				in += perSecond[from+k-1]
				if most := int(math.Ceil(float64(k) * pace * slack)); in > most {
					t.Fatalf("seed %d: %d slots of %v, held for %v, pace %.4g/s: %d told seconds %d to %d, want at most %d",
						seed, slots, length, ages, pace, in, from, from+k-1, most)
				}
			}
		}
	}
}

// The test helpers shared with the root package's tests.
var (
	t0             = testkit.T0
	wantRefusal    = testkit.WantRefusal
	serve          = testkit.Serve
	ok             = testkit.OK
	corsMiddleware = testkit.CORS
)

func wantPanics(t *testing.T, tests map[string]func()) {
	t.Helper()
	testkit.WantPanics(t, "retryafter: ", tests)
}

// problemObject is an RFC 9457 problem object as ProblemDetails writes it.
type problemObject struct {
	Type       string `json:"type"`
	Title      string `json:"title"`
	Status     int    `json:"status"`
	RetryAfter int64  `json:"retry-after,omitempty"`
}

// TestConcurrencyAfterAStepBack sets the clock of a Concurrency back a day: its refusals, a slot
// freeing about every second, are told a second apart from the one before the step, not the
// day.
func TestConcurrencyAfterAStepBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := testkit.NewClock(t0)
		c := &Concurrency{Max: 1, Now: clk.Now}
		g := newGate()
		h := c.Handler(g)
		var wg sync.WaitGroup
		concurrent(&wg, h, "192.0.2.1:1")
		synctest.Wait()
		serve(h, "GET", "192.0.2.2:1")
		clk.Set(t0.Add(-24 * time.Hour))
		for i := range 3 {
			w := serve(h, "GET", "192.0.2.3:1")
			// The refusals of one instant come back a second apart, the first refused before.
			if got := wantRefusal(t, w, http.StatusServiceUnavailable, clk.Now()); got > time.Duration(i+2)*time.Second {
				t.Errorf("refusal %d after the clock stepped back a day: Retry-After %v, want at most %ds", i+1, got, i+2)
			}
		}
		close(g.open)
		wg.Wait()
	})
}

// TestPerKeyWaitBehindOthers: a client over MaxPerKey is told the time until one of its own
// requests should complete, also when none of them runs yet. One slot: B holds it, C waits,
// then A's one allowed request waits behind C. A's second request, refused, waits exactly the
// Retry-After told and retries, nothing else sent meanwhile: it was told 2 s, from its own
// slot's pace alone, and came back while A's first request still ran.
func TestPerKeyWaitBehindOthers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var log shedLog
		c := &Concurrency{Max: 1, MaxPerKey: 1, Queue: 4, QueueWait: time.Minute, OnShed: log.hook}
		h := c.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			time.Sleep(time.Second)
			w.Write([]byte("ok"))
		}))
		var wg sync.WaitGroup
		concurrent(&wg, h, "192.0.2.2:1") // B: runs 0 s to 1 s
		synctest.Wait()
		concurrent(&wg, h, "192.0.2.3:1") // C: waits, runs 1 s to 2 s
		synctest.Wait()
		a1 := concurrent(&wg, h, "192.0.2.1:1") // A: waits, runs 2 s to 3 s
		synctest.Wait()
		time.Sleep(500 * time.Millisecond)

		w := serve(h, "GET", "192.0.2.1:2")
		if w.Code != http.StatusServiceUnavailable {
			t.Fatalf("A's second request: %d, want 503", w.Code)
		}
		secs, err := strconv.Atoi(w.Header().Get("Retry-After"))
		if err != nil {
			t.Fatalf("Retry-After %q", w.Header().Get("Retry-After"))
		}
		time.Sleep(time.Duration(secs) * time.Second)
		if w := serve(h, "GET", "192.0.2.1:3"); w.Code == http.StatusServiceUnavailable {
			t.Errorf("refused at 0.5 s with Retry-After: %d, retried at %.1f s, refused again (sheds %v); A's first request finished: %v",
				secs, 0.5+float64(secs), log.reasons(), a1.answered())
		}
		wg.Wait()
	})
}
