package retryclient

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math"
	"math/big"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/retryafter/retryafter"
)

// fallbackCeil is the ceiling of the fallback for attempt, computed
// independently of transport.go.
func fallbackCeil(base, max time.Duration, attempt int) time.Duration {
	if attempt < 1 {
		attempt = 1
	}
	c := new(big.Int).Lsh(big.NewInt(int64(base)), uint(min(attempt-1, 100)))
	if c.Cmp(big.NewInt(int64(max))) > 0 {
		return max
	}
	return time.Duration(c.Int64())
}

func TestBackoffHonoursRetryAfter(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	// The local clock is an hour off: it must not matter.
	b := &Backoff{Now: func() time.Time { return t0.Add(time.Hour) }, Rand: constRand(0.99)}
	exact := *b
	exact.ExactDates = true
	for i := 0; i < 2000; i++ {
		secs := 1 + r.IntN(298) // within the default cap of 5 minutes, a date's second included
		want := time.Duration(secs) * time.Second
		for _, status := range []int{http.StatusTooManyRequests, http.StatusServiceUnavailable} {
			attempt := 1 + r.IntN(10)
			if got := b.Wait(respWith(status, "Retry-After", strconv.Itoa(secs)), attempt); got != want {
				t.Fatalf("%d, Retry-After: %d: Wait = %v, want %v", status, secs, got, want)
			}
			for _, l := range dateLayouts {
				resp := respWith(status,
					"Date", t0.Format(l.layout),
					"Retry-After", t0.Add(want).Format(l.layout))
				// By default a date is read to the end of the second it names.
				if got := b.Wait(resp, attempt); got != want+time.Second {
					t.Fatalf("%d, %v: Wait = %v, want %v", status, resp.Header, got, want+time.Second)
				}
				if got := exact.Wait(resp, attempt); got != want {
					t.Fatalf("%d, %v with ExactDates: Wait = %v, want %v", status, resp.Header, got, want)
				}
			}
		}
	}
}

// TestBackoffGitHubForbidden checks that GitHub's 403 for a rate limit is waited as a 429 is:
// its primary limit until X-RateLimit-Reset, measured against Date, its secondary limits for
// their Retry-After; and that any other 403 gets the client's own backoff, whatever it says.
func TestBackoffGitHubForbidden(t *testing.T) {
	b := &Backoff{Now: func() time.Time { return t0.Add(time.Hour) }, Rand: constRand(1), Base: time.Second, Max: time.Second}
	date := t0.Format(http.TimeFormat)
	reset := strconv.FormatInt(t0.Add(100*time.Second).Unix(), 10)
	for _, tt := range []struct {
		name string
		resp *http.Response
		want time.Duration
	}{
		{"primary", respWith(403, "Date", date, "X-Ratelimit-Remaining", "0", "X-Ratelimit-Reset", reset), 101 * time.Second},
		{"secondary", respWith(403, "Date", date, "Retry-After", "60", "X-Ratelimit-Remaining", "4990", "X-Ratelimit-Reset", reset), 60 * time.Second},
		{"not a rate limit", respWith(403, "Date", date, "X-Ratelimit-Remaining", "4990", "X-Ratelimit-Reset", reset), time.Second},
		{"Retry-After alone", respWith(403, "Date", date, "Retry-After", "60"), time.Second},
	} {
		if got := b.Wait(tt.resp, 1); got != tt.want {
			t.Errorf("%s: Wait = %v; want %v", tt.name, got, tt.want)
		}
	}
}

// TestBackoffGenerous pins the waits read from values that real servers send and that the
// strict reader refuses (or, for 0, reads as "now"): each is read as its sender meant.
func TestBackoffGenerous(t *testing.T) {
	const date = "Sun, 29 Nov 2026 12:00:00 GMT"
	b := &Backoff{Now: func() time.Time { return t0.Add(time.Hour) }, Rand: constRand(1)} // an hour fast
	exact := &Backoff{Now: b.Now, Rand: b.Rand, ExactDates: true}
	for _, tt := range []struct {
		name        string
		resp        *http.Response
		want, exact time.Duration
	}{
		{"0: under a second", respWith(429, "Retry-After", "0"), time.Second, time.Second},
		{"000 on a 503", respWith(503, "Retry-After", "000"), time.Second, time.Second},
		{"1.5, rounded up", respWith(429, "Retry-After", "1.5"), 2 * time.Second, 2 * time.Second},
		{"0.2, rounded up", respWith(429, "Retry-After", "0.2"), time.Second, time.Second},
		{"+7", respWith(429, "Retry-After", "+7"), 7 * time.Second, 7 * time.Second},
		{"go-limiter's time.RFC1123", respWith(429, "Retry-After", "Sun, 29 Nov 2026 12:00:10 UTC", "Date", date), 11 * time.Second, 10 * time.Second},
		{"time.RFC1123Z", respWith(429, "Retry-After", "Sun, 29 Nov 2026 12:00:10 +0000", "Date", date), 11 * time.Second, 10 * time.Second},
		{"no day name", respWith(503, "Retry-After", "29 Nov 2026 12:01:00 GMT", "Date", date), 61 * time.Second, 60 * time.Second},
		{"date equal to Date", respWith(429, "Retry-After", date, "Date", date), time.Second, time.Second},
		{"UTC date equal to UTC Date", respWith(429, "Retry-After", "Sun, 29 Nov 2026 12:00:00 UTC", "Date", "Sun, 29 Nov 2026 12:00:00 UTC"), time.Second, time.Second},
		// A Date in UTC is read too: against the local clock (an hour fast) the date
		// would be past.
		{"Date in UTC", respWith(503, "Retry-After", "Sun, 29 Nov 2026 12:00:30 GMT", "Date", "Sun, 29 Nov 2026 12:00:00 UTC"), 31 * time.Second, 30 * time.Second},
	} {
		// The strict reader refuses each, or reads it as "now".
		if d, ok := retryafter.ParseRetryAfter(tt.resp.Header, b.Now()); ok && d > 0 {
			t.Errorf("%s: the strict reader reads %q as %v; the case belongs elsewhere", tt.name, tt.resp.Header, d)
		}
		if got := b.Wait(tt.resp, 1); got != tt.want {
			t.Errorf("%s: Wait = %v, want %v", tt.name, got, tt.want)
		}
		if got := exact.Wait(tt.resp, 1); got != tt.exact {
			t.Errorf("%s: Wait with ExactDates = %v, want %v", tt.name, got, tt.exact)
		}
	}
}

func TestBackoffJitterOnlyAdds(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	for i := 0; i < 5000; i++ {
		secs := 1 + r.IntN(200)
		jitter := time.Duration(r.Int64N(int64(10 * time.Second)))
		x := r.Float64()
		b := &Backoff{Jitter: jitter, Rand: constRand(x)}
		got := b.Wait(respWith(http.StatusTooManyRequests, "Retry-After", strconv.Itoa(secs)), 1)
		server := time.Duration(secs) * time.Second
		if got < server || got > server+jitter || got != server+time.Duration(float64(jitter)*x) {
			t.Fatalf("Retry-After %d, Jitter %v, Rand %v: Wait = %v", secs, jitter, x, got)
		}
	}
}

func TestBackoffCapsEveryWait(t *testing.T) {
	far := "Fri, 31 Dec 9999 23:59:59 GMT"
	for _, tt := range []struct {
		name string
		b    Backoff
		resp *http.Response
		want time.Duration
	}{
		{"default cap on seconds", Backoff{}, respWith(429, "Retry-After", "86400"), 5 * time.Minute},
		{"default cap on saturated seconds", Backoff{}, respWith(429, "Retry-After", "99999999999999999999"), 5 * time.Minute},
		{"default cap on a far date", Backoff{}, respWith(503, "Retry-After", far, "Date", "Thu, 01 Jan 1970 00:00:00 GMT"), 5 * time.Minute},
		{"cap with jitter", Backoff{Jitter: time.Hour, Rand: constRand(1)}, respWith(429, "Retry-After", "299"), 5 * time.Minute},
		{"custom cap", Backoff{Cap: 10 * time.Second}, respWith(429, "Retry-After", "11"), 10 * time.Second},
		{"under the cap", Backoff{Cap: 10 * time.Second}, respWith(429, "Retry-After", "10"), 10 * time.Second},
		{"cap on the fallback", Backoff{Cap: 100 * time.Millisecond, Rand: constRand(1)}, respWith(429), 100 * time.Millisecond},
		{"huge jitter saturates", Backoff{Cap: math.MaxInt64, Jitter: math.MaxInt64, Rand: constRand(1)},
			respWith(429, "Retry-After", "99999999999999999999"), math.MaxInt64},
		{"no cap needed", Backoff{Cap: math.MaxInt64}, respWith(429, "Retry-After", "86400"), 24 * time.Hour},
	} {
		if got := tt.b.Wait(tt.resp, 1); got != tt.want {
			t.Errorf("%s: Wait = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestBackoffFallback checks the client's own backoff for the responses
// whose Retry-After is absent, unusable or not honoured: exactly
// ceil/10 + r·(ceil − ceil/10), so never zero, never negative, never above
// its ceiling.
func TestBackoffFallback(t *testing.T) {
	resps := []*http.Response{
		nil,
		respWith(429),
		respWith(503),
		respWith(429, "Retry-After", "-1"),
		respWith(429, "Retry-After", "-0"),
		respWith(429, "Retry-After", "1e3"),
		respWith(429, "Retry-After", "0x10"),
		respWith(429, "Retry-After", "5, 5"),
		respWith(429, "Retry-After", "soon"),
		respWith(503, "Retry-After", "Sun, 29 Nov 2026 11:59:59 GMT", "Date", "Sun, 29 Nov 2026 12:00:00 GMT"), // before Date
		respWith(429, "Retry-After", "Sun, 06 Nov 1994 08:49:37 UTC"),
		respWith(429, "Retry-After", "Sun, 29 Nov 2026 11:59:58 GMT"), // in the past
		respWith(429, "Retry-After", "Sun, 29 Nov 2026 12:00:00 PST"),
		respWith(429, "Retry-After", "5", "Retry-After", "6"),
		respWith(http.StatusInternalServerError, "Retry-After", "5"),
		respWith(http.StatusMovedPermanently, "Retry-After", "5"),
		respWith(http.StatusOK, "Retry-After", "5"),
	}
	r := rand.New(rand.NewPCG(15, 16))
	for i := 0; i < 20000; i++ {
		var b Backoff
		if i%3 != 0 {
			b.Base = time.Duration(1 + r.Int64N(int64(2*time.Second)))
			b.Max = time.Duration(1 + r.Int64N(int64(time.Minute)))
			b.Cap = time.Duration(1 + r.Int64N(int64(10*time.Minute)))
		}
		x := r.Float64()
		if i%10 == 0 {
			x = float64(i % 20 / 10) // exactly 0 and 1
		}
		b.Rand = constRand(x)
		b.Now = func() time.Time { return t0 }
		attempt := r.IntN(70) - 5
		if i%100 == 0 {
			attempt = math.MaxInt
		}
		resp := resps[r.IntN(len(resps))]

		ceil := fallbackCeil(orDefault(b.Base, 500*time.Millisecond), orDefault(b.Max, 30*time.Second), attempt)
		floor := max(ceil/10, 1)
		want := min(floor+time.Duration(float64(ceil-floor)*x), orDefault(b.Cap, 5*time.Minute))
		got := b.Wait(resp, attempt)
		if got != want || got <= 0 {
			t.Fatalf("Backoff%+v.Wait(attempt %d) with Rand %v = %v, want %v", b, attempt, x, got, want)
		}
	}
}

func TestBackoffDefaults(t *testing.T) {
	for _, tt := range []struct {
		b       *Backoff
		attempt int
		want    time.Duration
	}{
		{nil, 1, 500 * time.Millisecond},
		{&Backoff{Rand: constRand(1)}, 1, 500 * time.Millisecond},
		{&Backoff{Rand: constRand(1)}, 2, time.Second},
		{&Backoff{Rand: constRand(1)}, 7, 30 * time.Second},
		{&Backoff{Rand: constRand(1)}, 1000, 30 * time.Second},
		{&Backoff{Rand: constRand(0)}, 1, 50 * time.Millisecond},
		{&Backoff{Rand: constRand(0)}, 3, 200 * time.Millisecond},
		{&Backoff{Rand: constRand(-1)}, 1, 50 * time.Millisecond},
		{&Backoff{Rand: constRand(math.NaN())}, 1, 50 * time.Millisecond},
		{&Backoff{Rand: constRand(7)}, 1, 500 * time.Millisecond},
		{&Backoff{Rand: constRand(0), Base: -time.Second, Max: -1, Cap: -1}, 1, 50 * time.Millisecond},
		{&Backoff{Rand: constRand(1), Base: time.Minute, Max: time.Second}, 1, time.Second},
		{&Backoff{Rand: constRand(0), Base: 1, Max: 5}, 1, 1},
		{&Backoff{Rand: constRand(0), Base: 1, Max: 5}, 10, 1},
	} {
		got := tt.b.Wait(respWith(http.StatusTooManyRequests), tt.attempt)
		if tt.b == nil {
			// The default Rand: only bounds can be checked.
			if got < 50*time.Millisecond || got > 500*time.Millisecond {
				t.Errorf("nil Backoff: Wait = %v, want within [50ms, 500ms]", got)
			}
			continue
		}
		if got != tt.want {
			t.Errorf("%+v.Wait(attempt %d) = %v, want %v", *tt.b, tt.attempt, got, tt.want)
		}
	}
	// The default local clock is read only without a valid Date.
	resp := respWith(http.StatusServiceUnavailable, "Retry-After", time.Now().Add(3*time.Minute).UTC().Format(http.TimeFormat))
	if got := (&Backoff{}).Wait(resp, 1); got < 2*time.Minute || got > 3*time.Minute+time.Second {
		t.Errorf("Wait with the default clock = %v, want about 3 minutes", got)
	}
}

func TestTransportWaitsExactly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := newScriptedServer(
			answerTooMany(2),
			answerUnavailableUntil(3*time.Second, layoutRFC850),
			answerUnavailableUntil(7*time.Second, layoutASC),
			answer(http.StatusOK),
		)
		var hooked []time.Duration
		tr := &Transport{Base: srv, Backoff: &Backoff{ExactDates: true}, OnRetry: func(resp *http.Response, n int, wait time.Duration) {
			if n != len(hooked)+1 {
				t.Errorf("OnRetry attempt = %d, want %d", n, len(hooked)+1)
			}
			hooked = append(hooked, wait)
		}}
		req, _ := http.NewRequest(http.MethodGet, "http://example.test/", nil)
		req.Header.Set("X-Test", "1")
		resp, err := tr.RoundTrip(req)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("RoundTrip = %v, %v; want 200", resp, err)
		}
		tries := srv.log()
		want := []time.Duration{0, 2 * time.Second, 5 * time.Second, 12 * time.Second}
		if got := tryOffsets(tries); !sameDurations(got, want) {
			t.Errorf("tries at %v, want %v", got, want)
		}
		if w := []time.Duration{2 * time.Second, 3 * time.Second, 7 * time.Second}; !sameDurations(hooked, w) {
			t.Errorf("OnRetry waits %v, want %v", hooked, w)
		}
		// Every discarded body was drained and closed; the last one is the
		// caller's, untouched.
		for i, a := range tries[:len(tries)-1] {
			if read, closed := a.resp.state(); read != srv.bodyLen || !closed {
				t.Errorf("try %d: body read %d bytes, closed %v; want %d, true", i+1, read, closed, srv.bodyLen)
			}
		}
		if read, closed := tries[len(tries)-1].resp.state(); read != 0 || closed {
			t.Errorf("returned body read %d bytes, closed %v; want untouched", read, closed)
		}
		// Retries are clones, and the caller's request is unchanged.
		for i, a := range tries[1:] {
			if a.req == req {
				t.Errorf("try %d sent the caller's request itself", i+2)
			}
			if a.req.Header.Get("X-Test") != "1" || a.req.Context() != req.Context() {
				t.Errorf("try %d lost the request's header or context", i+2)
			}
		}
		if len(req.Header) != 1 || req.Header.Get("X-Test") != "1" {
			t.Errorf("caller's header changed: %v", req.Header)
		}
	})
}

func TestTransportFallbackWithoutRetryAfter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := newScriptedServer(answer(http.StatusTooManyRequests), answer(http.StatusServiceUnavailable),
			answer(http.StatusTooManyRequests), answer(http.StatusNoContent))
		tr := &Transport{Base: srv, Backoff: &Backoff{Rand: constRand(1)}}
		resp, err := tr.RoundTrip(newTestRequest(t, http.MethodGet, nil))
		if err != nil || resp.StatusCode != http.StatusNoContent {
			t.Fatalf("RoundTrip = %v, %v", resp, err)
		}
		// 500ms, then 1s, then 2s: the ceiling of each attempt.
		want := []time.Duration{0, 500 * time.Millisecond, 1500 * time.Millisecond, 3500 * time.Millisecond}
		if got := tryOffsets(srv.log()); !sameDurations(got, want) {
			t.Errorf("tries at %v, want %v", got, want)
		}
	})
}

func TestTransportMaxAttempts(t *testing.T) {
	for _, tt := range []struct{ max, tries int }{{0, 4}, {-1, 4}, {1, 1}, {2, 2}, {6, 6}} {
		synctest.Test(t, func(t *testing.T) {
			srv := newScriptedServer(answerTooMany(1))
			tr := &Transport{Base: srv, MaxAttempts: tt.max}
			resp, err := tr.RoundTrip(newTestRequest(t, http.MethodGet, nil))
			if err != nil || resp.StatusCode != http.StatusTooManyRequests {
				t.Fatalf("RoundTrip = %v, %v; want the last 429", resp, err)
			}
			tries := srv.log()
			if len(tries) != tt.tries {
				t.Errorf("MaxAttempts %d: %d tries, want %d", tt.max, len(tries), tt.tries)
			}
			// The last response comes back readable.
			if b, err := io.ReadAll(resp.Body); err != nil || len(b) != srv.bodyLen {
				t.Errorf("last body: %d bytes, %v", len(b), err)
			}
			resp.Body.Close()
		})
	}
}

func TestTransportCancelDuringWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := newScriptedServer(answerTooMany(10), answer(http.StatusOK))
		tr := &Transport{Base: srv}
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			time.Sleep(4 * time.Second)
			cancel()
		}()
		start := time.Now()
		resp, err := tr.RoundTrip(newTestRequest(t, http.MethodGet, nil).WithContext(ctx))
		if resp != nil || !errors.Is(err, context.Canceled) {
			t.Fatalf("RoundTrip = %v, %v; want context.Canceled", resp, err)
		}
		if got := time.Since(start); got != 4*time.Second {
			t.Errorf("returned after %v, want 4s", got)
		}
		tries := srv.log()
		if len(tries) != 1 {
			t.Fatalf("%d tries, want 1", len(tries))
		}
		if _, closed := tries[0].resp.state(); !closed {
			t.Error("discarded body not closed")
		}
	})
}

func TestTransportDeadline(t *testing.T) {
	for _, tt := range []struct {
		timeout time.Duration
		tries   int
		status  int
		took    time.Duration
	}{
		{5 * time.Second, 1, http.StatusTooManyRequests, 0},  // the wait would outlive it
		{10 * time.Second, 1, http.StatusTooManyRequests, 0}, // it ends as the wait does
		{15 * time.Second, 2, http.StatusOK, 10 * time.Second},
	} {
		synctest.Test(t, func(t *testing.T) {
			srv := newScriptedServer(answerTooMany(10), answer(http.StatusOK))
			tr := &Transport{Base: srv}
			ctx, cancel := context.WithTimeout(context.Background(), tt.timeout)
			defer cancel()
			start := time.Now()
			resp, err := tr.RoundTrip(newTestRequest(t, http.MethodGet, nil).WithContext(ctx))
			if err != nil || resp.StatusCode != tt.status {
				t.Fatalf("timeout %v: RoundTrip = %v, %v; want %d", tt.timeout, resp, err, tt.status)
			}
			if got := time.Since(start); got != tt.took {
				t.Errorf("timeout %v: returned after %v, want %v", tt.timeout, got, tt.took)
			}
			tries := srv.log()
			if len(tries) != tt.tries {
				t.Errorf("timeout %v: %d tries, want %d", tt.timeout, len(tries), tt.tries)
			}
			if _, closed := tries[len(tries)-1].resp.state(); closed {
				t.Errorf("timeout %v: returned body is closed", tt.timeout)
			}
		})
	}
}

// TestTransportClientTimeout checks that http.Client's Timeout, which reaches
// the transport as a context deadline, counts as the deadline too.
func TestTransportClientTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := newScriptedServer(answerTooMany(10), answer(http.StatusOK))
		client := &http.Client{Transport: &Transport{Base: srv}, Timeout: 5 * time.Second}
		start := time.Now()
		resp, err := client.Get("http://example.test/")
		if err != nil || resp.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("Get = %v, %v; want the 429", resp, err)
		}
		resp.Body.Close()
		if took := time.Since(start); took != 0 || len(srv.log()) != 1 {
			t.Errorf("returned after %v and %d tries, want at once after 1", took, len(srv.log()))
		}
	})
}

func TestTransportWhichRequestsRetry(t *testing.T) {
	const payload = "payload"
	withKey := func(r *http.Request) *http.Request { r.Header.Set("Idempotency-Key", "k1"); return r }
	withEmptyKey := func(r *http.Request) *http.Request { r.Header.Set("Idempotency-Key", ""); return r }
	noGetBody := func(r *http.Request) *http.Request { r.GetBody = nil; return r }
	noBody := func(r *http.Request) *http.Request { r.Body, r.GetBody = nil, nil; return r }
	// http.NewRequest rewrites "" to "GET": set it after, as a caller building the Request
	// itself does (net/http documents "" as GET).
	emptyMethod := func(r *http.Request) *http.Request { r = noBody(r); r.Method = ""; return r }
	for _, tt := range []struct {
		name      string
		method    string
		edit      func(*http.Request) *http.Request
		retryable func(*http.Request) bool
		tries     int
	}{
		{"GET", http.MethodGet, noBody, nil, 2},
		{"empty method", http.MethodGet, emptyMethod, nil, 2},
		{"HEAD", http.MethodHead, noBody, nil, 2},
		{"OPTIONS", http.MethodOptions, noBody, nil, 2},
		{"PUT", http.MethodPut, nil, nil, 2},
		{"DELETE", http.MethodDelete, nil, nil, 2},
		{"POST", http.MethodPost, nil, nil, 1},
		{"PATCH", http.MethodPatch, nil, nil, 1},
		{"POST with Idempotency-Key", http.MethodPost, withKey, nil, 2},
		{"PATCH with Idempotency-Key", http.MethodPatch, withKey, nil, 2},
		{"POST with empty Idempotency-Key", http.MethodPost, withEmptyKey, nil, 1},
		{"PUT without GetBody", http.MethodPut, noGetBody, nil, 1},
		{"POST with key, without GetBody", http.MethodPost, func(r *http.Request) *http.Request { return noGetBody(withKey(r)) }, nil, 1},
		{"POST allowed by Retryable", http.MethodPost, nil, func(*http.Request) bool { return true }, 2},
		{"GET refused by Retryable", http.MethodGet, noBody, func(*http.Request) bool { return false }, 1},
		{"Retryable cannot force an unreplayable body", http.MethodPut, noGetBody, func(*http.Request) bool { return true }, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := newScriptedServer(answerTooMany(1), answer(http.StatusOK))
				tr := &Transport{Base: srv, Retryable: tt.retryable}
				req := newTestRequest(t, tt.method, strings.NewReader(payload))
				if tt.edit != nil {
					req = tt.edit(req)
				}
				hadBody := req.Body != nil
				if tt.name == "empty method" && req.Method != "" {
					t.Fatalf("the request's Method is %q, not empty", req.Method)
				}
				resp, err := tr.RoundTrip(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				tries := srv.log()
				if len(tries) != tt.tries {
					t.Fatalf("%d tries, want %d", len(tries), tt.tries)
				}
				if want := map[int]int{1: 429, 2: 200}[tt.tries]; resp.StatusCode != want {
					t.Errorf("status %d, want %d", resp.StatusCode, want)
				}
				for i, a := range tries {
					if hadBody && a.body != payload {
						t.Errorf("try %d sent body %q, want %q", i+1, a.body, payload)
					}
				}
			})
		})
	}
}

func TestTransportGetBodyFails(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := newScriptedServer(answerTooMany(1), answer(http.StatusOK))
		req := newTestRequest(t, http.MethodPut, strings.NewReader("x"))
		req.GetBody = func() (io.ReadCloser, error) { return nil, errors.New("gone") }
		resp, err := (&Transport{Base: srv}).RoundTrip(req)
		if err != nil || resp.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("RoundTrip = %v, %v; want the 429", resp, err)
		}
		if read, closed := srv.log()[0].resp.state(); read != 0 || closed {
			t.Errorf("returned body read %d, closed %v", read, closed)
		}
	})
}

func TestTransportOtherStatusesAndErrors(t *testing.T) {
	for _, code := range []int{200, 301, 400, 403, 404, 500, 502, 504} {
		synctest.Test(t, func(t *testing.T) {
			srv := newScriptedServer(func(time.Time) *http.Response {
				return respWith(code, "Retry-After", "1")
			})
			resp, err := (&Transport{Base: srv}).RoundTrip(newTestRequest(t, http.MethodGet, nil))
			if err != nil || resp.StatusCode != code || len(srv.log()) != 1 {
				t.Errorf("status %d: RoundTrip = %v, %v after %d tries; want it once", code, resp, err, len(srv.log()))
			}
		})
	}
	synctest.Test(t, func(t *testing.T) {
		srv := newScriptedServer(answerTooMany(1))
		srv.err = errors.New("connection refused")
		resp, err := (&Transport{Base: srv}).RoundTrip(newTestRequest(t, http.MethodGet, nil))
		if resp != nil || err != srv.err || len(srv.log()) != 1 {
			t.Errorf("RoundTrip = %v, %v after %d tries; want the error once", resp, err, len(srv.log()))
		}
	})
}

func TestTransportDrainIsBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := newScriptedServer(answerTooMany(1), answer(http.StatusOK))
		srv.bodyLen = 1 << 20
		resp, err := (&Transport{Base: srv}).RoundTrip(newTestRequest(t, http.MethodGet, nil))
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("RoundTrip = %v, %v", resp, err)
		}
		if read, closed := srv.log()[0].resp.state(); read != 64<<10 || !closed {
			t.Errorf("discarded body: read %d bytes, closed %v; want %d, true", read, closed, 64<<10)
		}
	})
}

// TestTransportConcurrent sends many requests at once through one
// Transport inside an http.Client: each is retried on its own schedule, at
// exactly its Retry-After, and a POST only when it carries an
// Idempotency-Key.
func TestTransportConcurrent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		var mu sync.Mutex
		seen := map[int][]time.Duration{}
		waitOf := func(id int) int { return id%5 + 1 }
		base := transportFunc(func(req *http.Request) (*http.Response, error) {
			if b, _ := io.ReadAll(req.Body); string(b) != "x" {
				t.Errorf("body %q, want %q", b, "x")
			}
			mu.Lock()
			defer mu.Unlock()
			id, _ := strconv.Atoi(req.URL.Query().Get("id"))
			seen[id] = append(seen[id], time.Since(start))
			if len(seen[id]) < 3 {
				return answerTooMany(waitOf(id))(time.Now()), nil
			}
			return respWith(http.StatusOK), nil
		})
		client := &http.Client{Transport: &Transport{Base: base}}
		var wg sync.WaitGroup
		for id := range 50 {
			wg.Go(func() {
				req, _ := http.NewRequest(http.MethodPost, "http://example.test/?id="+strconv.Itoa(id), bytes.NewReader([]byte("x")))
				if id%2 == 0 {
					req.Header.Set("Idempotency-Key", strconv.Itoa(id))
				}
				resp, err := client.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				resp.Body.Close()
			})
		}
		wg.Wait()
		for id := range 50 {
			w := time.Duration(waitOf(id)) * time.Second
			want := []time.Duration{0, w, 2 * w}
			if id%2 != 0 {
				want = want[:1]
			}
			if got := seen[id]; !sameDurations(got, want) {
				t.Errorf("id %d: tries at %v, want %v", id, got, want)
			}
		}
	})
}

func TestTransportCancelClosesUnsentBody(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := newScriptedServer(answerTooMany(10), answer(http.StatusOK))
		ctx, cancel := context.WithCancel(context.Background())
		req := newTestRequest(t, http.MethodPut, strings.NewReader("x")).WithContext(ctx)
		var copies []*spyBody
		req.GetBody = func() (io.ReadCloser, error) {
			b := &spyBody{r: strings.NewReader("x")}
			copies = append(copies, b)
			return b, nil
		}
		go func() {
			time.Sleep(4 * time.Second)
			cancel()
		}()
		resp, err := (&Transport{Base: srv}).RoundTrip(req)
		if resp != nil || !errors.Is(err, context.Canceled) {
			t.Fatalf("RoundTrip = %v, %v; want context.Canceled", resp, err)
		}
		if len(copies) != 1 {
			t.Fatalf("GetBody called %d times, want 1", len(copies))
		}
		if _, closed := copies[0].state(); !closed {
			t.Error("the body of the try never sent was not closed")
		}
	})
}

// idleCloser is a RoundTripper that counts the calls of its CloseIdleConnections.
type idleCloser struct {
	http.RoundTripper
	calls int
}

func (c *idleCloser) CloseIdleConnections() { c.calls++ }

func TestTransportCloseIdleConnections(t *testing.T) {
	base := &idleCloser{RoundTripper: transportFunc(func(*http.Request) (*http.Response, error) { return nil, errors.New("unused") })}
	(&http.Client{Transport: &Transport{Base: base}}).CloseIdleConnections()
	if base.calls != 1 {
		t.Errorf("Base's CloseIdleConnections called %d times through http.Client, want 1", base.calls)
	}
	(&Transport{}).CloseIdleConnections() // http.DefaultTransport's: must not panic
}
