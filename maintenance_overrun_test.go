package retryafter

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// overrunCost is what a group of clients of one overrun saw from the announced end on.
type overrunCost struct {
	clients      int
	maxExtra     time.Duration // the longest a client was kept out after Stop
	meanExtra    time.Duration
	maxRefusals  int // the most 503s one client got at or after the announced end
	meanRefusals float64
}

func (c *overrunCost) add(extra time.Duration, refusals int) {
	c.meanExtra = (c.meanExtra*time.Duration(c.clients) + extra) / time.Duration(c.clients+1)
	c.meanRefusals = (c.meanRefusals*float64(c.clients) + float64(refusals)) / float64(c.clients+1)
	c.clients++
	c.maxExtra = max(c.maxExtra, extra)
	c.maxRefusals = max(c.maxRefusals, refusals)
}

func (c overrunCost) String() string {
	return fmt.Sprintf("%d clients: kept out after Stop %v on average, at most %v; refused from the end on %.1f times on average, at most %d",
		c.clients, c.meanExtra.Round(10*time.Millisecond), c.maxExtra.Round(10*time.Millisecond), c.meanRefusals, c.maxRefusals)
}

// measureOverrun runs a maintenance announced to end at a fractional instant and stopped
// overrun later, on a clock moved by hand, against clients that arrive every step from 20 s
// before the end until Stop, each of which waits exactly what each 503 says (measured against
// its Date, as ParseRetryAfter reads it) and retries until admitted. It returns what the
// returning clients (those that came during the announced work and were told to come back at
// its end) and the late ones (those that came during the overrun) saw.
func measureOverrun(t *testing.T, httpDate bool, overrun, step time.Duration) (returning, late overrunCost) {
	t.Helper()
	end := t0.Add(30*time.Second + 370*time.Millisecond)
	stop := end.Add(overrun)
	clk := newClock(t0)
	m := &Maintenance{Now: clk.Now, HTTPDate: httpDate}
	h := m.Handler(ok)
	for arrive := end.Add(-20 * time.Second); arrive.Before(stop); arrive = arrive.Add(step) {
		clk.Set(arrive)
		refusals := 0
		for {
			now := clk.Now()
			if now.Before(stop) {
				m.Start(end)
			} else {
				m.Stop()
			}
			w := serve(h, "GET", client)
			if w.Code == http.StatusOK {
				break
			}
			wait, ok := ParseRetryAfter(w.Header(), now)
			if !ok || wait <= 0 {
				t.Fatalf("at end%+v: Retry-After %q, Date %q: no wait", now.Sub(end), w.Header().Get("Retry-After"), w.Header().Get("Date"))
			}
			if !now.Before(end) {
				refusals++
			}
			if refusals > 100 {
				t.Fatalf("a client arriving at end%+v was refused more than 100 times", arrive.Sub(end))
			}
			clk.Set(now.Add(wait))
		}
		if arrive.Before(end) {
			returning.add(clk.Now().Sub(stop), refusals)
		} else {
			late.add(clk.Now().Sub(stop), refusals)
		}
	}
	return returning, late
}

// TestMaintenanceOverrunCost measures what an overrun of 1 s, 10 s and 60 s costs the clients
// that come back when told: how long after Stop they are kept out, and how many 503s each gets
// from the announced end on. An overrun of a few seconds must cost a few seconds: no client is
// kept out after Stop longer than the overrun itself (rounded up to the second; the date form
// may add two more, a date rounded up and a Date truncated), and the refusals of each grow with
// the logarithm of the overrun, not with it.
func TestMaintenanceOverrunCost(t *testing.T) {
	var table strings.Builder
	table.WriteString("| form | overrun | clients | what they saw |\n| --- | --- | --- | --- |\n")
	for _, httpDate := range []bool{false, true} {
		form, slack := "seconds", time.Second
		if httpDate {
			form, slack = "HTTP-date", 3*time.Second
		}
		for _, overrun := range []time.Duration{time.Second, 10 * time.Second, time.Minute} {
			returning, late := measureOverrun(t, httpDate, overrun, 130*time.Millisecond)
			fmt.Fprintf(&table, "| %s | %v | returning | %v |\n| %s | %v | arriving late | %v |\n",
				form, overrun, returning, form, overrun, late)
			bound := 2 + bitsLen(overrun/time.Second)
			for _, c := range []overrunCost{returning, late} {
				if c.maxExtra > overrun+slack || c.maxRefusals > bound {
					t.Errorf("%s, overrun %v: %v; want at most %v after Stop and %d refusals", form, overrun, c, overrun+slack, bound)
				}
			}
		}
	}
	t.Logf("clients arriving every 130 ms from 20 s before the announced end until Stop:\n%s", table.String())
}

// bitsLen returns the number of bits of n: ⌊log2 n⌋ + 1 for n > 0.
func bitsLen(n time.Duration) int {
	b := 0
	for ; n > 0; n >>= 1 {
		b++
	}
	return b
}
