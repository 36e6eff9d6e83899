// Package header holds what the server side, the client and the gateway share about the fields
// they write and read: Retry-After in both forms, Date, the one strict reader of them
// ([ParseRetryAfter], what this repository's own output is held to) and the generous reading
// ([ReadRetryAfter], what a client waits and a gateway repairs by).
//
// Writing is pure: functions of a wait or an instant, and a [Few] (or a [Lines], which also
// formats numbers) that hands out the header values of one response from one allocation.
//
// Traefik's plugins interpret this package with Yaegi v0.16.1 (see traefik/), which lacks the
// min and max builtins, range over an int and the standard library's generic types; the
// package uses none of them, and traefik/'s tests fail if it does.
package header

import (
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
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

// Few hands out up to five header values of one response from one allocation of 88 bytes, the
// fields every refusal sets (Date, Retry-After, Access-Control-Expose-Headers, Content-Type,
// X-Content-Type-Options): each value is a []string of its own, as a value set with
// [http.Header.Set] is, so that a handler or middleware may write to it without touching any
// other response. A sixth value, and a number above 3,600 (a wait of more than an hour), is
// allocated apart. A nil *Few allocates each value apart.
type Few struct {
	buf [5]string
	n   uint // the slots of buf taken (see slot)
}

// Line returns the header value []string{v}.
func (f *Few) Line(v string) []string {
	if f == nil {
		return []string{v}
	}
	return slot(f.buf[:], &f.n, v)
}

// slot returns []string{v} in buf[*n], the next slot of buf, and counts it; or, when buf is
// full, apart. n is unsigned, so that its check against buf proves the indexes in bounds.
func slot(buf []string, n *uint, v string) []string {
	i := *n
	if i >= uint(len(buf)) {
		return []string{v}
	}
	buf[i] = v
	*n = i + 1
	return buf[i : i+1 : i+1]
}

// Int returns the header value of n in decimal: below 100 as strconv formats it, up to an hour
// in seconds (3,600) cut from one text of them all, so that neither allocates, and otherwise
// formatted apart.
func (f *Few) Int(n int64) []string {
	if 100 <= n && n <= anHour {
		return f.Line(hourDecimal(n))
	}
	return f.Line(strconv.FormatInt(n, 10))
}

// hourDecimal returns n, from 100 to anHour, in decimal.
func hourDecimal(n int64) string {
	if n < 1000 {
		i := 3 * (n - 100)
		return upToAnHour()[i : i+3]
	}
	i := 3*900 + 4*(n-1000)
	return upToAnHour()[i : i+4]
}

// anHour is the largest number hourDecimal cuts from upToAnHour: a Retry-After of an hour.
const anHour = 3600

var (
	hourOnce sync.Once
	hourText string
)

// upToAnHour returns the decimal text of every number from 100 to anHour, one after the other
// (13 KB), built the first time a Retry-After of 100 seconds or more is written: strconv keeps
// the numbers below 100 the same way.
func upToAnHour() string {
	hourOnce.Do(func() {
		b := make([]byte, 0, 3*900+4*(anHour-999))
		for n := int64(100); n <= anHour; n++ {
			b = strconv.AppendInt(b, n, 10)
		}
		hourText = string(b)
	})
	return hourText
}

// Lines hands out the header values of a response with the rate-limit fields from one
// allocation, and the text of the numbers it formats from one more: up to six values of its own
// (the fields, and a Retry-After of 100 seconds or more), and, in Few, those of every refusal.
// The values that Int and Bytes return are empty until Done: call it once they are all set,
// before the header is written. A nil *Lines allocates each value apart.
type Lines struct {
	Few
	own   [6]string
	n     uint
	text  [128]byte // the bytes of the values formatted here, until Done makes them strings
	tn    int
	done  int // text[:done] has been made strings
	spans [6]span
	ns    int
}

// A span is a value of Lines that Done sets: own[slot] = text[start:end].
type span struct{ slot, start, end uint8 }

// Line returns the header value []string{v}.
func (l *Lines) Line(v string) []string {
	if l == nil {
		return []string{v}
	}
	return slot(l.own[:], &l.n, v)
}

// Int returns the header value of n in decimal. Up to 3,600 it is set at once, without an
// allocation, as Few.Int sets it; a larger or negative one is formatted into the text.
func (l *Lines) Int(n int64) []string {
	switch {
	case 0 <= n && n < 100:
		return l.Line(strconv.FormatInt(n, 10))
	case 100 <= n && n <= anHour:
		return l.Line(hourDecimal(n))
	}
	var b [20]byte
	return l.Bytes(strconv.AppendInt(b[:0], n, 10))
}

// Bytes returns the header value of the text b, which it copies, set by Done.
func (l *Lines) Bytes(b []byte) []string {
	if l == nil || len(b) > len(l.text)-l.tn || l.n >= uint(len(l.own)) {
		return l.Line(string(b))
	}
	start := l.tn
	l.tn += copy(l.text[start:], b)
	l.spans[l.ns] = span{slot: uint8(l.n), start: uint8(start), end: uint8(l.tn)}
	l.ns++
	return l.Line("")
}

// Done sets the values that Int and Bytes returned since the last Done, from one string.
func (l *Lines) Done() {
	if l == nil || l.ns == 0 {
		return
	}
	text := string(l.text[l.done:l.tn])
	for _, s := range l.spans[:l.ns] {
		l.own[s.slot] = text[int(s.start)-l.done : int(s.end)-l.done]
	}
	l.ns, l.done = 0, l.tn
}

// A DateCache formats instants as IMF-fixdates, truncated to the second, keeping the last one,
// since the Date of a busy server changes once a second. The zero value is ready to use; it is
// safe for concurrent use.
type DateCache struct {
	// last holds the last *dateLine. It is an atomic.Value rather than an
	// atomic.Pointer[dateLine] because Yaegi v0.16.1, the interpreter that runs Traefik's
	// plugins, knows none of the standard library's generic types.
	last atomic.Value
}

type dateLine struct {
	unix  int64
	value string
}

// Format returns t, truncated to the second, in UTC, as an IMF-fixdate; an instant outside the
// years 0000 to 9999, which no IMF-fixdate can name, is formatted as the nearest one that can.
func (c *DateCache) Format(t time.Time) string {
	unix := t.Unix()
	d, _ := c.last.Load().(*dateLine)
	if d == nil || d.unix != unix {
		d = &dateLine{unix: unix, value: inRange(t).UTC().Format(http.TimeFormat)}
		c.last.Store(d)
	}
	return d.value
}
