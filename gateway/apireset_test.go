package gateway

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/retryafter/retryafter/retryclient"
)

// The tests below put a retryclient.Transport in front of an upstream on 127.0.0.1 that refuses
// as OpenAI, Anthropic or GitHub do, directly and through a gateway (an httputil.ReverseProxy
// with a Normalizer) on 127.0.0.1 too. The client runs in a testing/synctest bubble, so that a
// wait of six minutes takes none; the upstream and the gateway serve outside it, and read the
// bubble's clock as the client stamps it on each try (fakeClock), so that every party agrees on
// the time while each keeps its own skew.

// fakeClock is the bubble's clock as the client last read it, for servers outside the bubble.
type fakeClock struct{ nanos atomic.Int64 }

func (c *fakeClock) now() time.Time { return time.Unix(0, c.nanos.Load()).UTC() }

// stamp returns a RoundTripper that sets c to the bubble's time, then sends the request on a
// connection of its own, closed with the response, so that nothing of the bubble waits on the
// network while the client sleeps.
func (c *fakeClock) stamp() http.RoundTripper {
	base := &http.Transport{DisableKeepAlives: true}
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		c.nanos.Store(time.Now().UnixNano())
		return base.RoundTrip(r)
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// apiUpstream refuses every request until a reset, which its first request sets, as an API
// whose quota that request found spent: it answers with refuse, given the upstream's clock
// (the fake clock plus skew) and the reset. From the reset on it answers 200.
type apiUpstream struct {
	clock  *fakeClock
	skew   time.Duration
	window time.Duration
	refuse func(w http.ResponseWriter, now, reset time.Time)

	mu    sync.Mutex
	reset time.Time
}

func (u *apiUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	now := u.clock.now().Add(u.skew)
	u.mu.Lock()
	if u.reset.IsZero() {
		u.reset = now.Add(u.window)
	}
	reset := u.reset
	u.mu.Unlock()
	w.Header().Set("Date", now.Format(http.TimeFormat))
	if now.Before(reset) {
		u.refuse(w, now, reset)
		return
	}
	io.WriteString(w, "ok")
}

// TestAPIResetsFirstRetry checks, for each API's refusal, directly and through the gateway, that
// the client waits what the upstream meant, to the second (the reset read to the end of the
// second it names, where the API cuts it to the second), and is admitted on its first retry.
func TestAPIResetsFirstRetry(t *testing.T) {
	const offset = 300 * time.Millisecond // the upstream's clock is not on a whole second
	tests := []struct {
		name   string
		skew   time.Duration // of the upstream's clock, ahead of the client's
		window time.Duration // from the first request to the reset
		refuse func(w http.ResponseWriter, now, reset time.Time)
		// want is the wait the client chooses, directly and through the gateway.
		direct, gateway time.Duration
	}{
		{name: "OpenAI: 429 with only x-ratelimit-reset-requests: 6m0s", window: 6 * time.Minute,
			refuse: func(w http.ResponseWriter, now, reset time.Time) {
				w.Header().Set("X-Ratelimit-Reset-Requests", reset.Sub(now).String())
				w.WriteHeader(http.StatusTooManyRequests)
			},
			direct: 6 * time.Minute, gateway: 6 * time.Minute},
		{name: "Anthropic: 429 with RFC 3339 resets and a skewed Date", skew: time.Hour + offset, window: 171 * time.Second,
			refuse: func(w http.ResponseWriter, now, reset time.Time) {
				h := w.Header()
				h.Set("Anthropic-Ratelimit-Requests-Remaining", "12")
				h.Set("Anthropic-Ratelimit-Requests-Reset", now.Add(2*time.Second).Format(time.RFC3339))
				h.Set("Anthropic-Ratelimit-Tokens-Remaining", "0")
				h.Set("Anthropic-Ratelimit-Tokens-Reset", reset.Format(time.RFC3339)) // cut to the second
				w.WriteHeader(http.StatusTooManyRequests)
			},
			// The reset is 171.3 s after the upstream's clock, cut to 171 s after its Date,
			// which cuts 0.3 s off that clock: read to the end of its second, 172 s.
			direct: 172 * time.Second, gateway: 172 * time.Second},
		{name: "GitHub: 403 with x-ratelimit-remaining: 0 and an epoch reset", skew: -2*time.Hour + offset, window: 3025 * time.Second,
			refuse: func(w http.ResponseWriter, now, reset time.Time) {
				h := w.Header()
				h.Set("X-Ratelimit-Limit", "60")
				h.Set("X-Ratelimit-Remaining", "0")
				h.Set("X-Ratelimit-Reset", strconv.FormatInt(reset.Unix(), 10))
				w.WriteHeader(http.StatusForbidden)
			},
			// The reset is 3025.3 s after the upstream's clock, cut to the second, 3025 s after
			// its Date: read to the end of that second, 3026 s.
			direct: 3026 * time.Second, gateway: 3026 * time.Second},
	}
	for _, tt := range tests {
		for _, through := range []string{"direct", "gateway"} {
			t.Run(tt.name+"/"+through, func(t *testing.T) {
				clock := new(fakeClock)
				up := &apiUpstream{clock: clock, skew: tt.skew, window: tt.window, refuse: tt.refuse}
				upstream := httptest.NewServer(up)
				defer upstream.Close()
				target := upstream.URL
				want := tt.direct
				if through == "gateway" {
					u, _ := url.Parse(upstream.URL)
					proxy := httputil.NewSingleHostReverseProxy(u)
					proxy.ModifyResponse = (&Normalizer{Now: clock.now}).ModifyResponse
					gw := httptest.NewServer(proxy)
					defer gw.Close()
					target, want = gw.URL, tt.gateway
				}
				synctest.Test(t, func(t *testing.T) {
					var waits []time.Duration
					var sent []time.Time
					client := &http.Client{Transport: &retryclient.Transport{
						Base: roundTripFunc(func(r *http.Request) (*http.Response, error) {
							sent = append(sent, time.Now())
							return clock.stamp().RoundTrip(r)
						}),
						Backoff: &retryclient.Backoff{Cap: time.Hour + time.Minute},
						OnRetry: func(_ *http.Response, _ int, wait time.Duration) { waits = append(waits, wait) },
					}}
					resp, err := client.Get(target)
					if err != nil {
						t.Fatal(err)
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != http.StatusOK || len(sent) != 2 {
						t.Fatalf("after %d tries (waits %v): %s; want 200 on the first retry", len(sent), waits, resp.Status)
					}
					if len(waits) != 1 || waits[0] != want {
						t.Errorf("waited %v; want %v", waits, want)
					}
					if meant := up.reset.Sub(sent[0].Add(tt.skew)); waits[0] < meant || waits[0] > meant+time.Second {
						t.Errorf("waited %v; the upstream meant %v, and a second more at most", waits[0], meant)
					}
				})
			})
		}
	}
}
