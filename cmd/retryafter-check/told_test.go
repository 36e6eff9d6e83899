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
