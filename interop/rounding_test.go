package interop

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/retryafter/retryafter"
	"github.com/retryafter/retryafter/gateway"
	"github.com/retryafter/retryafter/retryclient"
)

// A roundingFigure is what clients of one upstream saw behind a gateway, over many runs.
type roundingFigure struct {
	runs, refusedRetries, tries int
	late                        []time.Duration // per run: admitted this long after the upstream could admit
}

func (f roundingFigure) String() string {
	var sum time.Duration
	for _, d := range f.late {
		sum += d
	}
	return fmt.Sprintf("%d/%d first retries refused, %.2f tries a client, admitted %v–%v (mean %v) after the upstream could",
		f.refusedRetries, f.runs, float64(f.tries)/float64(f.runs),
		slices.Min(f.late).Round(time.Millisecond), slices.Max(f.late).Round(time.Millisecond),
		(sum / time.Duration(len(f.late))).Round(time.Millisecond))
}

// measureRounding sends one retryclient.Transport client per run through a gateway with
// Normalizer.ExactDates as given to an upstream made by start, which returns its handler and
// the instant from which it admits the client again. Each run is in a bubble of its own, at a
// random phase within the second.
func measureRounding(t *testing.T, exact bool, runs int, start func(t *testing.T, rng *rand.Rand) (http.Handler, time.Time)) roundingFigure {
	rng := rand.New(rand.NewPCG(14, 15))
	var f roundingFigure
	for range runs {
		seed := rng.Uint64()
		synctest.Test(t, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 1))
			time.Sleep(time.Duration(rng.Int64N(int64(time.Second))))
			up, from := start(t, rng)
			gw := gatewayTo(up, (&gateway.Normalizer{ExactDates: exact}).ModifyResponse)
			log := &tryLog{next: serve(gw, "192.0.2.1:1234")}
			c := &http.Client{Transport: &retryclient.Transport{Base: log, MaxAttempts: 10}}
			resp, err := c.Get("http://api.test/")
			if err != nil || resp.StatusCode != http.StatusOK {
				t.Fatalf("ended with %v, %v after %+v", resp, err, log.tries)
			}
			resp.Body.Close()
			if log.tries[0].status == http.StatusOK {
				t.Fatalf("the first try was admitted: the run measures nothing")
			}
			f.runs++
			f.tries += len(log.tries)
			if log.tries[1].status != http.StatusOK {
				f.refusedRetries++
			}
			f.late = append(f.late, log.tries[len(log.tries)-1].at.Sub(from))
		})
	}
	return f
}

// TestDateRoundingMeasured measures what reading an upstream's date as the end of the second it
// names (the Normalizer's default) costs and saves, against reading it as the instant it names
// (ExactDates), for an upstream that cuts its dates to the second (go-limiter, 10 s window) and
// for one that rounds them up (retryafter.Maintenance with HTTPDate). It logs the figures, and
// holds the default to what they showed when it was chosen: against the cutting upstream, exact
// dates send a large share of clients back early, the default none, for under two seconds of
// extra wait; against the rounding one, the default costs one second and nothing else.
func TestDateRoundingMeasured(t *testing.T) {
	const runs = 200
	cutting := func(t *testing.T, rng *rand.Rand) (http.Handler, time.Time) {
		const window = 10 * time.Second
		h := mustHandle(t, goLimiter(3, window))
		rt := serve(gatewayTo(h, nil), "192.0.2.1:1234") // the upstream keys by the gateway's address
		from := time.Now().Add(window)                   // the bucket starts now and refills at the window's end
		for range 3 {
			get(t, rt)
		}
		time.Sleep(time.Duration(rng.Int64N(int64(window - time.Second))))
		return h, from
	}
	roundingUp := func(t *testing.T, rng *rand.Rand) (http.Handler, time.Time) {
		until := time.Now().Add(time.Duration(rng.Int64N(int64(time.Minute))))
		m := &retryafter.Maintenance{HTTPDate: true}
		m.Start(until)
		go func() { time.Sleep(time.Until(until)); m.Stop() }()
		return m.Handler(ok), until
	}
	var table strings.Builder
	figures := map[string]roundingFigure{}
	for _, up := range []struct {
		name  string
		start func(*testing.T, *rand.Rand) (http.Handler, time.Time)
	}{{"go-limiter 10s (cuts to the second)", cutting}, {"Maintenance, HTTPDate (rounds up)", roundingUp}} {
		for _, exact := range []bool{true, false} {
			f := measureRounding(t, exact, runs, up.start)
			mode := "default: end of the second"
			if exact {
				mode = "ExactDates"
			}
			figures[fmt.Sprint(up.name[:4], exact)] = f
			fmt.Fprintf(&table, "| %s | %s | %v |\n", up.name, mode, f)
		}
	}
	t.Logf("%d clients each, one try refused first, then retryclient.Transport behind the gateway:\n%s", runs, table.String())

	cutExact, cutDefault := figures["go-ltrue"], figures["go-lfalse"]
	upExact, upDefault := figures["Maintrue"], figures["Mainfalse"]
	if cutExact.refusedRetries < runs/4 {
		t.Errorf("ExactDates against a cutting upstream: only %d/%d first retries refused; the default was chosen for about half", cutExact.refusedRetries, runs)
	}
	if cutDefault.refusedRetries != 0 || slices.Max(cutDefault.late) >= 2*time.Second {
		t.Errorf("default against a cutting upstream: %v; want no refused retry and under two seconds late", cutDefault)
	}
	if upExact.refusedRetries != 0 || upDefault.refusedRetries != 0 ||
		slices.Min(upDefault.late) < time.Second || slices.Max(upDefault.late) >= 3*time.Second || slices.Max(upExact.late) >= 2*time.Second {
		t.Errorf("against a rounding upstream: exact %v, default %v; want no refusals, the default a second later", upExact, upDefault)
	}
}

// mustHandle starts u and returns its handler; what it holds is released when the test ends.
func mustHandle(t *testing.T, u upstream) http.Handler {
	h, stop := u.start(t)
	t.Cleanup(stop)
	return h
}
