package header

import (
	"math"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
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
		if got := DelaySeconds(tt.wait); got != tt.want {
			t.Errorf("DelaySeconds(%v) = %d, want %d", tt.wait, got, tt.want)
		}
	}
}

// TestDelaySecondsProperty checks, over many waits, that the seconds written are never below
// the wait and less than a second above it, once read back strictly.
func TestDelaySecondsProperty(t *testing.T) {
	var l Lines
	for wait := time.Duration(1); wait < 1e6*time.Second; wait = wait*3/2 + 7 {
		l = Lines{}
		h := http.Header{RetryAfter: l.Int(DelaySeconds(wait))}
		l.Done()
		got, ok := ParseRetryAfter(h, instant0)
		if !ok || got < wait || got-wait >= time.Second {
			t.Fatalf("wait %v: Retry-After %q parses to %v", wait, h.Get(RetryAfter), got)
		}
	}
}

func TestRoundUpDate(t *testing.T) {
	tests := []struct{ until, want time.Time }{
		{instant0, instant0},
		{instant0.Add(1), instant0.Add(time.Second)},
		{instant0.Add(999 * time.Millisecond), instant0.Add(time.Second)},
		{instant0.In(time.FixedZone("CET", 3600)).Add(500 * time.Millisecond), instant0.Add(time.Second)},
	}
	for _, tt := range tests {
		if got := RoundUpDate(tt.until); !got.Equal(tt.want) || got.Location() != time.UTC {
			t.Errorf("RoundUpDate(%v) = %v, want %v UTC", tt.until, got, tt.want)
		}
	}
}

// TestDateCache checks, over instants that revisit the same second in several zones (so the
// cached line is used and replaced), that every line is the instant truncated, in GMT.
func TestDateCache(t *testing.T) {
	var c DateCache
	rng := rand.New(rand.NewPCG(3, 3))
	cet := time.FixedZone("CET", 3600)
	for range 2000 {
		at := instant0.Add(time.Duration(rng.Int64N(int64(5 * time.Second))))
		if rng.IntN(2) == 0 {
			at = at.In(cet)
		}
		got := c.Format(at)
		if want := at.UTC().Truncate(time.Second).Format(http.TimeFormat); got != want || !strings.HasSuffix(got, " GMT") {
			t.Fatalf("Format(%v) = %q, want %q", at, got, want)
		}
	}
}

// TestLinesAreSeparate writes to every value a Lines handed out and checks that no other value
// changed: each is a header value of its own, as Header.Set makes them.
func TestLinesAreSeparate(t *testing.T) {
	var l Lines
	var values [][]string
	for i := range 14 { // more than the array holds, and numbers past the text buffer
		if i%2 == 0 {
			values = append(values, l.Line("v"+strconv.Itoa(i)))
		} else {
			values = append(values, l.Int(int64(i)*1_000_000_007))
		}
		if i == 7 {
			l.Done() // once midway: the values of each Done are set, and none of the others'
		}
	}
	l.Done()
	for i, v := range values {
		if len(v) != 1 || cap(v) != 1 {
			t.Fatalf("value %d = %q with cap %d, want one line that cannot grow into another", i, v, cap(v))
		}
		want := "v" + strconv.Itoa(i)
		if i%2 == 1 {
			want = strconv.FormatInt(int64(i)*1_000_000_007, 10)
		}
		if v[0] != want {
			t.Fatalf("value %d = %q, want %q", i, v[0], want)
		}
	}
	for i, v := range values {
		v[0] = "poison"
		for j, other := range values {
			if j != i && other[0] == "poison" {
				t.Fatalf("writing value %d changed value %d", i, j)
			}
		}
		v[0] = "done"
	}
}

// TestLinesAllocs checks that a refusal's values cost two allocations, the Lines itself and the
// text it formats, and one when every number is below 100.
func TestLinesAllocs(t *testing.T) {
	h := http.Header{}
	n := testing.AllocsPerRun(100, func() {
		l := new(Lines)
		h[RetryAfter] = l.Int(86_400)
		h[Date] = l.Line("Sun, 29 Nov 2026 12:00:00 GMT")
		h[ContentType] = l.Bytes([]byte(`"default";r=0;t=86400`))
		l.Done()
	})
	if n != 2 {
		t.Fatalf("%v allocations, want 2", n)
	}
	if h.Get(RetryAfter) != "86400" || h.Get(ContentType) != `"default";r=0;t=86400` {
		t.Fatalf("values %q", h)
	}
	n = testing.AllocsPerRun(100, func() {
		l := new(Lines)
		h[RetryAfter] = l.Int(42)
		h[Date] = l.Line("Sun, 29 Nov 2026 12:00:00 GMT")
		l.Done()
	})
	if n != 1 {
		t.Fatalf("small numbers: %v allocations, want 1", n)
	}
}

// TestDatesStayHTTPDates checks that instants no four-digit year can name are written as the
// nearest ones that can, so that every date written parses.
func TestDatesStayHTTPDates(t *testing.T) {
	last := time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC)
	var c DateCache
	for _, tt := range []struct {
		at   time.Time
		want string
	}{
		{last, "Fri, 31 Dec 9999 23:59:59 GMT"},
		{last.Add(500 * time.Millisecond), "Fri, 31 Dec 9999 23:59:59 GMT"},
		{last.Add(time.Second), "Fri, 31 Dec 9999 23:59:59 GMT"},
		{last.AddDate(1000, 0, 0), "Fri, 31 Dec 9999 23:59:59 GMT"},
		{time.Date(-5, 1, 1, 0, 0, 0, 0, time.UTC), "Sat, 01 Jan 0000 00:00:00 GMT"},
	} {
		for name, got := range map[string]string{
			"Format":      c.Format(tt.at),
			"RoundUpDate": RoundUpDate(tt.at).Format(http.TimeFormat),
		} {
			if got != tt.want {
				t.Errorf("%s(%v) = %q, want %q", name, tt.at, got, tt.want)
			}
			if _, ok := ParseHTTPDate(got, instant0); !ok {
				t.Errorf("%s(%v) = %q, which does not parse", name, tt.at, got)
			}
		}
	}
}

// TestFew checks that Few hands out values that are each a line of their own, five from one
// allocation and any more apart, and that a nil Few allocates each.
func TestFew(t *testing.T) {
	for _, f := range []*Few{new(Few), nil} {
		var values [][]string
		for i := range 7 {
			if i%2 == 0 {
				values = append(values, f.Line("v"+strconv.Itoa(i)))
			} else {
				values = append(values, f.Int(int64(i)*1_000_000_007))
			}
		}
		for i, v := range values {
			want := "v" + strconv.Itoa(i)
			if i%2 == 1 {
				want = strconv.FormatInt(int64(i)*1_000_000_007, 10)
			}
			if len(v) != 1 || cap(v) != 1 || v[0] != want {
				t.Fatalf("value %d = %q with cap %d, want [%q] that cannot grow into another", i, v, cap(v), want)
			}
		}
		for i, v := range values {
			v[0] = "poison"
			for j, other := range values {
				if j != i && other[0] == "poison" {
					t.Fatalf("writing value %d changed value %d", i, j)
				}
			}
			v[0] = "done"
		}
	}
	h := http.Header{}
	n := testing.AllocsPerRun(100, func() {
		f := new(Few)
		h[RetryAfter] = f.Int(42)
		h[Date] = f.Line("Sun, 29 Nov 2026 12:00:00 GMT")
		h[ContentType] = f.Line("text/plain; charset=utf-8")
		h["X-Content-Type-Options"] = f.Line("nosniff")
		h["Access-Control-Expose-Headers"] = f.Line("Retry-After, Date")
	})
	if n != 1 {
		t.Fatalf("five values: %v allocations, want 1", n)
	}
}

// TestFewIntUpToAnHour checks that Few.Int and Lines.Int write every number right, and that
// Few.Int hands out a wait of up to an hour (3,600 seconds) without an allocation of its own: a
// refusal of an hourly limit allocates only its Few.
func TestFewIntUpToAnHour(t *testing.T) {
	for n := int64(-2); n <= 3700; n++ {
		if got := new(Few).Int(n); len(got) != 1 || got[0] != strconv.FormatInt(n, 10) {
			t.Fatalf("Int(%d) = %q", n, got)
		}
		l := new(Lines)
		got := l.Int(n)
		l.Done()
		if len(got) != 1 || got[0] != strconv.FormatInt(n, 10) {
			t.Fatalf("Lines.Int(%d) = %q", n, got)
		}
	}
	h := http.Header{}
	for _, n := range []int64{0, 99, 100, 999, 1000, 3599, 3600} {
		if allocs := testing.AllocsPerRun(100, func() { h[RetryAfter] = new(Few).Int(n) }); allocs != 1 {
			t.Errorf("Int(%d): %v allocations, want 1 (the Few)", n, allocs)
		}
	}
}
