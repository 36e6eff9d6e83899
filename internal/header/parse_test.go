package header

import (
	"math"
	"math/big"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"
	"time"
)

// The three HTTP-date layouts of RFC 9110 §5.6.7, as time.Format writes them
// for a UTC instant.
const (
	layoutIMF    = http.TimeFormat                  // Sun, 06 Nov 1994 08:49:37 GMT
	layoutRFC850 = "Monday, 02-Jan-06 15:04:05 GMT" // Sunday, 06-Nov-94 08:49:37 GMT
	layoutASC    = time.ANSIC                       // Sun Nov  6 08:49:37 1994
)

var dateLayouts = []struct{ name, layout string }{
	{"IMF-fixdate", layoutIMF},
	{"RFC 850", layoutRFC850},
	{"asctime", layoutASC},
}

const saturated = time.Duration(math.MaxInt64)

var instant0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

func TestParseDelaySeconds(t *testing.T) {
	tests := []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"0", 0, true},
		{"1", time.Second, true},
		{"120", 120 * time.Second, true},
		{" 120 ", 120 * time.Second, true},
		{"\t5\t", 5 * time.Second, true},
		{" \t 5 \t ", 5 * time.Second, true},
		{"007", 7 * time.Second, true},
		{"0000000000000000000000000001", time.Second, true},
		{"9223372036", 9223372036 * time.Second, true}, // the largest that fits
		{"9223372037", saturated, true},                // * time.Second would wrap negative
		{"18446744073", saturated, true},
		{"99999999999999999999", saturated, true},
		{"1" + strings.Repeat("0", 400), saturated, true},

		{"", 0, false},
		{" ", 0, false},
		{"\t", 0, false},
		{"+5", 0, false},
		{"-1", 0, false},
		{"-0", 0, false},
		{"1.5", 0, false},
		{"1.", 0, false},
		{"1e3", 0, false},
		{"0x10", 0, false},
		{"0b1", 0, false},
		{"1_000", 0, false},
		{"1,000", 0, false},
		{"120, 120", 0, false},
		{"1 2", 0, false},
		{"120 seconds", 0, false},
		{"120s", 0, false},
		{"99999999999999999999x", 0, false}, // digits are checked before range
		{"x99999999999999999999", 0, false},
		{"١٢٠", 0, false},  // Arabic-Indic digits
		{"１２０", 0, false},  // full-width digits
		{"12\n", 0, false}, // only SP and HTAB are OWS
		{"\v12", 0, false}, // idem
		{"\u00a012", 0, false},
		{"12\x00", 0, false},
	}
	for _, tt := range tests {
		d, ok := parseDelaySeconds(tt.in)
		if d != tt.want || ok != tt.ok {
			t.Errorf("parseDelaySeconds(%q) = %v, %v; want %v, %v", tt.in, d, ok, tt.want, tt.ok)
		}
		// The same through the public entry point, where the value never
		// depends on Date or now.
		h := http.Header{"Retry-After": {tt.in}, "Date": {"Sun, 06 Nov 1994 08:49:37 GMT"}}
		if d, ok := ParseRetryAfter(h, instant0); d != tt.want || ok != tt.ok {
			t.Errorf("ParseRetryAfter(Retry-After: %q) = %v, %v; want %v, %v", tt.in, d, ok, tt.want, tt.ok)
		}
	}
}

// TestParseDelaySecondsMatchesBig checks the seconds form against exact
// arithmetic over many digit strings of every length around the saturation
// point.
func TestParseDelaySecondsMatchesBig(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	limit := big.NewInt(math.MaxInt64)
	for i := 0; i < 20000; i++ {
		n := 1 + r.IntN(25)
		b := make([]byte, n)
		for j := range b {
			b[j] = byte('0' + r.IntN(10))
		}
		s := string(b)
		want := new(big.Int)
		want.SetString(s, 10)
		want.Mul(want, big.NewInt(int64(time.Second)))
		if want.Cmp(limit) > 0 {
			want = limit
		}
		d, ok := parseDelaySeconds(s)
		if !ok || int64(d) != want.Int64() {
			t.Fatalf("parseDelaySeconds(%q) = %v, %v; want %v, true", s, d, ok, want)
		}
	}
}

func TestParseHTTPDate(t *testing.T) {
	at := func(y int, m time.Month, d, hh, mm, ss int) time.Time {
		return time.Date(y, m, d, hh, mm, ss, 0, time.UTC)
	}
	rfc1994 := at(1994, time.November, 6, 8, 49, 37)
	tests := []struct {
		in   string
		ref  time.Time
		want time.Time // zero: not ok
	}{
		// The three examples of RFC 9110 §5.6.7.
		{"Sun, 06 Nov 1994 08:49:37 GMT", instant0, rfc1994},
		{"Sunday, 06-Nov-94 08:49:37 GMT", instant0, rfc1994},
		{"Sun Nov  6 08:49:37 1994", instant0, rfc1994},
		// asctime with one space, or a two-digit day.
		{"Sun Nov 6 08:49:37 1994", instant0, rfc1994},
		{"Sun Nov 06 08:49:37 1994", instant0, rfc1994},
		{"Sun Nov 16 08:49:37 1994", instant0, at(1994, 11, 16, 8, 49, 37)},
		// Surrounding spaces and tabs.
		{" \tSun, 06 Nov 1994 08:49:37 GMT\t ", instant0, rfc1994},
		{"  Sunday, 06-Nov-94 08:49:37 GMT ", instant0, rfc1994},
		{" Sun Nov  6 08:49:37 1994 ", instant0, rfc1994},
		// The week day is spelled right but does not match: accepted.
		{"Mon, 06 Nov 1994 08:49:37 GMT", instant0, rfc1994},
		// Calendar edges.
		{"Thu, 29 Feb 2024 00:00:00 GMT", instant0, at(2024, 2, 29, 0, 0, 0)},
		{"Tue, 29 Feb 2000 00:00:00 GMT", instant0, at(2000, 2, 29, 0, 0, 0)},
		{"Thu, 31 Dec 9999 23:59:59 GMT", instant0, at(9999, 12, 31, 23, 59, 59)},
		{"Sat, 01 Jan 0000 00:00:00 GMT", instant0, at(0, 1, 1, 0, 0, 0)},
		{"Thu, 30 Apr 2026 00:00:00 GMT", instant0, at(2026, 4, 30, 0, 0, 0)},
		// A leap second is the start of the next minute.
		{"Wed, 31 Dec 2025 23:59:60 GMT", instant0, at(2026, 1, 1, 0, 0, 0)},

		// RFC 850 two-digit years: the latest year with those digits that is
		// at most 50 years after the reference (here 2026-11-29 12:00).
		{"Wednesday, 01-Jan-76 00:00:00 GMT", instant0, at(2076, 1, 1, 0, 0, 0)}, // time.Parse: 1976
		{"Sunday, 29-Nov-76 12:00:00 GMT", instant0, at(2076, 11, 29, 12, 0, 0)}, // exactly 50 years
		{"Sunday, 29-Nov-76 12:00:01 GMT", instant0, at(1976, 11, 29, 12, 0, 1)}, // one second more
		{"Tuesday, 01-Dec-76 00:00:00 GMT", instant0, at(1976, 12, 1, 0, 0, 0)},
		{"Friday, 01-Jan-77 00:00:00 GMT", instant0, at(1977, 1, 1, 0, 0, 0)},
		{"Monday, 01-Jan-69 00:00:00 GMT", instant0, at(2069, 1, 1, 0, 0, 0)}, // time.Parse: 1969
		{"Saturday, 01-Jan-00 00:00:00 GMT", instant0, at(2000, 1, 1, 0, 0, 0)},
		{"Friday, 31-Dec-99 23:59:59 GMT", instant0, at(1999, 12, 31, 23, 59, 59)},
		{"Tuesday, 29-Feb-00 00:00:00 GMT", instant0, at(2000, 2, 29, 0, 0, 0)},
		// The same digits against other references.
		{"Friday, 01-Jan-00 00:00:00 GMT", at(2099, 6, 1, 0, 0, 0), at(2100, 1, 1, 0, 0, 0)},
		{"Friday, 01-Jan-99 00:00:00 GMT", at(2000, 6, 1, 0, 0, 0), at(1999, 1, 1, 0, 0, 0)},
		{"Friday, 01-Jan-50 00:00:00 GMT", at(2000, 1, 1, 0, 0, 0), at(2050, 1, 1, 0, 0, 0)},
		{"Friday, 01-Jan-50 00:00:01 GMT", at(2000, 1, 1, 0, 0, 0), at(1950, 1, 1, 0, 0, 1)},
		{"Sunday, 06-Nov-94 08:49:37 GMT", at(1940, 1, 1, 0, 0, 0), at(1894, 11, 6, 8, 49, 37)},
		{"Sunday, 06-Nov-94 08:49:37 GMT", at(1950, 1, 1, 0, 0, 0), at(1994, 11, 6, 8, 49, 37)},
		{"Sunday, 06-Nov-94 08:49:37 GMT", at(2050, 1, 1, 0, 0, 0), at(2094, 11, 6, 8, 49, 37)},
		// 29 Feb of a resolved century year that is not a leap year.
		{"Monday, 29-Feb-00 00:00:00 GMT", at(2060, 1, 1, 0, 0, 0), time.Time{}},  // 2100
		{"Tuesday, 29-Feb-00 00:00:00 GMT", at(1930, 1, 1, 0, 0, 0), time.Time{}}, // 1900

		// Not HTTP-dates.
		{"", instant0, time.Time{}},
		{"GMT", instant0, time.Time{}},
		{"Sun, 6 Nov 1994 08:49:37 GMT", instant0, time.Time{}},     // one-digit IMF day
		{"Sun,  6 Nov 1994 08:49:37 GMT", instant0, time.Time{}},    // padded IMF day
		{"Sun, 06 Nov 94 08:49:37 GMT", instant0, time.Time{}},      // two-digit IMF year
		{"Sun, 06 Nov 01994 08:49:37 GMT", instant0, time.Time{}},   // five-digit year
		{"Sunday, 06-Nov-1994 08:49:37 GMT", instant0, time.Time{}}, // four-digit RFC 850 year
		{"Sunday, 6-Nov-94 08:49:37 GMT", instant0, time.Time{}},    // one-digit RFC 850 day
		{"Sun Nov  6 08:49:37 1994 GMT", instant0, time.Time{}},     // asctime with a zone
		{"Sun Nov  6 08:49:37 GMT 1994", instant0, time.Time{}},     // idem
		{"Sun Nov   6 08:49:37 1994", instant0, time.Time{}},        // three spaces
		{"Sun Nov  16 08:49:37 1994", instant0, time.Time{}},        // two spaces, two digits
		{"Sun Nov  0 08:49:37 1994", instant0, time.Time{}},         // day 0
		{"Sun Nov 0 08:49:37 1994", instant0, time.Time{}},          // day 0
		{"Sun Nov 6 08:49:37 94", instant0, time.Time{}},            // two-digit asctime year
		{"Sun Nov  6 8:49:37 1994", instant0, time.Time{}},          // one-digit hour
		{"Sun, 06 Nov 1994 08:49:37 UTC", instant0, time.Time{}},    // time.RFC1123 with UTC
		{"Sun, 06 Nov 1994 08:49:37 +0000", instant0, time.Time{}},  // numeric zone
		{"Sun, 06 Nov 1994 08:49:37 PST", instant0, time.Time{}},    // other zones
		{"Sun, 06 Nov 1994 08:49:37 EST", instant0, time.Time{}},    //
		{"Sun, 06 Nov 1994 08:49:37 gmt", instant0, time.Time{}},    // GMT is case-sensitive
		{"Sun, 06 Nov 1994 08:49:37 GMT+1", instant0, time.Time{}},  //
		{"Sun, 06 Nov 1994 08:49:37", instant0, time.Time{}},        // no zone
		{"Sunday, 06-Nov-94 08:49:37 UTC", instant0, time.Time{}},   //
		{"Sun, 06 Nov 1994 08:49:37 -0800", instant0, time.Time{}},  //
		{"Sun, 06 Nov 1994 08:49 GMT", instant0, time.Time{}},       // no seconds
		{"Sun, 06 Nov 1994 8:49:37 GMT", instant0, time.Time{}},     // one-digit hour
		{"Sun, 06 Nov 1994 24:00:00 GMT", instant0, time.Time{}},    // hour 24
		{"Sun, 06 Nov 1994 23:60:00 GMT", instant0, time.Time{}},    // minute 60
		{"Sun, 06 Nov 1994 23:59:61 GMT", instant0, time.Time{}},    // second 61
		{"Sun, 06 Nov 1994 08.49.37 GMT", instant0, time.Time{}},    //
		{"Sun, 31 Feb 2026 00:00:00 GMT", instant0, time.Time{}},    // 31 Feb
		{"Sun, 29 Feb 2026 00:00:00 GMT", instant0, time.Time{}},    // not a leap year
		{"Mon, 29 Feb 2100 00:00:00 GMT", instant0, time.Time{}},    // century, not leap
		{"Thu, 31 Apr 2026 00:00:00 GMT", instant0, time.Time{}},    // 31 Apr
		{"Sun, 00 Nov 1994 08:49:37 GMT", instant0, time.Time{}},    // day 0
		{"Sun, 32 Jan 1994 08:49:37 GMT", instant0, time.Time{}},    // day 32
		{"Sunday, 31-Feb-26 00:00:00 GMT", instant0, time.Time{}},   // 31 Feb, RFC 850
		{"Sun Feb 31 00:00:00 2026", instant0, time.Time{}},         // 31 Feb, asctime
		{"Sun Nov  6 24:00:00 1994", instant0, time.Time{}},         // hour 24, asctime
		{"Xyz, 06 Nov 1994 08:49:37 GMT", instant0, time.Time{}},    // unknown day
		{"sun, 06 Nov 1994 08:49:37 GMT", instant0, time.Time{}},    // names are case-sensitive
		{"SUN, 06 Nov 1994 08:49:37 GMT", instant0, time.Time{}},    //
		{"Sun, 06 nov 1994 08:49:37 GMT", instant0, time.Time{}},    //
		{"Sun, 06 NOV 1994 08:49:37 GMT", instant0, time.Time{}},    //
		{"Sun, 06 Foo 1994 08:49:37 GMT", instant0, time.Time{}},    // unknown month
		{"Sunday, 06 Nov 1994 08:49:37 GMT", instant0, time.Time{}}, // long day in IMF
		{"Sun, 06-Nov-94 08:49:37 GMT", instant0, time.Time{}},      // short day in RFC 850
		{"Sundays, 06-Nov-94 08:49:37 GMT", instant0, time.Time{}},  //
		{"sunday, 06-Nov-94 08:49:37 GMT", instant0, time.Time{}},   //
		{"Sunday 06-Nov-94 08:49:37 GMT", instant0, time.Time{}},    //
		{"Sunday, 06 Nov 94 08:49:37 GMT", instant0, time.Time{}},   //
		{"Sunday Nov  6 08:49:37 1994", instant0, time.Time{}},      // long day in asctime
		{"Sun,06 Nov 1994 08:49:37 GMT", instant0, time.Time{}},     //
		{"Sun,  06 Nov 1994 08:49:37 GMT", instant0, time.Time{}},   //
		{"Sun, 06  Nov 1994 08:49:37 GMT", instant0, time.Time{}},   //
		{"Sun, 06 Nov 1994  08:49:37 GMT", instant0, time.Time{}},   //
		{"Sun, 06 Nov 1994 08:49:37  GMT", instant0, time.Time{}},   //
		{"Sun, 06 Nov 1994 08:49:37 GMT\n", instant0, time.Time{}},  //
		{"Sun, ٠6 Nov 1994 08:49:37 GMT", instant0, time.Time{}},    // non-ASCII digit
		{"Sun, 06 Nov 1994 08:49:37.5 GMT", instant0, time.Time{}},  // fraction
		{"1994-11-06T08:49:37Z", instant0, time.Time{}},             // RFC 3339
		{"784111777", instant0, time.Time{}},                        // a Unix time
		{"Sun, 06 Nov 1994 08:49:37 GMT, Sun, 06 Nov 1994 08:49:37 GMT", instant0, time.Time{}},
		{"Sun, 06 Nov 1994 08:49:37 GMT,", instant0, time.Time{}},
	}
	for _, tt := range tests {
		got, ok := ParseHTTPDate(tt.in, tt.ref)
		wantOK := !tt.want.IsZero()
		if ok != wantOK || !got.Equal(tt.want) {
			t.Errorf("ParseHTTPDate(%q, %v) = %v, %v; want %v, %v", tt.in, tt.ref, got, ok, tt.want, wantOK)
		}
		if ok && got.Location() != time.UTC {
			t.Errorf("ParseHTTPDate(%q) is in %v, want UTC", tt.in, got.Location())
		}
	}
}

// randomHTTPInstant returns a whole-second UTC instant in years 0001 to 9899.
func randomHTTPInstant(r *rand.Rand) time.Time {
	lo := time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC).Unix()
	hi := time.Date(9900, 1, 1, 0, 0, 0, 0, time.UTC).Unix()
	return time.Unix(lo+r.Int64N(hi-lo), 0).UTC()
}

// TestParseHTTPDateFormatsAgree formats many random instants in all three
// layouts and checks that each parses back to the same instant, and that the
// IMF-fixdate and asctime results agree with net/http's parser.
func TestParseHTTPDateFormatsAgree(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < 50000; i++ {
		want := randomHTTPInstant(r)
		// Any reference within 49 years (either way) resolves the RFC 850
		// year to the instant's own century.
		ref := want.Add(time.Duration(r.Int64N(int64(2*49*365*24*time.Hour))) - 49*365*24*time.Hour)
		for _, l := range dateLayouts {
			s := want.Format(l.layout)
			got, ok := ParseHTTPDate(s, ref)
			if !ok || !got.Equal(want) {
				t.Fatalf("%s: ParseHTTPDate(%q, %v) = %v, %v; want %v", l.name, s, ref, got, ok, want)
			}
		}
		// Within net/http's range (four-digit years from 1000 on).
		if want.Year() >= 1000 {
			for _, layout := range []string{layoutIMF, layoutASC} {
				s := want.Format(layout)
				std, err := http.ParseTime(s)
				if err != nil || !std.Equal(want) {
					t.Fatalf("http.ParseTime(%q) = %v, %v; want %v", s, std, err, want)
				}
			}
		}
	}
}

// TestParseRFC850Window checks the 50-year rule over many references and
// two-digit years: the result has the given digits, is at most 50 years after
// the reference, and the same date 100 years later would not be.
func TestParseRFC850Window(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for i := 0; i < 50000; i++ {
		ref := randomHTTPInstant(r).Add(time.Duration(r.Int64N(int64(time.Second))))
		day := randomHTTPInstant(r)
		if day.Month() == time.February && day.Day() == 29 {
			continue // the resolved year may not be a leap year
		}
		s := day.Format(layoutRFC850)
		got, ok := ParseHTTPDate(s, ref)
		limit := ref.AddDate(50, 0, 0)
		switch {
		case !ok:
			t.Fatalf("ParseHTTPDate(%q, %v) not ok", s, ref)
		case floorMod(got.Year(), 100) != day.Year()%100 || got.Month() != day.Month() || got.Day() != day.Day() ||
			got.Hour() != day.Hour() || got.Minute() != day.Minute() || got.Second() != day.Second():
			t.Fatalf("ParseHTTPDate(%q, %v) = %v: wrong date", s, ref, got)
		case got.After(limit):
			t.Fatalf("ParseHTTPDate(%q, %v) = %v: more than 50 years ahead", s, ref, got)
		case !got.AddDate(100, 0, 0).After(limit):
			t.Fatalf("ParseHTTPDate(%q, %v) = %v: not the latest such year", s, ref, got)
		}
	}
}

// TestParseHTTPDateStrict mutates one byte of many valid dates and checks that
// whatever is still accepted is exactly what the layout would print for the
// result, but for the day name (not checked against the date) and a leap
// second. So no mutation sneaks through as a lenient reading.
func TestParseHTTPDateStrict(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	alphabet := []byte("0123456789 ,:-+GMTUCSunMonFebNovDecday\t\x00\xff")
	for i := 0; i < 200000; i++ {
		when := randomHTTPInstant(r)
		l := dateLayouts[r.IntN(len(dateLayouts))]
		b := []byte(when.Format(l.layout))
		b[r.IntN(len(b))] = alphabet[r.IntN(len(alphabet))]
		s := string(b)
		got, ok := ParseHTTPDate(s, when)
		if !ok || strings.Contains(s, ":60") {
			continue
		}
		canon := got.Format(l.layout)
		if l.layout == layoutASC && len(s) == 24 && s[8] == '0' {
			canon = canon[:8] + "0" + canon[9:] // "Nov 06": the 2DIGIT day
		}
		// Compare without the day name.
		if withoutDayName(s) != withoutDayName(canon) {
			t.Fatalf("%s: parseHTTPDate accepted %q as %v, which prints as %q", l.name, s, got, canon)
		}
	}
}

func withoutDayName(s string) string {
	i := strings.IndexAny(s, ", ")
	if i < 0 {
		return s
	}
	return s[i:]
}

func TestParseRetryAfter(t *testing.T) {
	const imf1994 = "Sun, 06 Nov 1994 08:49:37 GMT"
	tests := []struct {
		name string
		h    http.Header
		now  time.Time
		want time.Duration
		ok   bool
	}{
		{"absent", http.Header{}, instant0, 0, false},
		{"nil header", nil, instant0, 0, false},
		{"empty line", http.Header{"Retry-After": {""}}, instant0, 0, false},
		{"no lines", http.Header{"Retry-After": {}}, instant0, 0, false},
		{"seconds", http.Header{"Retry-After": {"120"}}, instant0, 120 * time.Second, true},
		{"zero seconds", http.Header{"Retry-After": {"0"}}, instant0, 0, true},
		{"repeated equal lines", http.Header{"Retry-After": {"120", "120"}}, instant0, 120 * time.Second, true},
		{"repeated lines equal after OWS", http.Header{"Retry-After": {"120", " 120\t"}}, instant0, 120 * time.Second, true},
		{"differing lines", http.Header{"Retry-After": {"120", "60"}}, instant0, 0, false},
		{"empty and value lines", http.Header{"Retry-After": {"", "60"}}, instant0, 0, false},
		{"comma list", http.Header{"Retry-After": {"120, 60"}}, instant0, 0, false},
		{"comma list of equal", http.Header{"Retry-After": {"120,120"}}, instant0, 0, false},
		{"comma list of dates", http.Header{"Retry-After": {imf1994 + ", " + imf1994}}, instant0, 0, false},
		{"seconds ignore Date", http.Header{"Retry-After": {"5"}, "Date": {"garbage"}}, instant0, 5 * time.Second, true},

		// The date form subtracts the response's Date, not now: the server's
		// clock is an hour behind the client's here, and the skew cancels.
		{"date minus Date", http.Header{
			"Retry-After": {"Sun, 29 Nov 2026 11:00:30 GMT"},
			"Date":        {"Sun, 29 Nov 2026 11:00:00 GMT"},
		}, instant0, 30 * time.Second, true},
		{"date minus RFC 850 Date", http.Header{
			"Retry-After": {"Sun, 29 Nov 2026 11:00:30 GMT"},
			"Date":        {"Sunday, 29-Nov-26 11:00:00 GMT"},
		}, instant0, 30 * time.Second, true},
		{"date minus asctime Date", http.Header{
			"Retry-After": {"Sun, 29 Nov 2026 11:00:30 GMT"},
			"Date":        {"Sun Nov 29 11:00:00 2026"},
		}, instant0, 30 * time.Second, true},
		{"equal to Date", http.Header{
			"Retry-After": {"Sun, 29 Nov 2026 11:00:00 GMT"},
			"Date":        {"Sun, 29 Nov 2026 11:00:00 GMT"},
		}, instant0, 0, true},
		{"before Date", http.Header{
			"Retry-After": {"Sun, 29 Nov 2026 10:59:59 GMT"},
			"Date":        {"Sun, 29 Nov 2026 11:00:00 GMT"},
		}, instant0, 0, false},
		{"future of now but past of Date", http.Header{
			"Retry-After": {"Sun, 29 Nov 2026 12:00:30 GMT"},
			"Date":        {"Sun, 29 Nov 2026 12:01:00 GMT"},
		}, instant0, 0, false},
		// Without a valid Date, now is the reference, to the nanosecond.
		{"date minus now", http.Header{"Retry-After": {"Sun, 29 Nov 2026 12:00:10 GMT"}},
			instant0.Add(500 * time.Millisecond), 9500 * time.Millisecond, true},
		{"invalid Date", http.Header{
			"Retry-After": {"Sun, 29 Nov 2026 12:00:10 GMT"},
			"Date":        {"Sun, 29 Nov 2026 11:00:00 UTC"},
		}, instant0, 10 * time.Second, true},
		{"conflicting Dates", http.Header{
			"Retry-After": {"Sun, 29 Nov 2026 12:00:10 GMT"},
			"Date":        {"Sun, 29 Nov 2026 11:00:00 GMT", "Sun, 29 Nov 2026 11:00:01 GMT"},
		}, instant0, 10 * time.Second, true},
		{"past of now", http.Header{"Retry-After": {imf1994}}, instant0, 0, false},
		{"equal to now", http.Header{"Retry-After": {"Sun, 29 Nov 2026 12:00:00 GMT"}}, instant0, 0, true},
		{"asctime", http.Header{"Retry-After": {"Sun Nov 29 12:01:00 2026"}}, instant0, time.Minute, true},
		{"asctime one space", http.Header{"Retry-After": {"Tue Dec 1 12:00:00 2026"}}, instant0, 48 * time.Hour, true},
		{"RFC 850", http.Header{"Retry-After": {"Sunday, 29-Nov-26 12:00:05 GMT"}}, instant0, 5 * time.Second, true},
		// The RFC 850 year is resolved against Date, not now: 91 is 2091 seen
		// from a Date in 2090, but 1991 (in the past) seen from 2026.
		{"RFC 850 year against Date", http.Header{
			"Retry-After": {"Monday, 01-Jan-91 00:00:01 GMT"},
			"Date":        {"Sun, 01 Jan 2090 00:00:00 GMT"},
		}, instant0, 365*24*time.Hour + time.Second, true},
		{"RFC 850 year against now", http.Header{
			"Retry-After": {"Monday, 01-Jan-91 00:00:01 GMT"},
		}, instant0, 0, false},
		// A far date saturates rather than wraps.
		{"far date", http.Header{
			"Retry-After": {"Fri, 31 Dec 9999 23:59:59 GMT"},
			"Date":        {"Thu, 01 Jan 1970 00:00:00 GMT"},
		}, instant0, saturated, true},
		{"other zone", http.Header{"Retry-After": {"Sun, 29 Nov 2026 12:01:00 UTC"}}, instant0, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, ok := ParseRetryAfter(tt.h, tt.now)
			if d != tt.want || ok != tt.ok {
				t.Errorf("ParseRetryAfter(%v, %v) = %v, %v; want %v, %v", tt.h, tt.now, d, ok, tt.want, tt.ok)
			}
		})
	}
}

// TestParseRetryAfterRoundTrip formats Date and Retry-After in every pair of
// layouts for many random instants and waits, and checks that the wait comes
// back exactly, whatever the local clock says.
func TestParseRetryAfterRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	for i := 0; i < 20000; i++ {
		at := randomHTTPInstant(r)
		wait := time.Duration(r.Int64N(49*365*24*3600)) * time.Second
		if i%4 == 0 {
			wait = time.Duration(r.IntN(120)) * time.Second
		}
		// The local clock is off by up to a day either way.
		now := at.Add(time.Duration(r.Int64N(int64(48*time.Hour))) - 24*time.Hour)
		checkDateRoundTrip(t, at, wait, now)
	}
}

// checkDateRoundTrip checks that Date: at and Retry-After: at+wait, in every pair
// of layouts, parse back to wait with a local clock reading now, and that
// Retry-After alone parses back to wait when now equals at.
func checkDateRoundTrip(t *testing.T, at time.Time, wait time.Duration, now time.Time) {
	t.Helper()
	for _, ld := range dateLayouts {
		for _, lr := range dateLayouts {
			h := http.Header{
				"Date":        {at.Format(ld.layout)},
				"Retry-After": {at.Add(wait).Format(lr.layout)},
			}
			if d, ok := ParseRetryAfter(h, now); !ok || d != wait {
				t.Fatalf("Date in %s, Retry-After in %s: ParseRetryAfter(%v, %v) = %v, %v; want %v, true",
					ld.name, lr.name, h, now, d, ok, wait)
			}
		}
		h := http.Header{"Retry-After": {at.Add(wait).Format(ld.layout)}}
		if d, ok := ParseRetryAfter(h, at); !ok || d != wait {
			t.Fatalf("Retry-After in %s: ParseRetryAfter(%v, %v) = %v, %v; want %v, true",
				ld.name, h, at, d, ok, wait)
		}
	}
}

func TestParseRetryAfterAllocs(t *testing.T) {
	headers := []http.Header{
		{"Retry-After": {"120"}},
		{"Retry-After": {"99999999999999999999"}},
		{"Retry-After": {"Sun, 29 Nov 2026 12:01:00 GMT"}, "Date": {"Sun, 29 Nov 2026 12:00:00 GMT"}},
		{"Retry-After": {"Sunday, 29-Nov-26 12:01:00 GMT"}, "Date": {"Sunday, 29-Nov-26 12:00:00 GMT"}},
		{"Retry-After": {"Sun Nov 29 12:01:00 2026"}, "Date": {"Sun Nov 29 12:00:00 2026"}},
		{"Retry-After": {"Sun Nov 29 12:01:00 2026"}},
		{"Retry-After": {"nonsense"}},
	}
	for _, h := range headers {
		if n := testing.AllocsPerRun(100, func() { ParseRetryAfter(h, instant0) }); n != 0 {
			t.Errorf("ParseRetryAfter(%v) allocates %v times, want 0", h, n)
		}
	}
}

func BenchmarkParseRetryAfter(b *testing.B) {
	for _, bc := range []struct {
		name string
		h    http.Header
	}{
		{"seconds", http.Header{"Retry-After": {"120"}}},
		{"IMF-fixdate", http.Header{"Retry-After": {"Sun, 29 Nov 2026 12:01:00 GMT"}, "Date": {"Sun, 29 Nov 2026 12:00:00 GMT"}}},
		{"RFC 850", http.Header{"Retry-After": {"Sunday, 29-Nov-26 12:01:00 GMT"}, "Date": {"Sunday, 29-Nov-26 12:00:00 GMT"}}},
		{"asctime", http.Header{"Retry-After": {"Sun Nov 29 12:01:00 2026"}, "Date": {"Sun Nov 29 12:00:00 2026"}}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, ok := ParseRetryAfter(bc.h, instant0); !ok {
					b.Fatal("not ok")
				}
			}
		})
	}
}

// BenchmarkHTTPParseTime is net/http's parser on the same IMF-fixdate, for
// comparison.
func BenchmarkHTTPParseTime(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := http.ParseTime("Sun, 29 Nov 2026 12:01:00 GMT"); err != nil {
			b.Fatal(err)
		}
	}
}

// FuzzParseRetryAfter checks, for any Retry-After value and Date: no panic;
// never a negative wait with ok, and zero without ok; the seconds form equal
// to exact arithmetic saturated at the largest [time.Duration]; every
// accepted IMF-fixdate or asctime value read as net/http reads it; and, for an
// instant and a whole-second wait drawn from the two numbers, Date and
// Retry-After in every pair of the three layouts read back as exactly that
// wait.
func FuzzParseRetryAfter(f *testing.F) {
	f.Add("120", "", int64(0), int64(120))
	f.Add("Sun, 06 Nov 1994 08:49:37 GMT", "Sunday, 06-Nov-94 08:49:00 GMT", int64(784111777), int64(1))
	f.Fuzz(func(t *testing.T, value, date string, unix, wait int64) {
		h := http.Header{"Retry-After": {value}}
		if date != "" {
			h["Date"] = []string{date}
		}
		d, ok := ParseRetryAfter(h, instant0)
		if ok && d < 0 {
			t.Fatalf("ParseRetryAfter(%q, %q) = %v, true: negative", value, date, d)
		}
		if !ok && d != 0 {
			t.Fatalf("ParseRetryAfter(%q, %q) = %v, false: want 0 when not ok", value, date, d)
		}

		v := TrimOWS(value)
		if v != "" && strings.Trim(v, "0123456789") == "" {
			want := new(big.Int)
			want.SetString(v, 10)
			want.Mul(want, big.NewInt(int64(time.Second)))
			if want.Cmp(big.NewInt(math.MaxInt64)) > 0 {
				want.SetInt64(math.MaxInt64)
			}
			if !ok || int64(d) != want.Int64() {
				t.Fatalf("ParseRetryAfter(%q) = %v, %v; want %v, true", value, d, ok, want)
			}
		} else if ok {
			ref := instant0
			if dt, ok := ParseHTTPDate(date, instant0); ok {
				ref = dt
			}
			at, ok := ParseHTTPDate(value, ref)
			if !ok || d != at.Sub(ref) {
				t.Fatalf("ParseRetryAfter(%q, %q) = %v, true; but the date reads %v, %v against %v", value, date, d, at, ok, ref)
			}
			// Whatever this parser accepts in the formats net/http reads,
			// net/http reads the same way (it also accepts more).
			if (len(v) == 29 || len(v) == 24) && at.Year() >= 1000 && !strings.Contains(v, ":60") {
				std, err := http.ParseTime(v)
				if err != nil || !std.Equal(at) {
					t.Fatalf("ParseHTTPDate(%q) = %v; http.ParseTime = %v, %v", v, at, std, err)
				}
			}
		}

		// The round trip: an instant in years 0001-9899 and a wait below
		// 49 years, so that every layout can carry both.
		lo := time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC).Unix()
		hi := time.Date(9900, 1, 1, 0, 0, 0, 0, time.UTC).Unix()
		at := time.Unix(lo+int64(uint64(unix)%uint64(hi-lo)), 0).UTC()
		w := time.Duration(uint64(wait)%(49*365*24*3600)) * time.Second
		now := at.Add(time.Duration(uint64(unix)%(48*3600))*time.Second - 24*time.Hour)
		checkDateRoundTrip(t, at, w, now)
	})
}
