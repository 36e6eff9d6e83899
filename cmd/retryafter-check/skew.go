package main

import (
	"fmt"
	"time"
)

// A skew is what the Date fields of a run prove about the server's clock: that it is ahead of
// the probe's by at least lo and by less than hi (behind, where negative). Date has whole
// seconds and was read between sending and receiving, so each response proves the interval
// [Date − received, Date + 1 s − sent); those of one run intersect. The zero value knows
// nothing.
type skew struct {
	lo, hi time.Duration
	n      int // how many Dates narrowed the interval
}

// add narrows k by the Date of e, if it has a valid one. A Date at odds with those before it
// (the server's clock stepped, or another server answered) starts the interval again from e.
func (k *skew) add(e *exchange) {
	d, ok := validDate(e.header, e.received)
	if !ok {
		return
	}
	lo, hi := d.Sub(e.received), d.Add(time.Second).Sub(e.sent)
	if k.n > 0 && max(lo, k.lo) < min(hi, k.hi) {
		k.lo, k.hi, k.n = max(lo, k.lo), min(hi, k.hi), k.n+1
		return
	}
	k.lo, k.hi, k.n = lo, hi, 1
}

// agrees reports whether the Dates seen are consistent with the probe's clock being the
// server's: none was seen, or the interval holds 0.
func (k skew) agrees() bool { return k.n == 0 || k.lo <= 0 && 0 < k.hi }

// offset is how far ahead of the probe's clock the probe takes the server's to be, to obey a
// date: 0 when the Dates agree with the probe's clock, so that the probe retries at the date by
// its own clock as clients do; otherwise the least skew they prove, so that a retry is never
// early by the server's clock.
func (k skew) offset() time.Duration {
	if k.agrees() {
		return 0
	}
	return k.lo
}

// String names, for a person, the clock by which the probe obeys a date under k.
func (k skew) String() string {
	switch {
	case k.n == 0:
		return "the probe's clock (no valid Date to measure the server's by)"
	case k.agrees():
		return "the probe's clock (Date agrees with it to the second)"
	case k.lo > 0:
		return fmt.Sprintf("the server's clock (%s ahead of the probe's, as Date shows)", seconds(roundDuration(k.lo)))
	}
	return fmt.Sprintf("the server's clock (%s behind the probe's, as Date shows)", seconds(roundDuration(-k.lo)))
}
