package interop

import (
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hashicorp/go-retryablehttp"

	"github.com/retryafter/retryafter/gateway"
	"github.com/retryafter/retryafter/retryclient"
)

// A client is a retrying HTTP client that nobody tuned for this test: it sends one GET through
// rt and retries as it does by default.
type client struct {
	name string
	get  func(rt http.RoundTripper) (status int, err error)
}

var clients = []client{
	{"retryclient.Transport", func(rt http.RoundTripper) (int, error) {
		c := &http.Client{Transport: &retryclient.Transport{Base: rt}}
		resp, err := c.Get("http://api.test/")
		if err != nil {
			return 0, err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, nil
	}},
	{"go-retryablehttp", func(rt http.RoundTripper) (int, error) {
		c := retryablehttp.NewClient() // RetryMax 4, waits 1 s to 30 s, DefaultBackoff
		c.Logger = nil
		c.HTTPClient = &http.Client{Transport: rt}
		resp, err := c.Get("http://api.test/")
		if err != nil {
			return 0, err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, nil
	}},
}

// The upstreams of the issues: go-limiter with windows of 10 s and 60 s, httprate with 500 ms,
// and ulule/limiter with 10 s, which says when only in X-RateLimit-Reset, a Unix time.
var upstreams = []upstream{goLimiter(3, 10*time.Second), goLimiter(3, time.Minute), httpRate(3, 500*time.Millisecond),
	ulule(3, 10*time.Second)}

// Where the upstream's limiter starts within its second: with the upstream's delays (how long
// after its quota is spent the client comes), the order of the two fractions decides whether a
// date cut to the second would send a client back early.
var phases = []time.Duration{0, 250 * time.Millisecond, 750 * time.Millisecond}

// An outcome is what one client saw of one upstream over every phase and delay.
type outcome struct {
	tries    []int           // tries per run
	through  int             // runs that ended in 200
	admitted []time.Duration // per run that got through, from its first try to the 200
	runs     int
}

func (o outcome) String() string {
	lo, hi := slices.Min(o.tries), slices.Max(o.tries)
	tries := fmt.Sprint(lo)
	if hi != lo {
		tries = fmt.Sprintf("%d–%d", lo, hi)
	}
	s := fmt.Sprintf("%s tries, %d/%d through", tries, o.through, o.runs)
	if len(o.admitted) > 0 {
		s += fmt.Sprintf(" after %v–%v", slices.Min(o.admitted), slices.Max(o.admitted))
	}
	return s
}

// run sends c once to u, behind a gateway with the Normalizer's defaults or straight, over
// every phase and delay, each in a bubble of its own. Every run's first try is refused.
func run(t *testing.T, c client, u upstream, behindGateway bool) outcome {
	var o outcome
	for _, phase := range phases {
		for _, delay := range u.delays {
			synctest.Test(t, func(t *testing.T) {
				time.Sleep(phase)
				h, stop := u.start(t)
				defer stop()
				if behindGateway {
					h = gatewayTo(h, new(gateway.Normalizer).ModifyResponse)
				}
				// Another client of the same address spends the quota, then this one comes.
				rt := serve(h, "192.0.2.1:1234")
				for range u.limit {
					if s := get(t, rt); s != http.StatusOK {
						t.Fatalf("%s: %d while spending the quota", u.name, s)
					}
				}
				time.Sleep(delay)
				log := &tryLog{next: rt}
				status, _ := c.get(log)
				if len(log.tries) == 0 || log.tries[0].status != http.StatusTooManyRequests {
					t.Fatalf("%s, %s: the first try was not refused: %+v", c.name, u.name, log.tries)
				}
				o.runs++
				o.tries = append(o.tries, len(log.tries))
				if status == http.StatusOK {
					o.through++
					o.admitted = append(o.admitted, log.tries[len(log.tries)-1].at.Sub(log.tries[0].at))
				}
			})
		}
	}
	return o
}

// TestFirstRetryBehindGateway puts the gateway in front of upstreams built on go-limiter and
// httprate and shows that this repository's Transport and go-retryablehttp, with their
// defaults, both get through on their first retry: two tries, wherever in its second the
// upstream's limiter runs. It logs the table of tries, per client and upstream, and the same
// without the gateway, for comparison.
func TestFirstRetryBehindGateway(t *testing.T) {
	var table strings.Builder
	table.WriteString("| client | upstream | behind the gateway | straight to the upstream |\n| --- | --- | --- | --- |\n")
	for _, c := range clients {
		for _, u := range upstreams {
			behind := run(t, c, u, true)
			straight := run(t, c, u, false)
			fmt.Fprintf(&table, "| %s | %s | %v | %v |\n", c.name, u.name, behind, straight)
			if slices.Max(behind.tries) != 2 || behind.through != behind.runs {
				t.Errorf("%s behind the gateway to %s: %v; want every run through on its first retry (2 tries)", c.name, u.name, behind)
			}
		}
	}
	t.Logf("tries per client and upstream, over %d phases and delays each:\n%s", len(phases)*3, table.String())
}
