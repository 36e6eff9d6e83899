package retryclient

import (
	"errors"
	"math/rand/v2"
	"net/http"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"golang.org/x/time/rate"

	"github.com/retryafter/retryafter"
	"github.com/retryafter/retryafter/internal/header"
)

// TestTransportWaitAboveCap checks, over many random waits and caps, that a server's wait
// within Cap is waited exactly and retried, and one above it is not waited at all: the
// response comes back after that one try, its body untouched, and Delay says why.
func TestTransportWaitAboveCap(t *testing.T) {
	r := rand.New(rand.NewPCG(33, 1))
	for range 200 {
		secs := 1 + r.IntN(7200)
		capSecs := 1 + r.IntN(600)
		if r.IntN(4) == 0 {
			capSecs = 0 // the default, 5 minutes
		}
		synctest.Test(t, func(t *testing.T) {
			b := &Backoff{Cap: time.Duration(capSecs) * time.Second}
			srv := newScriptedServer(answerTooMany(secs), answer(http.StatusOK))
			start := time.Now()
			resp, err := (&Transport{Base: srv, Backoff: b}).RoundTrip(newTestRequest(t, http.MethodGet, nil))
			if err != nil {
				t.Fatal(err)
			}
			limit := b.limit()
			wait := time.Duration(secs) * time.Second
			tries := srv.log()
			if wait <= limit {
				if resp.StatusCode != http.StatusOK || !sameDurations(tryOffsets(tries), []time.Duration{0, wait}) {
					t.Fatalf("Retry-After %d, Cap %v: %d after tries at %v; want 200 after %v", secs, limit, resp.StatusCode, tryOffsets(tries), wait)
				}
				return
			}
			if resp.StatusCode != http.StatusTooManyRequests || len(tries) != 1 || time.Since(start) != 0 {
				t.Fatalf("Retry-After %d, Cap %v: %d after %d tries and %v; want the 429 at once", secs, limit, resp.StatusCode, len(tries), time.Since(start))
			}
			if read, closed := tries[0].resp.state(); read != 0 || closed {
				t.Errorf("returned body read %d bytes, closed %v; want untouched", read, closed)
			}
			d, err := b.Delay(resp, 1)
			var tooLong *WaitTooLongError
			if !errors.As(err, &tooLong) || d != wait || *tooLong != (WaitTooLongError{Wait: wait, Cap: limit, Field: "Retry-After"}) {
				t.Fatalf("Delay = %v, %v; want %v and a WaitTooLongError", d, err, wait)
			}
			if got := b.Wait(resp, 1); got != limit {
				t.Errorf("Wait = %v, want the cap %v", got, limit)
			}
		})
	}
}

// TestBackoffDelay pins what Delay says for each kind of answer: a wait above Cap from every
// field that can say one is an error naming the field, never with jitter; anything else is
// Wait's answer with no error.
func TestBackoffDelay(t *testing.T) {
	const date = "Sun, 29 Nov 2026 12:00:00 GMT" // t0
	epoch := func(secs int64) string { return strconv.FormatInt(t0.Unix()+secs, 10) }
	b := &Backoff{Cap: time.Minute, Jitter: 10 * time.Second, Rand: constRand(1), Now: func() time.Time { return t0 }}
	for _, tt := range []struct {
		resp  *http.Response
		want  time.Duration
		field string // "" when no error
	}{
		{respWith(429, "Retry-After", "61"), 61 * time.Second, "Retry-After"},
		{respWith(503, "Retry-After", "Sun, 29 Nov 2026 12:05:00 GMT", "Date", date), 301 * time.Second, "Retry-After"},
		{respWith(429, "Retry-After-Ms", "60001"), 60001 * time.Millisecond, "Retry-After-Ms"},
		{respWith(429, "Ratelimit", `"day";r=0;t=86400`), 24 * time.Hour, "Ratelimit"},
		{respWith(429, "X-Ratelimit-Reset", epoch(3600), "Date", date), 3601 * time.Second, "X-Ratelimit-Reset"},
		{respWith(429, "Retry-After", "99999999999999999999"), 1<<63 - 1, "Retry-After"},
		// Within the cap: the server's wait with its jitter, capped.
		{respWith(429, "Retry-After", "55"), time.Minute, ""},
		{respWith(429, "Retry-After", "60"), time.Minute, ""},
		{respWith(429, "Retry-After", "20"), 30 * time.Second, ""},
		// The fallback is the client's own, capped, never an error.
		{respWith(429), 500 * time.Millisecond, ""},
		{respWith(500, "Retry-After", "3600"), 500 * time.Millisecond, ""},
	} {
		d, err := b.Delay(tt.resp, 1)
		var tooLong *WaitTooLongError
		switch {
		case tt.field == "" && (err != nil || d != tt.want):
			t.Errorf("%d %v: Delay = %v, %v; want %v, nil", tt.resp.StatusCode, tt.resp.Header, d, err, tt.want)
		case tt.field != "" && (!errors.As(err, &tooLong) || d != tt.want || tooLong.Wait != tt.want || tooLong.Field != tt.field || tooLong.Cap != time.Minute):
			t.Errorf("%d %v: Delay = %v, %v; want %v and a WaitTooLongError from %s", tt.resp.StatusCode, tt.resp.Header, d, err, tt.want, tt.field)
		case tt.field != "" && err.Error() == "":
			t.Errorf("empty error message")
		}
	}
	if got, want := (&WaitTooLongError{Wait: time.Hour, Cap: 5 * time.Minute, Field: "Retry-After"}).Error(),
		"retryclient: Retry-After asks for a wait of 1h0m0s, above the cap of 5m0s"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if _, err := (*Backoff)(nil).Delay(respWith(429, "Retry-After", "301"), 1); err == nil {
		t.Error("a nil Backoff let a wait above the default cap of 5 minutes pass")
	}
}

// TestBackoffResetFields checks that without a usable Retry-After the reset fields give the
// server's wait, read as the gateway reads them, and that Retry-After still wins when usable.
func TestBackoffResetFields(t *testing.T) {
	const date = "Sun, 29 Nov 2026 12:00:00 GMT" // t0
	epoch := func(secs int64) string { return strconv.FormatInt(t0.Unix()+secs, 10) }
	b := &Backoff{Rand: constRand(1), Now: func() time.Time { return t0.Add(time.Hour) }} // an hour fast: it must not matter
	for _, tt := range []struct {
		resp *http.Response
		want time.Duration
	}{
		{respWith(429, "Retry-After-Ms", "1500"), 1500 * time.Millisecond},
		{respWith(429, "Retry-After", "soon", "Retry-After-Ms", "250"), 250 * time.Millisecond},
		{respWith(429, "Retry-After", "3", "Retry-After-Ms", "250"), 3 * time.Second},
		{respWith(429, "Ratelimit", `"default";r=0;t=12`), 12 * time.Second},
		{respWith(429, "Ratelimit", `"default";r=4;t=12`), 500 * time.Millisecond}, // quota left: the fallback
		{respWith(503, "Ratelimit-Reset", "9"), 9 * time.Second},
		{respWith(429, "X-Ratelimit-Reset", "30"), 30 * time.Second},
		{respWith(429, "X-Ratelimit-Reset", epoch(10), "Date", date), 11 * time.Second}, // the end of the second it names
		{respWith(429, "X-Ratelimit-Reset", epoch(-2), "Date", date), 500 * time.Millisecond},
		{respWith(500, "X-Ratelimit-Reset", "30"), 500 * time.Millisecond}, // honoured on 429 and 503 only
	} {
		if got := b.Wait(tt.resp, 1); got != tt.want {
			t.Errorf("%d %v: Wait = %v, want %v", tt.resp.StatusCode, tt.resp.Header, got, tt.want)
		}
	}
}

// TestRoundTripResetFieldsOnly puts the Transport in front of the middleware with its rate-limit
// fields on, behind something that strips Retry-After from its 429s and keeps only one of the
// fields that say when: over random rates and bursts, a client that spends the burst and asks
// once more is retried once, after exactly the wait the middleware meant, and admitted.
func TestRoundTripResetFieldsOnly(t *testing.T) {
	r := rand.New(rand.NewPCG(33, 3))
	keep := []string{"Ratelimit", "X-Ratelimit-Reset"}
	for i := range 60 {
		every := time.Duration(1+r.IntN(20000)) * time.Millisecond
		burst := 1 + r.IntN(5)
		field := keep[i%len(keep)]
		synctest.Test(t, func(t *testing.T) {
			limited := retryafter.Limit(rate.Every(every), burst, retryafter.WithClock(time.Now),
				retryafter.WithRateLimitFields(""), retryafter.WithLegacyRateLimitFields(true))(ok)
			srv := roundTripServer{h: limited, remote: "192.0.2.1:1234"}
			var tries []time.Time
			var stated string
			strip := transportFunc(func(req *http.Request) (*http.Response, error) {
				tries = append(tries, time.Now())
				resp, err := srv.RoundTrip(req)
				if err == nil && resp.StatusCode == http.StatusTooManyRequests {
					stated = resp.Header.Get(field)
					for _, name := range []string{"Retry-After", "Ratelimit", "X-Ratelimit-Reset"} {
						if name != field {
							delete(resp.Header, name)
						}
					}
				}
				return resp, err
			})
			client := &http.Client{Transport: &Transport{Base: strip, MaxAttempts: 2}}
			for range burst {
				if resp, err := client.Get("http://example.test/"); err != nil || resp.StatusCode != http.StatusOK {
					t.Fatalf("spending the burst: %v, %v", resp, err)
				}
			}
			tries = nil
			resp, err := client.Get("http://example.test/")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || len(tries) != 2 {
				t.Fatalf("every %v, burst %d, only %s (%q): %d after %d tries; want 200 on the first retry",
					every, burst, field, stated, resp.StatusCode, len(tries))
			}
			// On a 429 both fields state the Retry-After they replace: a token's wait, rounded up.
			want := time.Duration(header.DelaySeconds(every)) * time.Second
			if gap := tries[1].Sub(tries[0]); gap != want {
				t.Errorf("every %v, burst %d, only %s (%q): retried after %v, want %v", every, burst, field, stated, gap, want)
			}
		})
	}
}
