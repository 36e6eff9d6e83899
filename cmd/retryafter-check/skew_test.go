package main

import (
	"testing"
	"time"

	"github.com/retryafter/retryafter/internal/testkit"
)

func TestSkew(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	// at returns a response sent at T0+sent ms, received at T0+received ms, with a Date of
	// T0+date s.
	at := func(sent, received int, date time.Duration) *exchange {
		e := response(429, "Date", imf(date))
		e.sent, e.received = testkit.T0.Add(ms(sent)), testkit.T0.Add(ms(received))
		return e
	}
	for _, c := range []struct {
		name      string
		responses []*exchange
		lo, hi    time.Duration
		offset    time.Duration
		agrees    bool
	}{
		{"none", nil, 0, 0, 0, true},
		{"no Date", []*exchange{response(429)}, 0, 0, 0, true},
		{"one Date, the same second", []*exchange{at(-100, 0, 0)}, 0, ms(1100), 0, true},
		// Date reads :00 at 550-600 ms and :01 at 650-700 ms: the server's clock is 300 to
		// 450 ms ahead, and the probe takes the least of it.
		{"two Dates narrow it", []*exchange{at(550, 600, 0), at(650, 700, time.Second)}, ms(300), ms(450), ms(300), false},
		{"server two hours slow", []*exchange{at(0, 100, -2*time.Hour)}, -2*time.Hour - ms(100), -2*time.Hour + time.Second, -2*time.Hour - ms(100), false},
		// A Date at odds with the one before: the interval starts again from it.
		{"a clock that stepped", []*exchange{at(0, 100, 0), at(200, 300, time.Hour)}, time.Hour - ms(300), time.Hour + ms(800), time.Hour - ms(300), false},
	} {
		var k skew
		for _, e := range c.responses {
			k.add(e)
		}
		if k.n > 0 && (k.lo != c.lo || k.hi != c.hi) || k.offset() != c.offset || k.agrees() != c.agrees {
			t.Errorf("%s: [%v, %v), offset %v, agrees %v; want [%v, %v), %v, %v", c.name, k.lo, k.hi, k.offset(), k.agrees(), c.lo, c.hi, c.offset, c.agrees)
		}
	}
}
