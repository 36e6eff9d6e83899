package main

import (
	"testing"
	"time"

	"github.com/retryafter/retryafter/internal/testkit"
)

func TestReadTold(t *testing.T) {
	for _, c := range []struct {
		kv     []string
		usable bool
		wait   time.Duration
		date   bool
		strict bool
	}{
		{[]string{"Retry-After", "7"}, true, 7 * time.Second, false, true},
		{[]string{"Retry-After", " 7\t"}, true, 7 * time.Second, false, true},
		{[]string{"Retry-After", "0"}, true, 0, false, true},
		{[]string{"Retry-After", "1.5"}, true, 1500 * time.Millisecond, false, false},
		{[]string{"Retry-After", "+5"}, true, 5 * time.Second, false, false},
		{[]string{"Retry-After", "-1"}, false, 0, false, false},
		{[]string{"Retry-After", "1e3"}, false, 0, false, false},
		{[]string{"Retry-After", "soon"}, false, 0, false, false},
		{[]string{"Retry-After", "1", "Retry-After", "2"}, false, 0, false, false},
		{[]string{"Date", date0, "Retry-After", imf(10 * time.Second)}, true, 10 * time.Second, true, true},
		// Measured against Date, not the probe's clock, which reads T0 too here: Date is 5 s slow.
		{[]string{"Date", imf(-5 * time.Second), "Retry-After", imf(10 * time.Second)}, true, 15 * time.Second, true, true},
		{[]string{"Retry-After", imf(10 * time.Second)}, true, 10 * time.Second, true, true}, // no Date: the probe's clock
		{[]string{"Date", date0, "Retry-After", testkit.T0.Add(3 * time.Second).Format(time.RFC1123)}, true, 3 * time.Second, true, false},
		{[]string{"Date", date0, "Retry-After", testkit.T0.Add(3 * time.Second).Format(time.RFC1123Z)}, true, 3 * time.Second, true, false},
		{[]string{"Date", date0, "Retry-After", testkit.T0.Add(-3 * time.Second).Format(time.RFC1123)}, true, 0, true, false},
		{[]string{"Date", date0, "Retry-After", imf(-3 * time.Second)}, false, 0, false, false},
	} {
		got := readTold(response(429, c.kv...))
		if got.usable != c.usable || got.wait != c.wait || got.date != c.date || got.strict != c.strict {
			t.Errorf("%q: usable %v, wait %v, date %v, strict %v; want %v, %v, %v, %v",
				c.kv, got.usable, got.wait, got.date, got.strict, c.usable, c.wait, c.date, c.strict)
		}
	}
}

// TestReadObeyed checks what the probe obeys without a usable Retry-After: the reset field a
// client reads in its place, named, an instant read as the very instant it names.
func TestReadObeyed(t *testing.T) {
	for _, c := range []struct {
		kv    []string
		wait  time.Duration
		field string
		date  bool
	}{
		{[]string{"Retry-After", "7", "X-Ratelimit-Reset-Requests", "6m0s"}, 7 * time.Second, "", false},
		{[]string{"X-Ratelimit-Reset-Requests", "6m0s"}, 6 * time.Minute, "X-Ratelimit-Reset-Requests", false},
		{[]string{"Retry-After", "soon", "X-Ratelimit-Reset-Tokens", "20ms"}, 20 * time.Millisecond, "X-Ratelimit-Reset-Tokens", false},
		{[]string{"Date", date0, "Anthropic-Ratelimit-Tokens-Reset", testkit.T0.Add(171 * time.Second).Format(time.RFC3339)},
			171 * time.Second, "Anthropic-Ratelimit-Tokens-Reset", true},
		{[]string{"Date", date0, "X-Ratelimit-Remaining", "0", "X-Ratelimit-Reset", epoch(3025 * time.Second)},
			3025 * time.Second, "X-Ratelimit-Reset", true},
		{[]string{"Date", date0}, 0, "", false},
	} {
		got := readObeyed(response(403, append(c.kv, "X-Ratelimit-Remaining", "0")...))
		if got.wait != c.wait || got.field != c.field || got.date != c.date || got.usable != (c.wait > 0) {
			t.Errorf("%q: wait %v from %q, date %v, usable %v; want %v from %q, date %v", c.kv, got.wait, got.field, got.date, got.usable, c.wait, c.field, c.date)
		}
		if c.date && !got.at.Equal(testkit.T0.Add(c.wait)) {
			t.Errorf("%q: at %v; want %v", c.kv, got.at, testkit.T0.Add(c.wait))
		}
	}
}

// FuzzReadObeyed checks, for any Retry-After, reset fields and Date: no panic; what Retry-After
// says when it is usable; otherwise a reset field's reading, named, that the response has, and
// a wait never negative.
func FuzzReadObeyed(f *testing.F) {
	f.Add("", "6m0s", "", "", "")
	f.Add("soon", "", "2026-11-29T12:02:51Z", "", date0)
	f.Add("", "", "", "1796040010", "Sun, 29 Nov 2026 12:00:00 UTC")
	f.Fuzz(func(t *testing.T, retryAfter, openAI, anthropic, github, date string) {
		var kv []string
		for _, p := range [][2]string{{"Retry-After", retryAfter}, {"X-Ratelimit-Reset-Requests", openAI},
			{"Anthropic-Ratelimit-Tokens-Reset", anthropic}, {"X-Ratelimit-Reset", github}, {"Date", date}} {
			if p[1] != "" {
				kv = append(kv, p[0], p[1])
			}
		}
		e := response(429, kv...)
		got, told := readObeyed(e), readTold(e)
		switch {
		case told.usable && got != told:
			t.Fatalf("%q: readObeyed = %+v; Retry-After reads %+v", kv, got, told)
		case got.wait < 0:
			t.Fatalf("%q: readObeyed = %+v: a negative wait", kv, got)
		case got.field != "" && (len(e.header[got.field]) == 0 || !got.usable):
			t.Fatalf("%q: readObeyed = %+v: read from a field the response has not", kv, got)
		}
	})
}
