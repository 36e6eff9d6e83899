package retryafter

import (
	"math"
	"net/http"
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
		e.setDelay(h, wait)
		got, ok := ParseRetryAfter(h, t0)
		if !ok || got < wait || got-wait >= time.Second {
			t.Fatalf("wait %v: Retry-After %q parses to %v", wait, h.Get("Retry-After"), got)
		}
	}
	h := http.Header{"Retry-After": {"5"}}
	e.setDelay(h, rate.InfDuration)
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
		e.setDate(h, now)
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

// TestSetUntil checks, over many instants, that the HTTP-date Retry-After is never before until
// and less than a second after it, and that measured against a Date from the same emitter it
// is never shorter than the true wait.
func TestSetUntil(t *testing.T) {
	var e emitter
	now := t0.Add(123456789)
	for d := time.Duration(1); d < 48*time.Hour; d = d*3/2 + 7 {
		until := now.Add(d)
		h := http.Header{}
		e.setDate(h, now)
		e.setUntil(h, until)
		at, err := http.ParseTime(h.Get("Retry-After"))
		if err != nil || at.Before(until) || !at.Before(until.Add(time.Second)) {
			t.Fatalf("until %v: Retry-After %q", until, h.Get("Retry-After"))
		}
		if wait, ok := ParseRetryAfter(h, now); !ok || wait < d {
			t.Fatalf("until now+%v: Retry-After %q with Date %q reads as %v", d, h.Get("Retry-After"), h.Get("Date"), wait)
		}
	}
}
