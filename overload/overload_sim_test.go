package overload

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/retryafter/retryafter"
	"golang.org/x/time/rate"
)

// The simulation of a herd: simClients clients come to a service that runs simSlots requests at
// once, each for simService, so that it serves simCapacity requests a second; the clients
// retry what is refused until they are served. Every instant is on synctest's clock, and the
// clients' instants are spaced so that no two clients act at the same instant: the run is the
// same every time.
const (
	simClients  = 1000
	simSlots    = 10
	simService  = 100 * time.Millisecond
	simCapacity = float64(simSlots) / 0.1 // requests a second
	simQueue    = 100
)

// A simStrategy is how a simulated client waits after a refusal: given the response and how
// many times it was refused so far, how long until it retries.
type simStrategy struct {
	name string
	wait func(w *httptest.ResponseRecorder, refusals int, rng *rand.Rand) time.Duration
}

var (
	// obey waits exactly what Retry-After says, read by the strict parser.
	obey = simStrategy{"Retry-After as sent", func(w *httptest.ResponseRecorder, _ int, _ *rand.Rand) time.Duration {
		d, ok := retryafter.ParseRetryAfter(w.Header(), time.Now())
		if !ok {
			panic("no Retry-After on " + fmt.Sprint(w.Code))
		}
		return d
	}}
	// fixed is a server that always says Retry-After: 1, obeyed.
	fixed = simStrategy{"fixed Retry-After: 1", func(*httptest.ResponseRecorder, int, *rand.Rand) time.Duration {
		return time.Second
	}}
	// backoff is a client without Retry-After: exponential backoff with full jitter, a
	// uniform wait in [0, min(32 s, 1 s × 2^(refusals-1))).
	backoff = simStrategy{"no Retry-After: full-jitter backoff", func(_ *httptest.ResponseRecorder, n int, rng *rand.Rand) time.Duration {
		ceiling := min(32*time.Second, time.Second<<min(n-1, 10))
		return time.Duration(rng.Int64N(int64(ceiling))) + 1
	}}
)

// simResult is what a run measured.
type simResult struct {
	strategy     string
	retried      int           // clients refused at least once
	firstRetryOK int           // of them, those whose first retry was admitted
	peak         int           // the most retries that arrived in one second
	allServed    time.Duration // from the first arrival until the last client was served
	requests     int           // every request made, first ones included
}

func (s simResult) firstShare() float64 { return float64(s.firstRetryOK) / float64(max(s.retried, 1)) }
func (s simResult) peakRatio() float64  { return float64(s.peak) / simCapacity }

// simRun runs simClients clients through h with strategy, client i first arriving at
// start + arrive(i), and returns what it measured. It must run in a synctest bubble.
func simRun(h http.Handler, strategy simStrategy, arrive func(i int) time.Duration) simResult {
	start := time.Now()
	var (
		mu      sync.Mutex
		res     = simResult{strategy: strategy.name}
		perSec  = map[int64]int{}
		lastEnd time.Time
		wg      sync.WaitGroup
	)
	for i := range simClients {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(i), 35))
			time.Sleep(arrive(i))
			refusals := 0
			for {
				if refusals > 0 {
					mu.Lock()
					perSec[time.Since(start).Milliseconds()/1000]++
					mu.Unlock()
				}
				r := httptest.NewRequest("GET", "/", nil)
				r.RemoteAddr = fmt.Sprintf("198.51.100.%d:%d", i%250, 1000+i)
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				mu.Lock()
				res.requests++
				if w.Code == http.StatusOK {
					if refusals == 1 {
						res.firstRetryOK++
					}
					if now := time.Now(); now.After(lastEnd) {
						lastEnd = now
					}
					mu.Unlock()
					return
				}
				if refusals == 0 {
					res.retried++
				}
				mu.Unlock()
				refusals++
				time.Sleep(strategy.wait(w, refusals, rng))
			}
		})
	}
	wg.Wait()
	for _, n := range perSec {
		res.peak = max(res.peak, n)
	}
	res.allServed = lastEnd.Sub(start)
	return res
}

// simService is the service: simSlots requests at once behind c, each taking simService.
func simHandler(c *Concurrency) http.Handler {
	return c.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(simService)
	}))
}

// simTable formats results as the Markdown table of the feature's doc.
func simTable(rs []simResult) string {
	var b strings.Builder
	b.WriteString("| clients wait | first retries admitted | peak return rate | all served after | requests |\n")
	b.WriteString("|---|--:|--:|--:|--:|\n")
	for _, r := range rs {
		fmt.Fprintf(&b, "| %s | %.1f%% | %.2f× | %.1f s | %d |\n",
			r.strategy, 100*r.firstShare(), r.peakRatio(), r.allServed.Seconds(), r.requests)
	}
	return b.String()
}

// TestSimulationConcurrency is the herd at a concurrency limit: 1,000 clients arrive within
// one second at a service that serves 100 a second (10 slots of 100 ms, a queue of 100), and
// retry until served. Told the Concurrency's spread Retry-After, nearly every first retry is
// admitted and the retries come back at the service's rate.
func TestSimulationConcurrency(t *testing.T) {
	var rs []simResult
	for _, s := range []simStrategy{obey, fixed, backoff} {
		synctest.Test(t, func(t *testing.T) {
			c := &Concurrency{Max: simSlots, Queue: simQueue}
			rs = append(rs, simRun(simHandler(c), s, func(i int) time.Duration {
				return time.Duration(i) * 999_983 // a prime number of ns apart: no two at once
			}))
		})
	}
	t.Logf("concurrency limit, %d clients, capacity %.0f/s:\n%s", simClients, simCapacity, simTable(rs))
	simGoals(t, rs[0])
}

// TestSimulationMaintenance is the herd at the end of a maintenance: 1,000 clients arrive over
// the minute of the window, are refused, and come back to the same service as in
// TestSimulationConcurrency once it ends. With ReturnRate at the service's capacity, the clients
// are told different seconds after the end and come back at the rate it serves.
func TestSimulationMaintenance(t *testing.T) {
	const window = time.Minute
	var rs []simResult
	for _, run := range []struct {
		s    simStrategy
		rate float64
		name string
	}{
		{obey, simCapacity, "Retry-After as sent, ReturnRate 100"},
		{obey, 0, "Retry-After as sent, no ReturnRate (the end itself)"},
		{fixed, simCapacity, ""},
		{backoff, simCapacity, ""},
	} {
		synctest.Test(t, func(t *testing.T) {
			m := &retryafter.Maintenance{ReturnRate: rate.Limit(run.rate)}
			m.Start(time.Now().Add(window))
			go func() {
				time.Sleep(window)
				m.Stop()
			}()
			c := &Concurrency{Max: simSlots, Queue: simQueue}
			r := simRun(m.Handler(simHandler(c)), run.s, func(i int) time.Duration {
				return 1_234_567 + time.Duration(i)*59_999_981 // spread over the window, none at once
			})
			if run.name != "" {
				r.strategy = run.name
			}
			rs = append(rs, r)
		})
	}
	t.Logf("end of a %v maintenance, %d clients, capacity %.0f/s:\n%s", window, simClients, simCapacity, simTable(rs))
	simGoals(t, rs[0])
}

// simGoals checks the goals of the spread Retry-After.
func simGoals(t *testing.T, r simResult) {
	t.Helper()
	if r.retried < simClients/2 {
		t.Errorf("only %d of %d clients were refused: the simulation is no herd", r.retried, simClients)
	}
	if got := r.firstShare(); got < 0.95 {
		t.Errorf("%.1f%% of first retries admitted, want at least 95%%", 100*got)
	}
	if got := r.peakRatio(); got > 1.1 {
		t.Errorf("peak return rate %.2f× the capacity, want at most 1.1×", got)
	}
}
