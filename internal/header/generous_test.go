package header

import (
	"math"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"
	"time"
)

// Layouts that real senders use and that are not HTTP-dates.
const (
	layoutRFC1123    = time.RFC1123                       // "... UTC": sethvargo/go-limiter
	layoutRFC1123Z   = time.RFC1123Z                      // "... +0000"
	layoutRFC850UTC  = time.RFC850                        // "Sunday, 06-Nov-94 08:49:37 UTC"
	layoutNoDay      = "02 Jan 2006 15:04:05 GMT"         // IMF-fixdate without its day name
	layoutLongDayIMF = "Monday, 02 Jan 2006 15:04:05 GMT" // the long day name in IMF-fixdate
	layoutNoDayASC   = "Jan _2 15:04:05 2006"             // asctime without its day name
)

// TestReadRetryAfter pins each generous reading, with the strict verdict beside it: every value
// read generously is one that ParseRetryAfter refuses (or, for 0, reads as 0).
func TestReadRetryAfter(t *testing.T) {
	const (
		date   = "Sun, 29 Nov 2026 12:00:00 GMT" // the response's Date
		s      = time.Second
		noWait = time.Duration(-1) // strict: not ok
	)
	tests := []struct {
		name    string
		value   string
		date    string        // the response's Date, "" for none
		now     time.Time     // instant0 when zero
		refusal bool          // read as a 429 or 503
		exact   time.Duration // the wait read with ExactDates; noWait for unusable
		rounded time.Duration // the wait read without ExactDates (dates to the end of their second)
		lenient Leniency
		strict  time.Duration // what ParseRetryAfter reads; noWait for not ok
	}{
		// Conforming values read as strictly.
		{name: "seconds", value: "120", refusal: true, exact: 120 * s, rounded: 120 * s, strict: 120 * s},
		{name: "seconds padded", value: " \t7 ", refusal: true, exact: 7 * s, rounded: 7 * s, strict: 7 * s},
		{name: "saturated", value: "99999999999999999999", refusal: true, exact: math.MaxInt64, rounded: math.MaxInt64, strict: math.MaxInt64},
		{name: "IMF-fixdate", value: "Sun, 29 Nov 2026 12:01:30 GMT", date: date, refusal: true, exact: 90 * s, rounded: 91 * s, strict: 90 * s},
		{name: "RFC 850", value: "Sunday, 29-Nov-26 12:01:30 GMT", date: date, refusal: true, exact: 90 * s, rounded: 91 * s, strict: 90 * s},
		{name: "asctime", value: "Sun Nov 29 12:01:30 2026", date: date, refusal: true, exact: 90 * s, rounded: 91 * s, strict: 90 * s},
		{name: "a spelled but wrong week day is conforming", value: "Mon, 29 Nov 2026 12:01:30 GMT", date: date, exact: 90 * s, rounded: 91 * s, strict: 90 * s},
		{name: "0 on a redirect", value: "0", exact: 0, rounded: 0, strict: 0},
		{name: "date equal to Date on a redirect", value: date, date: date, exact: 0, rounded: s, strict: 0},

		// A wait of 0 on a refusal means one under a second.
		{name: "0", value: "0", refusal: true, exact: s, rounded: s, lenient: LenientZero, strict: 0},
		{name: "000", value: "000", refusal: true, exact: s, rounded: s, lenient: LenientZero, strict: 0},
		{name: "date equal to Date", value: date, date: date, refusal: true, exact: s, rounded: s, lenient: LenientZero, strict: 0},

		// Decimal seconds, rounded up, and a leading plus.
		{name: "1.5", value: "1.5", refusal: true, exact: 2 * s, rounded: 2 * s, lenient: LenientFraction, strict: noWait},
		{name: "1.0", value: "1.0", refusal: true, exact: s, rounded: s, lenient: LenientFraction, strict: noWait},
		{name: "0.001", value: "0.001", refusal: true, exact: s, rounded: s, lenient: LenientFraction, strict: noWait},
		{name: "0.0 on a refusal", value: "0.0", refusal: true, exact: s, rounded: s, lenient: LenientFraction | LenientZero, strict: noWait},
		{name: "0.0 on a redirect", value: "0.0", exact: 0, rounded: 0, lenient: LenientFraction, strict: noWait},
		{name: "many fraction digits", value: "2.0000000000000000001", refusal: true, exact: 3 * s, rounded: 3 * s, lenient: LenientFraction, strict: noWait},
		{name: "fraction at saturation", value: "9223372036.5", refusal: true, exact: math.MaxInt64, rounded: math.MaxInt64, lenient: LenientFraction, strict: noWait},
		{name: "+5", value: "+5", refusal: true, exact: 5 * s, rounded: 5 * s, lenient: LenientSign, strict: noWait},
		{name: "+1.5", value: "+1.5", refusal: true, exact: 2 * s, rounded: 2 * s, lenient: LenientSign | LenientFraction, strict: noWait},
		{name: "+0", value: "+0", refusal: true, exact: s, rounded: s, lenient: LenientSign | LenientZero, strict: noWait},

		// Dates in another zone that is UTC, or with the day name missing or misspelled.
		{name: "time.RFC1123 (go-limiter)", value: "Sun, 29 Nov 2026 12:01:30 UTC", date: date, refusal: true, exact: 90 * s, rounded: 91 * s, lenient: LenientZone, strict: noWait},
		{name: "time.RFC1123Z", value: "Sun, 29 Nov 2026 12:01:30 +0000", date: date, refusal: true, exact: 90 * s, rounded: 91 * s, lenient: LenientZone, strict: noWait},
		{name: "-0000", value: "Sun, 29 Nov 2026 12:01:30 -0000", date: date, refusal: true, exact: 90 * s, rounded: 91 * s, lenient: LenientZone, strict: noWait},
		{name: "time.RFC850", value: "Sunday, 29-Nov-26 12:01:30 UTC", date: date, refusal: true, exact: 90 * s, rounded: 91 * s, lenient: LenientZone, strict: noWait},
		{name: "no day name", value: "29 Nov 2026 12:01:30 GMT", date: date, refusal: true, exact: 90 * s, rounded: 91 * s, lenient: LenientDayName, strict: noWait},
		{name: "long day name in IMF-fixdate", value: "Sunday, 29 Nov 2026 12:01:30 GMT", date: date, refusal: true, exact: 90 * s, rounded: 91 * s, lenient: LenientDayName, strict: noWait},
		{name: "lower-case day name", value: "sun, 29 Nov 2026 12:01:30 GMT", date: date, refusal: true, exact: 90 * s, rounded: 91 * s, lenient: LenientDayName, strict: noWait},
		{name: "day name without a comma", value: "Sun 29 Nov 2026 12:01:30 GMT", date: date, refusal: true, exact: 90 * s, rounded: 91 * s, lenient: LenientDayName, strict: noWait},
		{name: "misspelled day name", value: "Xyz, 29 Nov 2026 12:01:30 GMT", date: date, refusal: true, exact: 90 * s, rounded: 91 * s, lenient: LenientDayName, strict: noWait},
		{name: "short day name in RFC 850", value: "Sun, 29-Nov-26 12:01:30 GMT", date: date, refusal: true, exact: 90 * s, rounded: 91 * s, lenient: LenientDayName, strict: noWait},
		{name: "RFC 850 without a day name", value: "29-Nov-26 12:01:30 GMT", date: date, refusal: true, exact: 90 * s, rounded: 91 * s, lenient: LenientDayName, strict: noWait},
		{name: "asctime without a day name", value: "Nov 29 12:01:30 2026", date: date, refusal: true, exact: 90 * s, rounded: 91 * s, lenient: LenientDayName, strict: noWait},
		{name: "asctime with a long day name", value: "Sunday Nov 29 12:01:30 2026", date: date, refusal: true, exact: 90 * s, rounded: 91 * s, lenient: LenientDayName, strict: noWait},
		{name: "no day name, UTC", value: "29 Nov 2026 12:01:30 UTC", date: date, refusal: true, exact: 90 * s, rounded: 91 * s, lenient: LenientZone | LenientDayName, strict: noWait},
		{name: "UTC, equal to Date", value: "Sun, 29 Nov 2026 12:00:00 UTC", date: date, refusal: true, exact: s, rounded: s, lenient: LenientZone | LenientZero, strict: noWait},
		// A Date in the UTC zone is read too, so that the upstream's clock skew still
		// cancels: strictly, the date would be measured against a local clock an hour ahead.
		{name: "Date in UTC", value: "Sun, 29 Nov 2026 12:01:30 GMT", date: "Sun, 29 Nov 2026 12:00:00 UTC", now: instant0.Add(time.Hour),
			refusal: true, exact: 90 * s, rounded: 91 * s, lenient: LenientDateField, strict: noWait},
		{name: "both in UTC", value: "Sun, 29 Nov 2026 12:01:30 UTC", date: "Sun, 29 Nov 2026 12:00:00 UTC", now: instant0.Add(time.Hour),
			refusal: true, exact: 90 * s, rounded: 91 * s, lenient: LenientZone | LenientDateField, strict: noWait},

		// Without a Date, against now; the end of the named second may still be ahead.
		{name: "date within the current second", value: date, now: instant0.Add(400 * time.Millisecond),
			refusal: true, exact: noWait, rounded: 600 * time.Millisecond, lenient: LenientZero, strict: noWait},
		{name: "date within the current second, on a redirect", value: date, now: instant0.Add(400 * time.Millisecond),
			exact: noWait, rounded: 600 * time.Millisecond, strict: noWait},
		{name: "date a second past", value: "Sun, 29 Nov 2026 11:59:59 GMT", date: date, refusal: true, exact: noWait, rounded: noWait, strict: noWait},

		// Still unusable.
		{name: "negative", value: "-1", refusal: true, exact: noWait, rounded: noWait, strict: noWait},
		{name: "negative zero", value: "-0", refusal: true, exact: noWait, rounded: noWait, strict: noWait},
		{name: "exponent", value: "1e3", refusal: true, exact: noWait, rounded: noWait, strict: noWait},
		{name: "fraction with exponent", value: "1.5e3", refusal: true, exact: noWait, rounded: noWait, strict: noWait},
		{name: "hex", value: "0x10", refusal: true, exact: noWait, rounded: noWait, strict: noWait},
		{name: "list", value: "5, 5", refusal: true, exact: noWait, rounded: noWait, strict: noWait},
		{name: "decimal comma", value: "1,5", refusal: true, exact: noWait, rounded: noWait, strict: noWait},
		{name: "trailing dot", value: "1.", refusal: true, exact: noWait, rounded: noWait, strict: noWait},
		{name: "leading dot", value: ".5", refusal: true, exact: noWait, rounded: noWait, strict: noWait},
		{name: "two dots", value: "1.5.5", refusal: true, exact: noWait, rounded: noWait, strict: noWait},
		{name: "plus alone", value: "+", refusal: true, exact: noWait, rounded: noWait, strict: noWait},
		{name: "two signs", value: "+-5", refusal: true, exact: noWait, rounded: noWait, strict: noWait},
		{name: "sign and space", value: "+ 5", refusal: true, exact: noWait, rounded: noWait, strict: noWait},
		{name: "unit", value: "5s", refusal: true, exact: noWait, rounded: noWait, strict: noWait},
		{name: "garbage", value: "soon", refusal: true, exact: noWait, rounded: noWait, strict: noWait},
		{name: "empty", value: "", refusal: true, exact: noWait, rounded: noWait, strict: noWait},
		{name: "NaN", value: "NaN", refusal: true, exact: noWait, rounded: noWait, strict: noWait},
		{name: "other zone", value: "Sun, 29 Nov 2026 12:01:30 PST", date: date, refusal: true, exact: noWait, rounded: noWait, strict: noWait},
		{name: "offset zone", value: "Sun, 29 Nov 2026 12:01:30 +0100", date: date, refusal: true, exact: noWait, rounded: noWait, strict: noWait},
		{name: "lower-case zone", value: "Sun, 29 Nov 2026 12:01:30 utc", date: date, refusal: true, exact: noWait, rounded: noWait, strict: noWait},
		{name: "no zone", value: "Sun, 29 Nov 2026 12:01:30", date: date, refusal: true, exact: noWait, rounded: noWait, strict: noWait},
		{name: "UTC, 31 Feb", value: "Sun, 31 Feb 2026 12:01:30 UTC", date: date, refusal: true, exact: noWait, rounded: noWait, strict: noWait},
		{name: "UTC, double space", value: "Sun,  29 Nov 2026 12:01:30 UTC", date: date, refusal: true, exact: noWait, rounded: noWait, strict: noWait},
		{name: "UTC, one-digit day", value: "Sun, 9 Nov 2026 12:01:30 UTC", date: date, refusal: true, exact: noWait, rounded: noWait, strict: noWait},
		{name: "day name of digits", value: "S1n, 29 Nov 2026 12:01:30 UTC", date: date, refusal: true, exact: noWait, rounded: noWait, strict: noWait},
		{name: "RFC 3339", value: "2026-11-29T12:01:30Z", date: date, refusal: true, exact: noWait, rounded: noWait, strict: noWait},
		{name: "a list of dates", value: "Sun, 29 Nov 2026 12:01:30 UTC, Sun, 29 Nov 2026 12:01:30 UTC", date: date, refusal: true, exact: noWait, rounded: noWait, strict: noWait},
		{name: "UTC date before Date", value: "Sun, 29 Nov 2026 11:59:00 UTC", date: date, refusal: true, exact: noWait, rounded: noWait, strict: noWait},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			now := tt.now
			if now.IsZero() {
				now = instant0
			}
			h := http.Header{"Retry-After": {tt.value}}
			if tt.date != "" {
				h["Date"] = []string{tt.date}
			}
			var mode ReadMode
			if tt.refusal {
				mode = Refusal
			}
			for _, exact := range []bool{true, false} {
				m, want := mode, tt.rounded
				if exact {
					m, want = mode|ExactDates, tt.exact
				}
				r := ReadRetryAfter(h, now, m)
				if want == noWait {
					if r != (Reading{}) {
						t.Errorf("ReadRetryAfter(%q, exact dates %v) = %+v; want unusable", tt.value, exact, r)
					}
					continue
				}
				lenient := tt.lenient
				if !r.OK || r.Wait != want || r.Leniency != lenient {
					t.Errorf("ReadRetryAfter(%q, exact dates %v) = %+v; want %v, leniency %v", tt.value, exact, r, want, lenient)
				}
			}
			d, ok := ParseRetryAfter(h, now)
			if tt.strict == noWait {
				if ok {
					t.Errorf("ParseRetryAfter(%q) = %v, true; want not ok: the strict reader must not read it", tt.value, d)
				}
			} else if !ok || d != tt.strict {
				t.Errorf("ParseRetryAfter(%q) = %v, %v; want %v, true", tt.value, d, ok, tt.strict)
			}
		})
	}
}

// TestReadRetryAfterLines checks that the field lines are taken as strictly: several that
// agree are one value, several that disagree are unusable, none is unusable.
func TestReadRetryAfterLines(t *testing.T) {
	for _, tt := range []struct {
		lines []string
		want  time.Duration // 0: unusable
	}{
		{[]string{"1.5", " 1.5"}, 2 * time.Second},
		{[]string{"1.5", "2"}, 0},
		{[]string{"+5", "5"}, 0},
		{[]string{}, 0},
		{nil, 0},
	} {
		h := http.Header{}
		if tt.lines != nil {
			h["Retry-After"] = tt.lines
		}
		r := ReadRetryAfter(h, instant0, Refusal)
		if r.Wait != tt.want || r.OK != (tt.want > 0) {
			t.Errorf("ReadRetryAfter(%q) = %+v; want %v", tt.lines, r, tt.want)
		}
	}
}

// TestReadRetryAfterLayouts formats many random instants and waits in the layouts real senders
// use, lenient ones included, and checks that each reads back as the wait meant: exactly with
// ExactDates, a second more without, and never through the strict reader for the lenient ones.
func TestReadRetryAfterLayouts(t *testing.T) {
	layouts := []struct {
		layout  string
		lenient Leniency
	}{
		{layoutIMF, 0}, {layoutRFC850, 0}, {layoutASC, 0},
		{layoutRFC1123, LenientZone}, {layoutRFC1123Z, LenientZone}, {layoutRFC850UTC, LenientZone},
		{layoutNoDay, LenientDayName}, {layoutLongDayIMF, LenientDayName}, {layoutNoDayASC, LenientDayName},
	}
	r := rand.New(rand.NewPCG(21, 22))
	for i := 0; i < 20000; i++ {
		at := randomHTTPInstant(r)
		if at.Year() < 1000 {
			continue // time.RFC1123 and friends print years below 1000 in fewer digits
		}
		wait := time.Duration(r.Int64N(49*365*24*3600)) * time.Second
		if i%2 == 0 {
			wait = time.Duration(1+r.IntN(3600)) * time.Second
		}
		now := at.Add(time.Duration(r.Int64N(int64(48*time.Hour))) - 24*time.Hour) // the local clock, off
		for _, ld := range layouts {
			for _, lr := range layouts {
				h := http.Header{"Date": {at.Format(ld.layout)}, "Retry-After": {at.Add(wait).Format(lr.layout)}}
				want := lr.lenient
				if ld.lenient != 0 {
					want |= LenientDateField
				}
				got := ReadRetryAfter(h, now, Refusal|ExactDates)
				if !got.OK || got.Wait != wait || !got.Date || got.Leniency != want {
					t.Fatalf("ReadRetryAfter(%q, exact) = %+v; want %v, leniency %v", h, got, wait, want)
				}
				if got := ReadRetryAfter(h, now, Refusal); got.Wait != wait+time.Second {
					t.Fatalf("ReadRetryAfter(%q) = %+v; want %v: the end of the named second", h, got, wait+time.Second)
				}
				if _, ok := ParseRetryAfter(h, now); want != 0 && lr.lenient != 0 && ok {
					t.Fatalf("ParseRetryAfter(%q) is ok; want the strict reader to refuse it", h)
				}
			}
		}
	}
}

func TestLeniencyString(t *testing.T) {
	for _, tt := range []struct {
		l    Leniency
		want string
	}{
		{0, "conforming"},
		{LenientZone, "zone"},
		{LenientZone | LenientDayName, "zone+day-name"},
		{LenientFraction | LenientSign | LenientZero, "fraction+sign+zero"},
		{LenientDateField, "date-field"},
		{1 << 7, "0x80"},
		{LenientZone | 1<<6, "zone+0x40"},
	} {
		if got := tt.l.String(); got != tt.want {
			t.Errorf("Leniency(%#x).String() = %q, want %q", uint8(tt.l), got, tt.want)
		}
	}
}

func TestReadRetryAfterAllocs(t *testing.T) {
	for _, v := range []string{"120", "1.5", "+5", "0", "soon",
		"Sun, 29 Nov 2026 12:01:00 GMT", "Sun, 29 Nov 2026 12:01:00 UTC", "29 Nov 2026 12:01:00 GMT", "Nov 29 12:01:00 2026"} {
		h := http.Header{"Retry-After": {v}, "Date": {"Sun, 29 Nov 2026 12:00:00 UTC"}}
		if n := testing.AllocsPerRun(100, func() { ReadRetryAfter(h, instant0, Refusal) }); n != 0 {
			t.Errorf("ReadRetryAfter(%q) allocates %v times, want 0", v, n)
		}
	}
}

// FuzzReadRetryAfter checks, for any Retry-After value and Date, in every mode: no panic; a
// wait that is never negative, and above 0 when ok on a refusal; nothing but the zero Reading
// when not ok; wherever the strict reader accepts, the same wait (with ExactDates; a second more
// for a date without), unless the reading says what it read past (a 0 on a refusal, a Date
// that is not an HTTP-date); and whatever only the generous reader accepts, it says so.
func FuzzReadRetryAfter(f *testing.F) {
	f.Add("120", "", false)
	f.Add("1.5", "", true)
	f.Add("+0", "", true)
	f.Add("Sun, 29 Nov 2026 12:01:30 UTC", "Sun, 29 Nov 2026 12:00:00 GMT", true)
	f.Add("29 Nov 2026 12:00:00 GMT", "Sun, 29 Nov 2026 12:00:00 UTC", true)
	f.Add("Nov 29 12:00:00 2026", "", false)
	f.Add("Sunday, 29-Nov-26 12:00:00 UTC", "Sunday, 29-Nov-26 12:00:00 GMT", true)
	f.Fuzz(func(t *testing.T, value, date string, refusal bool) {
		h := http.Header{"Retry-After": {value}}
		if date != "" {
			h["Date"] = []string{date}
		}
		d, strictOK := ParseRetryAfter(h, instant0)
		for _, exact := range []bool{true, false} {
			var mode ReadMode
			if refusal {
				mode |= Refusal
			}
			if exact {
				mode |= ExactDates
			}
			r := ReadRetryAfter(h, instant0, mode)
			switch {
			case r.Wait < 0:
				t.Fatalf("ReadRetryAfter(%q, %q, %v) = %+v: negative", value, date, mode, r)
			case !r.OK && r != (Reading{}):
				t.Fatalf("ReadRetryAfter(%q, %q, %v) = %+v: not ok, yet says more", value, date, mode, r)
			case r.OK && refusal && r.Wait <= 0:
				t.Fatalf("ReadRetryAfter(%q, %q, %v) = %+v: no wait on a refusal", value, date, mode, r)
			case !strictOK && r.OK && r.Leniency == 0:
				t.Fatalf("ReadRetryAfter(%q, %q, %v) = %+v: read what the strict reader refuses, without saying why", value, date, mode, r)
			}
			if !strictOK || r.Leniency&LenientDateField != 0 {
				continue
			}
			want := d
			if r.Date && !exact {
				want = addSat(d, time.Second)
			}
			if want == 0 && refusal {
				want = time.Second
			}
			if !r.OK || r.Wait != want {
				t.Fatalf("ReadRetryAfter(%q, %q, %v) = %+v; the strict reader reads %v, so want %v", value, date, mode, r, d, want)
			}
			if wantZero := d == 0 && refusal; (r.Leniency == LenientZero) != wantZero || (!wantZero && r.Leniency != 0) {
				t.Fatalf("ReadRetryAfter(%q, %q, %v) = %+v: leniency of a value the strict reader reads as %v", value, date, mode, r, d)
			}
		}
		if v := TrimOWS(value); strings.HasPrefix(v, "-") && allDigits(strings.ReplaceAll(v[1:], ".", "")) {
			if r := ReadRetryAfter(h, instant0, Refusal); r.OK {
				t.Fatalf("ReadRetryAfter(%q) = %+v: a negative wait read", value, r)
			}
		}
	})
}

func addSat(a, b time.Duration) time.Duration {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}
