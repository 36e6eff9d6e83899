package retryafter

import (
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"golang.org/x/time/rate"
)

func TestDelaySeconds(t *testing.T) {
	tests := []struct {
		wait time.Duration
		want int64
	}{
		{-time.Second, 1},
		{0, 1},
		{1, 1},
		{100 * time.Millisecond, 1},
		{time.Second, 1},
		{time.Second + 1, 2},
		{59*time.Second + 999*time.Millisecond, 60},
		{time.Hour, 3600},
		{math.MaxInt64, math.MaxInt64/int64(time.Second) + 1},
	}
	for _, tt := range tests {
		if got := delaySeconds(tt.wait); got != tt.want {
			t.Errorf("delaySeconds(%v) = %d, want %d", tt.wait, got, tt.want)
		}
	}
}

// TestSetDelayProperty checks, over many waits, that the emitted seconds are never below the
// wait and less than a second above it, through the cache and past it.
func TestSetDelayProperty(t *testing.T) {
	var e emitter
	for wait := time.Duration(1); wait < 2*cachedSeconds*time.Second; wait = wait*3/2 + 7 {
		h := http.Header{}
		e.setDelay(h, wait, nil)
		got, ok := ParseRetryAfter(h, t0)
		if !ok || got < wait || got-wait >= time.Second {
			t.Fatalf("wait %v: Retry-After %q parses to %v", wait, h.Get("Retry-After"), got)
		}
	}
	h := http.Header{"Retry-After": {"5"}}
	e.setDelay(h, rate.InfDuration, nil)
	if _, ok := h["Retry-After"]; ok {
		t.Fatal("a wait that never ends left a Retry-After")
	}
}

func TestSetDate(t *testing.T) {
	var e emitter
	for _, now := range []time.Time{
		t0, t0.Add(999 * time.Millisecond), t0.Add(time.Second), t0.Add(time.Second),
		t0.Add(-time.Hour).In(time.FixedZone("PST", -8*3600)), t0,
	} {
		h := http.Header{}
		e.setDate(h, now, nil)
		if got, want := h.Get("Date"), now.UTC().Truncate(time.Second).Format(http.TimeFormat); got != want {
			t.Fatalf("Date for %v = %q, want %q", now, got, want)
		}
	}
}

func TestRetryAfterDate(t *testing.T) {
	tests := []struct{ until, want time.Time }{
		{t0, t0},
		{t0.Add(1), t0.Add(time.Second)},
		{t0.Add(999 * time.Millisecond), t0.Add(time.Second)},
		{t0.In(time.FixedZone("CET", 3600)).Add(500 * time.Millisecond), t0.Add(time.Second)},
	}
	for _, tt := range tests {
		if got := retryAfterDate(tt.until); !got.Equal(tt.want) || got.Location() != time.UTC {
			t.Errorf("retryAfterDate(%v) = %v, want %v UTC", tt.until, got, tt.want)
		}
	}
}

// TestSetUntil checks, over untils with sub-second parts that revisit the same second (so the
// cached line is used and replaced), that the HTTP-date is until rounded up, in GMT.
func TestSetUntil(t *testing.T) {
	var e emitter
	rng := rand.New(rand.NewPCG(3, 3))
	cet := time.FixedZone("CET", 3600)
	for range 2000 {
		until := t0.Add(time.Duration(rng.Int64N(int64(5 * time.Second))))
		if rng.IntN(4) == 0 {
			until = until.Truncate(time.Second)
		}
		if rng.IntN(2) == 0 {
			until = until.In(cet)
		}
		h := http.Header{}
		got := e.setUntil(h, until, nil)
		want := retryAfterDate(until)
		if !got.Equal(want) {
			t.Fatalf("setUntil(%v) returned %v, want %v", until, got, want)
		}
		if v := h.Get("Retry-After"); v != want.Format(http.TimeFormat) || !strings.HasSuffix(v, " GMT") {
			t.Fatalf("setUntil(%v) set Retry-After %q, want %q", until, v, want.Format(http.TimeFormat))
		}
	}
}

// TestRefuseUntil checks the date form of a refusal: Date from now truncated, Retry-After from
// until rounded up, and the responder told the difference, which covers the true wait.
func TestRefuseUntil(t *testing.T) {
	tests := []struct {
		now, until time.Time
		wantRA     string
		wantWait   time.Duration
	}{
		{t0, t0.Add(time.Minute), "Sun, 29 Nov 2026 12:01:00 GMT", time.Minute},
		{t0.Add(999 * time.Millisecond), t0.Add(time.Minute + time.Millisecond), "Sun, 29 Nov 2026 12:01:01 GMT", 61 * time.Second},
		{t0.Add(500 * time.Millisecond), t0.Add(600 * time.Millisecond), "Sun, 29 Nov 2026 12:00:01 GMT", time.Second},
	}
	var e emitter
	for _, tt := range tests {
		var told time.Duration
		respond := func(w http.ResponseWriter, r *http.Request, status int, wait time.Duration) {
			told = wait
			writeRefusal(w, r, status, wait)
		}
		w := httptest.NewRecorder()
		e.refuseUntil(w, httptest.NewRequest("GET", "/", nil), respond, http.StatusServiceUnavailable, tt.now, tt.until)
		if w.Code != http.StatusServiceUnavailable {
			t.Fatalf("status %d", w.Code)
		}
		if got, want := w.Header().Get("Date"), tt.now.UTC().Format(http.TimeFormat); got != want {
			t.Errorf("now %v: Date = %q, want %q", tt.now, got, want)
		}
		if got := w.Header().Get("Retry-After"); got != tt.wantRA {
			t.Errorf("now %v until %v: Retry-After = %q, want %q", tt.now, tt.until, got, tt.wantRA)
		}
		if told != tt.wantWait {
			t.Errorf("now %v until %v: responder told %v, want %v", tt.now, tt.until, told, tt.wantWait)
		}
	}
}

// TestSetUntilNeverEarly checks, over many instants, that the HTTP-date Retry-After is never before until
// and less than a second after it, and that measured against a Date from the same emitter it
// is never shorter than the true wait.
func TestSetUntilNeverEarly(t *testing.T) {
	var e emitter
	now := t0.Add(123456789)
	for d := time.Duration(1); d < 48*time.Hour; d = d*3/2 + 7 {
		until := now.Add(d)
		h := http.Header{}
		e.setDate(h, now, nil)
		e.setUntil(h, until, nil)
		at, err := http.ParseTime(h.Get("Retry-After"))
		if err != nil || at.Before(until) || !at.Before(until.Add(time.Second)) {
			t.Fatalf("until %v: Retry-After %q", until, h.Get("Retry-After"))
		}
		if wait, ok := ParseRetryAfter(h, now); !ok || wait < d {
			t.Fatalf("until now+%v: Retry-After %q with Date %q reads as %v", d, h.Get("Retry-After"), h.Get("Date"), wait)
		}
	}
}

// TestRefusalValuesArePerResponse writes to every header value of one refusal, as a handler or
// middleware may, and checks that later refusals, which reuse the cached Date and delay-seconds,
// are unaffected.
func TestRefusalValuesArePerResponse(t *testing.T) {
	h := Limit(1, 1, WithClock(func() time.Time { return t0 }))(ok)
	serve(h, "GET", "192.0.2.1:1")
	r := httptest.NewRequest("GET", "/", nil)
	r.Header.Set("Origin", "https://app.example")
	first := httptest.NewRecorder()
	h.ServeHTTP(first, r)
	for _, v := range first.Header() {
		v[0] = "poison"
	}
	second := httptest.NewRecorder()
	h.ServeHTTP(second, r)
	for k, v := range second.Header() {
		if v[0] == "poison" {
			t.Fatalf("%s of a later response was changed through an earlier one", k)
		}
	}
	wantRefusal(t, second, http.StatusTooManyRequests, t0)
}
