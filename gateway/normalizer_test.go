package gateway

import (
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/retryafter/retryafter/internal/header"
)

// The three HTTP-date formats of RFC 9110 §5.6.7, as an upstream would send them.
func imfDate(t time.Time) string    { return t.UTC().Format(http.TimeFormat) }
func rfc850Date(t time.Time) string { return t.UTC().Format("Monday, 02-Jan-06 15:04:05 GMT") }
func asctimeDate(t time.Time) string {
	return t.UTC().Format(time.ANSIC) // "Mon Jan _2 15:04:05 2006"
}

// unreadBody is a response body that fails the test if anything reads or closes it.
type unreadBody struct{ t *testing.T }

func (b unreadBody) Read([]byte) (int, error) {
	b.t.Error("the normalizer read the body")
	return 0, io.EOF
}

func (b unreadBody) Close() error {
	b.t.Error("the normalizer closed the body")
	return nil
}

// upstreamResponse builds the response an upstream sent: status, the given Retry-After and Date
// lines (none when nil) and two headers the normalizer must not touch.
func upstreamResponse(t *testing.T, status int, retryAfter, date []string) *http.Response {
	h := http.Header{
		"Content-Type": {"application/json"},
		"X-Upstream":   {"a", "b"},
	}
	if retryAfter != nil {
		h["Retry-After"] = retryAfter
	}
	if date != nil {
		h["Date"] = date
	}
	return &http.Response{StatusCode: status, Header: h, Body: unreadBody{t}}
}

func TestNormalizer(t *testing.T) {
	const hour = time.Hour
	skewed := t0.Add(hour) // an upstream whose clock is an hour fast
	slow := t0.Add(-hour)  // and one whose clock is an hour slow
	lines := func(v ...string) []string { return v }
	tests := []normalizerCase{
		// Statuses and responses that pass untouched.
		{name: "200 passes", status: 200, retryAfter: lines("0"), date: lines("garbage"), untouched: true},
		{name: "500 passes", status: 500, retryAfter: lines("0"), untouched: true},
		{name: "300 passes", status: 300, retryAfter: lines("120"), untouched: true},
		{name: "304 passes", status: 304, retryAfter: lines("soon"), untouched: true},
		{name: "200 without headers passes", status: 200, untouched: true},
		{name: "429 without Retry-After passes by default", status: 429, untouched: true},
		{name: "503 without Retry-After or Date passes by default", status: 503, untouched: true},
		{name: "redirect without Retry-After passes", status: 302, untouched: true, set: func(n *Normalizer) { n.FillMissing = true }},

		// Valid values, passed on as delay-seconds with the gateway's Date.
		{name: "seconds", status: 429, retryAfter: lines("120"), want: lines("120")},
		{name: "seconds with skewed Date", status: 429, retryAfter: lines("120"), date: lines(imfDate(skewed)), want: lines("120")},
		{name: "one second", status: 503, retryAfter: lines("1"), want: lines("1")},
		{name: "repeated identical lines", status: 429, retryAfter: lines("30", "30"), want: lines("30")},
		{name: "surrounding whitespace", status: 429, retryAfter: lines("\t120 "), want: lines("120"), full: true},
		{name: "IMF-fixdate, upstream an hour fast", status: 503,
			retryAfter: lines(imfDate(skewed.Add(90 * time.Second))), date: lines(imfDate(skewed)), want: lines("91"), exact: lines("90")},
		{name: "IMF-fixdate, upstream an hour slow", status: 503,
			retryAfter: lines(imfDate(slow.Add(90 * time.Second))), date: lines(imfDate(slow)), want: lines("91"), exact: lines("90")},
		{name: "RFC 850 date, upstream an hour fast", status: 503,
			retryAfter: lines(rfc850Date(skewed.Add(90 * time.Second))), date: lines(imfDate(skewed)), want: lines("91"), exact: lines("90")},
		{name: "asctime date, upstream an hour fast", status: 429,
			retryAfter: lines(asctimeDate(skewed.Add(90 * time.Second))), date: lines(imfDate(skewed)), want: lines("91"), exact: lines("90")},
		{name: "asctime date with a one-digit day", status: 503, now: time.Date(2026, 12, 6, 8, 0, 0, 0, time.UTC),
			retryAfter: lines("Sun Dec  6 08:49:37 2026"), date: lines("Sun, 06 Dec 2026 08:49:00 GMT"), want: lines("38"), exact: lines("37")},
		{name: "RFC 850 Date from the upstream", status: 503,
			retryAfter: lines(imfDate(skewed.Add(45 * time.Second))), date: lines(rfc850Date(skewed)), want: lines("46"), exact: lines("45")},
		{name: "date without upstream Date, measured on the gateway's clock, rounded up", status: 503,
			now: t0.Add(250 * time.Millisecond), retryAfter: lines(imfDate(t0.Add(90 * time.Second))), want: lines("91"), exact: lines("90")},
		{name: "date with an unusable upstream Date, measured on the gateway's clock", status: 503,
			retryAfter: lines(imfDate(t0.Add(30 * time.Second))), date: lines("yesterday"), want: lines("31"), exact: lines("30")},
		{name: "redirect with a date", status: 307,
			retryAfter: lines(imfDate(skewed.Add(20 * time.Second))), date: lines(imfDate(skewed)), want: lines("21"), exact: lines("20")},
		{name: "301 with seconds", status: 301, retryAfter: lines("15"), want: lines("15")},

		// Values that do not conform, or say 0 on a refusal, read as their senders meant.
		{name: "0: under a second", status: 429, retryAfter: lines("0"), want: lines("1"), kind: RepairUnderstood, lenient: LenientZero},
		{name: "0 with a skewed Date", status: 503, retryAfter: lines("0"), date: lines(imfDate(slow)), want: lines("1"), kind: RepairUnderstood, lenient: LenientZero},
		{name: "0, gateway clock mid-second in another zone", status: 429, retryAfter: lines("0"),
			now: t0.Add(600 * time.Millisecond).In(time.FixedZone("CET", 3600)), want: lines("1"), kind: RepairUnderstood, lenient: LenientZero},
		{name: "000", status: 429, retryAfter: lines("000"), want: lines("1"), kind: RepairUnderstood, lenient: LenientZero},
		{name: "signed", status: 429, retryAfter: lines("+7"), want: lines("7"), kind: RepairUnderstood, lenient: LenientSign, full: true},
		{name: "fraction, rounded up", status: 429, retryAfter: lines("1.5"), want: lines("2"), kind: RepairUnderstood, lenient: LenientFraction},
		{name: "fraction under a second", status: 503, retryAfter: lines("0.25"), want: lines("1"), kind: RepairUnderstood, lenient: LenientFraction},
		{name: "UTC instead of GMT (time.RFC1123)", status: 503,
			retryAfter: lines(t0.Add(2 * time.Minute).Format(time.RFC1123)), date: lines(imfDate(t0)), want: lines("121"), exact: lines("120"),
			kind: RepairUnderstood, lenient: LenientZone},
		{name: "+0000 (time.RFC1123Z)", status: 429,
			retryAfter: lines(t0.Add(2 * time.Minute).Format(time.RFC1123Z)), date: lines(imfDate(t0)), want: lines("121"), exact: lines("120"),
			kind: RepairUnderstood, lenient: LenientZone},
		{name: "RFC 850 date in UTC", status: 503,
			retryAfter: lines(t0.Add(2 * time.Minute).Format(time.RFC850)), date: lines(imfDate(t0)), want: lines("121"), exact: lines("120"),
			kind: RepairUnderstood, lenient: LenientZone, full: true},
		{name: "no day name, upstream an hour fast", status: 503,
			retryAfter: lines(skewed.Add(time.Minute).Format("02 Jan 2006 15:04:05 GMT")), date: lines(imfDate(skewed)), want: lines("61"), exact: lines("60"),
			kind: RepairUnderstood, lenient: LenientDayName},
		{name: "UTC Date, upstream an hour fast", status: 503,
			retryAfter: lines(imfDate(skewed.Add(time.Minute))), date: lines(skewed.Format(time.RFC1123)), want: lines("61"), exact: lines("60"),
			kind: RepairUnderstood, lenient: LenientDateField},
		{name: "date equal to the upstream's Date", status: 503,
			retryAfter: lines(imfDate(skewed)), date: lines(imfDate(skewed)), want: lines("1"), kind: RepairUnderstood, lenient: LenientZero},
		{name: "UTC date above the cap", status: 503,
			retryAfter: lines(skewed.Add(2 * time.Hour).Format(time.RFC1123)), date: lines(imfDate(skewed)), want: lines("3600"), kind: RepairClamped, lenient: LenientZone},

		// Unusable values on a 429 or 503 get the fallback.
		{name: "garbage", status: 429, retryAfter: lines("soon"), want: lines("5"), kind: RepairInvalid},
		{name: "empty", status: 503, retryAfter: lines(""), want: lines("5"), kind: RepairInvalid},
		{name: "negative", status: 429, retryAfter: lines("-1"), want: lines("5"), kind: RepairInvalid},
		{name: "exponent", status: 429, retryAfter: lines("1e3"), want: lines("5"), kind: RepairInvalid},
		{name: "hex", status: 429, retryAfter: lines("0x10"), want: lines("5"), kind: RepairInvalid},
		{name: "comma list", status: 429, retryAfter: lines("30, 30"), want: lines("5"), kind: RepairInvalid},
		{name: "lines that disagree", status: 429, retryAfter: lines("30", "60"), want: lines("5"), kind: RepairInvalid, full: true},
		{name: "other zone", status: 503,
			retryAfter: lines(t0.Add(2 * time.Minute).In(time.FixedZone("PST", -8*3600)).Format(time.RFC1123Z)), date: lines(imfDate(t0)), want: lines("5"), kind: RepairInvalid},
		{name: "date before the upstream's Date", status: 503,
			retryAfter: lines(imfDate(skewed.Add(-time.Second))), date: lines(imfDate(skewed)), want: lines("5"), kind: RepairInvalid},
		{name: "past date measured on the gateway's clock", status: 429,
			retryAfter: lines(imfDate(t0.Add(-time.Minute))), want: lines("5"), kind: RepairInvalid},
		{name: "fallback set, rounded up", status: 429, set: func(n *Normalizer) { n.Fallback = 1500 * time.Millisecond },
			retryAfter: lines("soon"), want: lines("2"), kind: RepairInvalid},

		// Values above the cap are clamped.
		{name: "above the cap", status: 429, retryAfter: lines("7200"), want: lines("3600"), kind: RepairClamped},
		{name: "at the cap", status: 429, retryAfter: lines("3600"), want: lines("3600")},
		{name: "huge", status: 429, retryAfter: lines("99999999999999999999"), want: lines("3600"), kind: RepairClamped, full: true},
		{name: "overflows a Duration", status: 503, retryAfter: lines("9223372037"), want: lines("3600"), kind: RepairClamped, full: true},
		{name: "date years away", status: 503,
			retryAfter: lines("Fri, 31 Dec 9999 23:59:59 GMT"), date: lines(imfDate(skewed)), want: lines("3600"), kind: RepairClamped},
		{name: "cap set", status: 503, set: func(n *Normalizer) { n.Max = 90 * time.Second },
			retryAfter: lines("120"), want: lines("90"), kind: RepairClamped},
		{name: "cap rounded down", status: 503, set: func(n *Normalizer) { n.Max = 2500 * time.Millisecond },
			retryAfter: lines("3"), want: lines("2"), kind: RepairClamped},
		{name: "fallback clamped to the cap", status: 503, set: func(n *Normalizer) { n.Max = 2 * time.Second },
			retryAfter: lines("soon"), want: lines("2"), kind: RepairInvalid},
		{name: "redirect above the cap", status: 308, retryAfter: lines("86400"), want: lines("3600"), kind: RepairClamped},

		// Missing values get the fallback only when asked.
		{name: "429 without Retry-After, fallback on", status: 429, set: func(n *Normalizer) { n.FillMissing = true },
			want: lines("5"), kind: RepairMissing},
		{name: "503 without Retry-After or Date, fallback on", status: 503, set: func(n *Normalizer) { n.FillMissing, n.Fallback = true, 30*time.Second },
			want: lines("30"), kind: RepairMissing},
		{name: "fallback set, missing left off", status: 503, set: func(n *Normalizer) { n.Fallback = 30 * time.Second }, untouched: true},

		// Unusable values on a redirect are removed.
		{name: "redirect with 0", status: 302, retryAfter: lines("0"), want: nil, kind: RepairRemoved},
		{name: "redirect with garbage", status: 303, retryAfter: lines("later"), date: lines(imfDate(skewed)), want: nil, kind: RepairRemoved},
		{name: "redirect with a past date", status: 307,
			retryAfter: lines(imfDate(skewed.Add(-time.Minute))), date: lines(imfDate(skewed)), want: nil, kind: RepairRemoved},
	}
	for _, tt := range tests {
		// Each case with the default, which reads a date to the end of the second it names,
		// and with ExactDates.
		for _, exact := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/exact=%v", tt.name, exact), func(t *testing.T) {
				if exact && tt.exact != nil {
					tt.want = tt.exact
				}
				tt.check(t, exact)
			})
		}
	}
}

// A normalizerCase is one case of TestNormalizer.
type normalizerCase struct {
	name       string
	set        func(*Normalizer) // sets fields before the clock and repair hook; nil for none
	status     int
	retryAfter []string // what the upstream sent; nil for none
	date       []string
	now        time.Time // the gateway's clock; t0 when zero

	untouched bool       // the response must come out exactly as it went in
	want      []string   // the client's Retry-After lines, nil for none
	exact     []string   // the same with ExactDates, when it differs from want
	kind      RepairKind // what the repair hook must be told, 0 for nothing
	lenient   Leniency   // the hook's Leniency
	full      bool       // depends on the full parser (parse.go), not the stand-in
}

// check runs the case through a Normalizer, with ExactDates as given.
func (tt normalizerCase) check(t *testing.T, exact bool) {
	now := tt.now
	if now.IsZero() {
		now = t0
	}
	var repairs []Repair
	n := &Normalizer{ExactDates: exact}
	if tt.set != nil {
		tt.set(n)
	}
	n.Now = func() time.Time { return now }
	n.OnRepair = func(r Repair) { repairs = append(repairs, r) }
	req := httptest.NewRequest("GET", "http://upstream.test/x", nil)
	resp := upstreamResponse(t, tt.status, slices.Clone(tt.retryAfter), slices.Clone(tt.date))
	resp.Request = req
	before := resp.Header.Clone()

	if err := n.ModifyResponse(resp); err != nil {
		t.Fatalf("ModifyResponse: %v", err)
	}
	note := ""
	if tt.full {
		note = " (this case needs the full parser, parse.go)"
	}
	if resp.StatusCode != tt.status {
		t.Fatalf("status = %d, want %d", resp.StatusCode, tt.status)
	}
	if tt.untouched {
		if !maps.EqualFunc(resp.Header, before, slices.Equal) {
			t.Fatalf("header changed:\n got %q\nwant %q", resp.Header, before)
		}
		if len(repairs) != 0 {
			t.Fatalf("hook told of %+v for an untouched response", repairs)
		}
		return
	}
	if got := resp.Header["Retry-After"]; !slices.Equal(got, tt.want) {
		t.Errorf("Retry-After = %q, want %q%s", got, tt.want, note)
	}
	if got, want := resp.Header["Date"], []string{imfDate(now)}; !slices.Equal(got, want) {
		t.Errorf("Date = %q, want %q", got, want)
	}
	for k, v := range before {
		if k != "Retry-After" && k != "Date" && !slices.Equal(resp.Header[k], v) {
			t.Errorf("%s changed from %q to %q", k, v, resp.Header[k])
		}
	}
	if len(resp.Header) > len(before)+2 {
		t.Errorf("header grew: %q", resp.Header)
	}

	if tt.kind == 0 {
		if len(repairs) != 0 {
			t.Errorf("hook told of %+v for a faithful rewrite%s", repairs, note)
		}
		return
	}
	if len(repairs) != 1 {
		t.Fatalf("hook told of %d repairs, want 1 (%v)%s", len(repairs), tt.kind, note)
	}
	r := repairs[0]
	var wantWait time.Duration
	if len(tt.want) == 1 {
		s, _ := strconv.Atoi(tt.want[0])
		wantWait = time.Duration(s) * time.Second
	}
	if r.Kind != tt.kind || r.Status != tt.status || r.Request != req ||
		!slices.Equal(r.UpstreamRetryAfter, tt.retryAfter) || !slices.Equal(r.UpstreamDate, tt.date) ||
		r.ClientRetryAfter != wantWait || !r.ClientDate.Equal(now.Truncate(time.Second)) || r.ClientDate.Location() != time.UTC {
		t.Errorf("hook told of %+v, want kind %v, status %d, upstream %q %q, client %v at %v%s",
			r, tt.kind, tt.status, tt.retryAfter, tt.date, wantWait, now.Truncate(time.Second), note)
	}
	if r.Leniency != tt.lenient {
		t.Errorf("hook told of leniency %v, want %v", r.Leniency, tt.lenient)
	}
	// What was understood is what the client got, before rounding and clamping.
	switch {
	case r.Kind == RepairInvalid || r.Kind == RepairMissing:
		if r.Understood != 0 {
			t.Errorf("hook told of %v understood from an unusable value", r.Understood)
		}
	case r.Kind == RepairClamped:
		if r.Understood <= r.ClientRetryAfter {
			t.Errorf("hook told of %v understood, clamped to %v", r.Understood, r.ClientRetryAfter)
		}
	case r.Kind == RepairUnderstood:
		if r.Understood <= 0 || header.DelaySeconds(r.Understood) != int64(r.ClientRetryAfter/time.Second) {
			t.Errorf("hook told of %v understood, yet the client got %v", r.Understood, r.ClientRetryAfter)
		}
	}
}

// TestNormalizerMeaning checks, over many upstream waits, clock skews, date formats and gateway
// clock readings, that the client is told to wait what the upstream meant: exactly, when the
// upstream sent delay-seconds or (with ExactDates) a date with its own Date; rounded up by less
// than a second when a date had to be measured against the gateway's clock; never less. Without
// ExactDates a date means the end of the second it names: one second more.
func TestNormalizerMeaning(t *testing.T) {
	for _, exact := range []bool{true, false} {
		testNormalizerMeaning(t, exact)
	}
}

func testNormalizerMeaning(t *testing.T, exact bool) {
	formats := []struct {
		name   string
		format func(time.Time) string
	}{
		{"IMF-fixdate", imfDate}, {"RFC 850", rfc850Date}, {"asctime", asctimeDate},
		// Not HTTP-dates, but what real upstreams send: read as the same instant.
		{"time.RFC1123", func(t time.Time) string { return t.UTC().Format(time.RFC1123) }},
		{"time.RFC1123Z", func(t time.Time) string { return t.UTC().Format(time.RFC1123Z) }},
		{"no day name", func(t time.Time) string { return t.UTC().Format("02 Jan 2006 15:04:05 GMT") }},
	}
	skews := []time.Duration{-25 * time.Hour, -time.Hour, -time.Second, 0, 37 * time.Second, time.Hour, 48 * time.Hour}
	fractions := []time.Duration{0, time.Nanosecond, 250 * time.Millisecond, 999 * time.Millisecond}
	clock := newClock(t0)
	n := &Normalizer{Now: clock.Now, ExactDates: exact}
	end := time.Second // a date's second, read to its end
	if exact {
		end = 0
	}
	checks := 0
	for wait := time.Second; wait < 2*time.Hour; wait = wait*7/4 + time.Second {
		wait = wait.Truncate(time.Second)
		want := min(wait, time.Hour)
		wantDate := min(wait+end, time.Hour)
		for _, frac := range fractions {
			now := t0.Add(frac)
			clock.Set(now)
			check := func(what string, retryAfter, date []string, lo, hi time.Duration) {
				t.Helper()
				resp := upstreamResponse(t, 503, retryAfter, date)
				n.ModifyResponse(resp)
				got, ok := header.ParseRetryAfter(resp.Header, now.Add(-3*time.Hour)) // the client's clock plays no part
				if !ok || got < lo || got > hi {
					t.Fatalf("%s: upstream meant %v (Retry-After %q, Date %q), client got %q (%v, %v), want in [%v, %v]",
						what, wait, retryAfter, date, resp.Header["Retry-After"], got, ok, lo, hi)
				}
				checks++
			}
			check("seconds", []string{strconv.FormatInt(int64(wait/time.Second), 10)}, nil, want, want)
			for _, f := range formats {
				for _, skew := range skews {
					upstreamNow := t0.Add(skew) // whole seconds: a Date carries no fraction
					check(f.name+" with a skewed Date",
						[]string{f.format(upstreamNow.Add(wait))}, []string{imfDate(upstreamNow)}, wantDate, wantDate)
				}
				// Without a Date the date is measured against the gateway's clock, rounded up.
				meant := wait - frac + end
				check(f.name+" without Date", []string{f.format(t0.Add(wait))}, nil,
					min(meant, time.Hour), min(meant+time.Second-1, time.Hour))
			}
		}
	}
	if checks < 500 {
		t.Fatalf("only %d checks ran", checks)
	}
}

// TestNormalizerEndToEnd sends requests from a client through an httputil.ReverseProxy with the
// normalizer to a misbehaving httptest upstream whose clock is an hour fast, and checks that
// the client, parsing with ParseRetryAfter, waits what the upstream meant and that the rest of
// each response, body included, arrives unchanged.
func TestNormalizerEndToEnd(t *testing.T) {
	upstreamNow := t0.Add(time.Hour).Add(400 * time.Millisecond) // an hour fast
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		h := w.Header()
		h.Set("X-Upstream", "kept")
		if v, ok := q["ra"]; ok {
			h["Retry-After"] = v
		}
		if q.Get("date") == "1" {
			h.Set("Date", imfDate(upstreamNow))
		} else {
			h["Date"] = nil // suppress net/http's own Date, as some upstreams do on 5xx
		}
		status, _ := strconv.Atoi(q.Get("status"))
		w.WriteHeader(status)
		io.WriteString(w, "upstream body "+q.Get("status"))
	}))
	defer upstream.Close()
	target, err := url.Parse(upstream.URL)
	if err != nil {
		t.Fatal(err)
	}

	gatewayNow := t0.Add(700 * time.Millisecond)
	var (
		mu      sync.Mutex
		repairs []Repair
	)
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.ModifyResponse = (&Normalizer{
		Now:         func() time.Time { return gatewayNow },
		FillMissing: true,
		OnRepair: func(r Repair) {
			mu.Lock()
			defer mu.Unlock()
			repairs = append(repairs, r)
		},
	}).ModifyResponse
	gateway := httptest.NewServer(proxy)
	defer gateway.Close()
	client := gateway.Client()
	client.Timeout = 5 * time.Second

	upstreamAt := func(d time.Duration) time.Time { return upstreamNow.Truncate(time.Second).Add(d) }
	tests := []struct {
		status     int
		retryAfter []string
		date       bool          // the upstream sends its (skewed) Date
		lo, hi     time.Duration // the wait the client must get; hi 0 for no Retry-After
		repaired   bool
	}{
		{429, []string{"120"}, true, 120 * time.Second, 120 * time.Second, false},
		// A date is read to the end of the second it names.
		{503, []string{imfDate(upstreamAt(90 * time.Second))}, true, 91 * time.Second, 91 * time.Second, false},
		{503, []string{rfc850Date(upstreamAt(75 * time.Second))}, true, 76 * time.Second, 76 * time.Second, false},
		{429, []string{asctimeDate(upstreamAt(61 * time.Second))}, true, 62 * time.Second, 62 * time.Second, false},
		// A date without Date: the gateway measures it on its own clock (an hour behind the
		// upstream's), which is all anyone can do; it must still be >= 1 s and capped.
		{503, []string{imfDate(upstreamAt(90 * time.Second))}, false, time.Hour, time.Hour, true},
		{429, []string{"0"}, true, time.Second, time.Second, true},
		{429, []string{"1.5"}, true, 2 * time.Second, 2 * time.Second, true},
		{503, []string{upstreamAt(30 * time.Second).Format(time.RFC1123)}, true, 31 * time.Second, 31 * time.Second, true},
		{429, []string{"soon"}, true, 5 * time.Second, 5 * time.Second, true},
		{503, nil, false, 5 * time.Second, 5 * time.Second, true},
		{307, []string{"0"}, true, 0, 0, true},
		{200, []string{"0"}, true, -1, -1, false}, // untouched: the client sees the upstream's own
	}
	for _, tt := range tests {
		q := url.Values{"status": {strconv.Itoa(tt.status)}}
		for _, v := range tt.retryAfter {
			q.Add("ra", v)
		}
		if tt.date {
			q.Set("date", "1")
		}
		req, _ := http.NewRequest("GET", gateway.URL+"/?"+q.Encode(), nil)
		req.Header.Set("Connection", "close")
		client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		what := fmt.Sprintf("%d %q (upstream Date: %v)", tt.status, tt.retryAfter, tt.date)
		if resp.StatusCode != tt.status || string(body) != "upstream body "+strconv.Itoa(tt.status) ||
			resp.Header.Get("X-Upstream") != "kept" {
			t.Fatalf("%s: got %d %q, X-Upstream %q", what, resp.StatusCode, body, resp.Header.Get("X-Upstream"))
		}
		switch {
		case tt.lo < 0:
			if got := resp.Header["Retry-After"]; !slices.Equal(got, tt.retryAfter) {
				t.Errorf("%s: Retry-After = %q, want the upstream's own", what, got)
			}
			continue
		case tt.hi == 0:
			if got, ok := resp.Header["Retry-After"]; ok {
				t.Errorf("%s: Retry-After = %q, want none", what, got)
			}
		default:
			// The client's clock is a day off; with the gateway's Date it plays no part.
			got, ok := header.ParseRetryAfter(resp.Header, t0.Add(24*time.Hour))
			if !ok || got < tt.lo || got > tt.hi || len(resp.Header["Retry-After"]) != 1 {
				t.Errorf("%s: client got Retry-After %q (%v), want a wait in [%v, %v]",
					what, resp.Header["Retry-After"], got, tt.lo, tt.hi)
			}
		}
		if got, want := resp.Header.Get("Date"), imfDate(gatewayNow); got != want {
			t.Errorf("%s: Date = %q, want the gateway's %q", what, got, want)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	want := 0
	for _, tt := range tests {
		if tt.repaired {
			want++
		}
	}
	if len(repairs) != want {
		t.Fatalf("hook told of %d repairs, want %d", len(repairs), want)
	}
	for _, r := range repairs {
		if r.Request == nil || r.Request.URL.Host != target.Host {
			t.Errorf("repair %+v does not name the upstream %s", r, target.Host)
		}
	}
}

// TestNormalizerFieldDefaults checks that a field out of range means its default (a Fallback of
// 0 or less: 5 s; a Max of 0 or less: 1 h) rather than a Retry-After of 0, that a Max above 0 but
// below one second is one second (the shortest Retry-After a refusal can carry), never the
// default hour, that the smallest values in range are used as set, and that a Fallback above Max
// is clamped to Max.
func TestNormalizerFieldDefaults(t *testing.T) {
	tests := []struct {
		name       string
		fallback   time.Duration
		max        time.Duration
		retryAfter string
		want       string
		kind       RepairKind
	}{
		{name: "Fallback 0", fallback: 0, retryAfter: "soon", want: "5", kind: RepairInvalid},
		{name: "Fallback -1s", fallback: -time.Second, retryAfter: "soon", want: "5", kind: RepairInvalid},
		{name: "Fallback -1s, missing", fallback: -time.Second, want: "5", kind: RepairMissing},
		{name: "Max 999ms is 1s", max: 999 * time.Millisecond, retryAfter: "7200", want: "1", kind: RepairClamped},
		{name: "Max 1ns is 1s", max: 1, retryAfter: "2", want: "1", kind: RepairClamped},
		{name: "Max 0", max: 0, retryAfter: "7200", want: "3600", kind: RepairClamped},
		{name: "Max -1h", max: -time.Hour, retryAfter: "7200", want: "3600", kind: RepairClamped},
		{name: "Max 999ms passes 1", max: 999 * time.Millisecond, retryAfter: "1", want: "1"},
		{name: "Fallback out of range, Max 1ns", fallback: -1, max: 1, retryAfter: "soon", want: "1", kind: RepairInvalid},
		{name: "Fallback and Max both out of range", fallback: -1, max: -1, retryAfter: "soon", want: "5", kind: RepairInvalid},
		{name: "Fallback 2h clamped to the default Max", fallback: 2 * time.Hour, retryAfter: "soon", want: "3600", kind: RepairInvalid},
		{name: "Fallback 2h clamped to Max 999ms, that is 1s", fallback: 2 * time.Hour, max: 999 * time.Millisecond,
			retryAfter: "soon", want: "1", kind: RepairInvalid},
		{name: "Fallback 10s clamped to Max 3s", fallback: 10 * time.Second, max: 3 * time.Second, retryAfter: "soon", want: "3", kind: RepairInvalid},
		{name: "Fallback 10s clamped to Max 3s, missing", fallback: 10 * time.Second, max: 3 * time.Second, want: "3", kind: RepairMissing},
		{name: "Fallback 10s clamped to Max 3.9s, rounded down", fallback: 10 * time.Second, max: 3900 * time.Millisecond,
			retryAfter: "soon", want: "3", kind: RepairInvalid},
		// The smallest values in range are used as set.
		{name: "Fallback 1ns", fallback: 1, retryAfter: "soon", want: "1", kind: RepairInvalid},
		{name: "Max 1s", max: time.Second, retryAfter: "2", want: "1", kind: RepairClamped},
		{name: "Fallback 1ns, Max 1s", fallback: 1, max: time.Second, retryAfter: "soon", want: "1", kind: RepairInvalid},
		{name: "Max 1s passes 1", max: time.Second, retryAfter: "1", want: "1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var repairs []Repair
			n := &Normalizer{
				Now:         func() time.Time { return t0 },
				Fallback:    tt.fallback,
				Max:         tt.max,
				FillMissing: true,
				OnRepair:    func(r Repair) { repairs = append(repairs, r) },
			}
			var retryAfter []string
			if tt.retryAfter != "" {
				retryAfter = []string{tt.retryAfter}
			}
			resp := upstreamResponse(t, 503, retryAfter, nil)
			if err := n.ModifyResponse(resp); err != nil {
				t.Fatalf("ModifyResponse: %v", err)
			}
			if got := resp.Header["Retry-After"]; !slices.Equal(got, []string{tt.want}) {
				t.Errorf("Fallback %v, Max %v, upstream Retry-After %q: client got %q, want %q",
					tt.fallback, tt.max, retryAfter, got, tt.want)
			}
			switch {
			case tt.kind == 0 && len(repairs) != 0:
				t.Errorf("hook told of %+v for a faithful rewrite", repairs)
			case tt.kind != 0 && (len(repairs) != 1 || repairs[0].Kind != tt.kind):
				t.Errorf("hook told of %+v, want one repair of kind %v", repairs, tt.kind)
			}
			// The fields are read as they are, never rewritten.
			if n.Fallback != tt.fallback || n.Max != tt.max {
				t.Errorf("fields changed to Fallback %v, Max %v", n.Fallback, n.Max)
			}
		})
	}
}

func TestRepairKindString(t *testing.T) {
	seen := map[string]bool{}
	for k := RepairInvalid; k <= RepairUnderstood; k++ {
		s := k.String()
		if s == "" || strings.HasPrefix(s, "RepairKind(") || seen[s] {
			t.Errorf("RepairKind(%d).String() = %q", k, s)
		}
		seen[s] = true
	}
	if got := RepairKind(0).String(); got != "RepairKind(0)" {
		t.Errorf("RepairKind(0).String() = %q", got)
	}
}

// touchedStatus reports whether the normalizer may change a response of status.
func touchedStatus(status int) bool {
	switch status {
	case 301, 302, 303, 307, 308, 429, 503:
		return true
	}
	return false
}

// FuzzNormalizer feeds the normalizer arbitrary statuses, Retry-After and Date values
// ("\n" separates several field lines) and checks that it never panics, leaves other statuses
// untouched, and otherwise sends a single Retry-After of 1*DIGIT within [1, cap] (none on a
// redirect whose value was unusable) with the gateway's Date, and nothing else changed; that
// the client is told what the generous reading understood, and, wherever the strict reader
// reads a wait, that wait (a date to the end of its second).
func FuzzNormalizer(f *testing.F) {
	f.Add(429, "0", "")
	f.Add(503, "Sun, 29 Nov 2026 13:01:30 GMT", "Sun, 29 Nov 2026 13:00:00 GMT")
	const maxWait = 90 * time.Second
	now := t0.Add(300 * time.Millisecond)
	f.Fuzz(func(t *testing.T, status int, retryAfter, date string) {
		for _, missing := range []bool{false, true} {
			n := &Normalizer{Now: func() time.Time { return now }, Max: maxWait, FillMissing: missing}
			resp := &http.Response{StatusCode: status, Header: http.Header{"X-Other": {retryAfter}}, Body: unreadBody{t}}
			if retryAfter != "" {
				resp.Header["Retry-After"] = strings.Split(retryAfter, "\n")
			}
			if date != "" {
				resp.Header["Date"] = strings.Split(date, "\n")
			}
			before := resp.Header.Clone()
			redirect := status != 429 && status != 503
			var mode header.ReadMode
			if !redirect {
				mode = header.Refusal
			}
			meant := header.ReadRetryAfter(before, now, mode)
			strict, strictOK := header.ParseRetryAfter(before, now)

			if err := n.ModifyResponse(resp); err != nil {
				t.Fatal(err)
			}
			h := resp.Header
			_, had := before["Retry-After"]
			if !touchedStatus(status) || (!had && (redirect || !missing)) {
				if !maps.EqualFunc(h, before, slices.Equal) {
					t.Fatalf("status %d: header changed from %q to %q", status, before, h)
				}
				continue
			}
			if resp.StatusCode != status || !slices.Equal(h["X-Other"], before["X-Other"]) || len(h) > 3 {
				t.Fatalf("status %d: more than Retry-After and Date changed: %q", resp.StatusCode, h)
			}
			if got, want := h["Date"], []string{imfDate(now)}; !slices.Equal(got, want) {
				t.Fatalf("Date = %q, want %q", got, want)
			}
			ra, ok := h["Retry-After"]
			if !ok {
				if !redirect || (meant.OK && meant.Wait > 0) {
					t.Fatalf("status %d, Retry-After %q: none sent", status, before["Retry-After"])
				}
				continue
			}
			if len(ra) != 1 || ra[0] == "" || strings.Trim(ra[0], "0123456789") != "" {
				t.Fatalf("Retry-After %q is not a single 1*DIGIT", ra)
			}
			secs, err := strconv.ParseInt(ra[0], 10, 64)
			if err != nil || secs < 1 || secs > int64(maxWait/time.Second) {
				t.Fatalf("Retry-After %q is not within [1, %d]", ra, int64(maxWait/time.Second))
			}
			if meant.OK && meant.Wait > 0 {
				want := min(header.DelaySeconds(meant.Wait), int64(maxWait/time.Second))
				if secs != want {
					t.Fatalf("upstream meant %v (Retry-After %q, Date %q), client got %d s, want %d",
						meant, before["Retry-After"], before["Date"], secs, want)
				}
			}
			// Wherever the strict reader reads a wait above 0, the client gets it, rounded
			// up, a second more for a date (the end of the second it names), and clamped.
			if strictOK && strict > 0 {
				if v := header.TrimOWS(before["Retry-After"][0]); strings.Trim(v, "0123456789") != "" {
					strict = min(strict, math.MaxInt64-time.Second) + time.Second // saturating
				}
				if want := min(header.DelaySeconds(strict), int64(maxWait/time.Second)); secs != want &&
					meant.Leniency&header.LenientDateField == 0 {
					t.Fatalf("the strict reader reads %v from Retry-After %q, Date %q; client got %d s, want %d",
						strict, before["Retry-After"], before["Date"], secs, want)
				}
			}
		}
	})
}

// BenchmarkNormalizerUntouched measures a response the normalizer passes on: a 200 and a
// redirect without Retry-After. It must not allocate.
func BenchmarkNormalizerUntouched(b *testing.B) {
	n := &Normalizer{Now: func() time.Time { return t0 }}
	ok := &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/plain"}, "Date": {imfDate(t0)}}}
	redirect := &http.Response{StatusCode: 302, Header: http.Header{"Location": {"/elsewhere"}}}
	b.ReportAllocs()
	for b.Loop() {
		n.ModifyResponse(ok)
		n.ModifyResponse(redirect)
	}
}

// BenchmarkNormalizerRewrite measures a 503 whose HTTP-date, judged against a skewed Date, is
// rewritten into delay-seconds with the gateway's Date.
func BenchmarkNormalizerRewrite(b *testing.B) {
	n := &Normalizer{Now: func() time.Time { return t0 }}
	skewed := t0.Add(time.Hour)
	ra, date := []string{imfDate(skewed.Add(90 * time.Second))}, []string{imfDate(skewed)}
	resp := &http.Response{StatusCode: 503, Header: http.Header{"Retry-After": ra, "Date": date}}
	b.ReportAllocs()
	for b.Loop() {
		resp.Header["Retry-After"], resp.Header["Date"] = ra, date
		n.ModifyResponse(resp)
	}
	if got := resp.Header.Get("Retry-After"); got != "91" { // the end of the second the date names
		b.Fatalf("Retry-After = %q", got)
	}
}

// BenchmarkNormalizerFallback measures a 429 with Retry-After: 0 replaced by the fallback.
func BenchmarkNormalizerFallback(b *testing.B) {
	n := &Normalizer{Now: func() time.Time { return t0 }}
	ra := []string{"0"}
	resp := &http.Response{StatusCode: 429, Header: http.Header{"Retry-After": ra}}
	b.ReportAllocs()
	for b.Loop() {
		resp.Header["Retry-After"] = ra
		n.ModifyResponse(resp)
	}
}
