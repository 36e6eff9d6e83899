// Package header holds what the server side, the client and the gateway share about the fields
// they write and read: Retry-After in both forms, Date, the one strict reader of them
// ([ParseRetryAfter], what this repository's own output is held to) and the generous reading
// ([ReadRetryAfter], what a client waits and a gateway repairs by).
//
// Writing is pure: functions of a wait or an instant, and a [Lines] that hands out the header
// values of one response from one allocation.
package header

import (
	"net/http"
	"strconv"
	"sync/atomic"
	"time"
	"unsafe"
)

// Field names, canonical so that setting them skips canonicalisation.
const (
	RetryAfter  = "Retry-After"
	Date        = "Date"
	ContentType = "Content-Type"
)

// DelaySeconds returns wait rounded UP to whole seconds and at least 1: the delay-seconds a
// response states so that a client that waits exactly that long is not early. A wait too long
// for a Duration saturates.
func DelaySeconds(wait time.Duration) int64 {
	if wait <= 0 {
		return 1
	}
	s := int64(wait / time.Second)
	if wait%time.Second != 0 {
		s++
	}
	return s
}

// The first and last instants an IMF-fixdate can name: its year is four digits.
var (
	firstDate = time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC)
	lastDate  = time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC)
)

// RoundUpDate returns until rounded UP to the next whole second, in UTC: an IMF-fixdate
// carries no fraction, and a truncated date would send a client back early. An instant past the
// last second of year 9999, which no HTTP-date can name, is that last second.
func RoundUpDate(until time.Time) time.Time {
	t := until.Truncate(time.Second)
	if t.Before(until) {
		t = t.Add(time.Second)
	}
	return inRange(t).UTC()
}

// inRange returns t, or the nearest instant an IMF-fixdate can name.
func inRange(t time.Time) time.Time {
	switch {
	case t.After(lastDate):
		return lastDate
	case t.Before(firstDate):
		return firstDate
	}
	return t
}

// Lines hands out the header values of one response from one allocation. Each value is a
// []string of its own, as a value set with [http.Header.Set] is, so that a handler or middleware
// may write to it without touching any other response; numbers are formatted into its own
// bytes. A nil *Lines allocates each value apart.
type Lines struct {
	buf  [10]string
	n    int
	text [96]byte // the bytes of values formatted here; each is written once, then only read
	tn   int
}

// Line returns the header value []string{v}.
func (l *Lines) Line(v string) []string {
	if l == nil || l.n == len(l.buf) {
		return []string{v}
	}
	l.buf[l.n] = v
	s := l.buf[l.n : l.n+1 : l.n+1]
	l.n++
	return s
}

// Int returns the header value of n in decimal.
func (l *Lines) Int(n int64) []string {
	var b [20]byte
	return l.Bytes(strconv.AppendInt(b[:0], n, 10))
}

// Bytes returns the header value of the text b, which it copies.
func (l *Lines) Bytes(b []byte) []string {
	if l == nil || len(b) == 0 || len(b) > len(l.text)-l.tn {
		return l.Line(string(b))
	}
	start := l.tn
	l.tn += copy(l.text[start:], b)
	// The bytes are never written again, so the string is as immutable as any other: this is
	// what strings.Builder does, and it keeps a refusal to one allocation.
	return l.Line(unsafe.String(&l.text[start], len(b)))
}

// A DateCache formats instants as IMF-fixdates, truncated to the second, keeping the last one,
// since the Date of a busy server changes once a second. The zero value is ready to use; it is
// safe for concurrent use.
type DateCache struct {
	last atomic.Pointer[dateLine]
}

type dateLine struct {
	unix  int64
	value string
}

// Format returns t, truncated to the second, in UTC, as an IMF-fixdate; an instant outside the
// years 0000 to 9999, which no IMF-fixdate can name, is formatted as the nearest one that can.
func (c *DateCache) Format(t time.Time) string {
	unix := t.Unix()
	d := c.last.Load()
	if d == nil || d.unix != unix {
		d = &dateLine{unix: unix, value: inRange(t).UTC().Format(http.TimeFormat)}
		c.last.Store(d)
	}
	return d.value
}
