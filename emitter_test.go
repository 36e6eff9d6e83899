package retryafter

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"golang.org/x/time/rate"
)

// TestSetDelayNever checks that a wait no client can honour removes Retry-After.
func TestSetDelayNever(t *testing.T) {
	h := http.Header{"Retry-After": {"5"}}
	if s := setDelay(h, rate.InfDuration, nil, nil); s != 0 {
		t.Fatalf("setDelay(InfDuration) = %d, want 0", s)
	}
	if _, ok := h["Retry-After"]; ok {
		t.Fatal("a wait that never ends left a Retry-After")
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
		respond := func(w http.ResponseWriter, r *http.Request, f Refusal) {
			told = f.RetryAfter
			writeRefusal(w, r, f)
		}
		w := httptest.NewRecorder()
		e.refuseUntil(w, httptest.NewRequest("GET", "/", nil), respond, Refusal{Status: http.StatusServiceUnavailable}, tt.now, tt.until)
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

// TestRefuseUntilNeverEarly checks, over many instants, that the HTTP-date Retry-After is never
// before until and less than a second after it, and that measured against the refusal's Date it
// is never shorter than the true wait.
func TestRefuseUntilNeverEarly(t *testing.T) {
	var e emitter
	now := t0.Add(123456789)
	for d := time.Duration(1); d < 48*time.Hour; d = d*3/2 + 7 {
		until := now.Add(d)
		w := httptest.NewRecorder()
		e.refuseUntil(w, httptest.NewRequest("GET", "/", nil), nil, Refusal{Status: http.StatusServiceUnavailable}, now, until)
		h := w.Header()
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
