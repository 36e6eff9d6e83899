package retryafter

import (
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/time/rate"
)

const client = "192.0.2.1:1234"

// want503 checks that w is a 503 with a Date of now, a body only when method is not HEAD, and
// returns its Retry-After.
func want503(t *testing.T, w *httptest.ResponseRecorder, method string, now time.Time) string {
	t.Helper()
	if w.Code != http.StatusServiceUnavailable {
		t.Fatalf("status = %d, want 503", w.Code)
	}
	if got, want := w.Header().Get("Date"), now.UTC().Format(http.TimeFormat); got != want {
		t.Fatalf("Date = %q, want %q", got, want)
	}
	if got := len(w.Header().Values("Retry-After")); got != 1 {
		t.Fatalf("%d Retry-After fields, want 1", got)
	}
	body := w.Body.String()
	if method == http.MethodHead && body != "" {
		t.Fatalf("HEAD got a body: %q", body)
	}
	if method != http.MethodHead && body != "Service Unavailable\n" {
		t.Fatalf("body = %q", body)
	}
	return w.Header().Get("Retry-After")
}

func TestMaintenanceOff(t *testing.T) {
	clk := newClock(t0)
	m := &Maintenance{Now: clk.Now}
	h := m.Handler(ok)
	check := func(when string) {
		t.Helper()
		w := serve(h, "GET", client)
		if w.Code != http.StatusOK || w.Body.String() != "ok" || len(w.Header()) != 1 {
			t.Fatalf("%s: got %d %q with header %v, want next's own 200", when, w.Code, w.Body, w.Header())
		}
		if _, on := m.Until(); on {
			t.Fatalf("%s: Until reports on", when)
		}
	}
	check("new")
	m.Stop()
	check("stopped while off")
	m.Start(t0.Add(time.Hour))
	if until, on := m.Until(); !on || !until.Equal(t0.Add(time.Hour)) {
		t.Fatalf("Until = %v, %v after Start", until, on)
	}
	want503(t, serve(h, "GET", client), "GET", t0)
	m.Stop()
	check("stopped")
}

// TestMaintenanceFixedInstants checks the Retry-After of both forms at fixed instants: counting
// down, rounding up at sub-second edges, an unknown end, an overrun, a past end, a custom wait.
func TestMaintenanceFixedInstants(t *testing.T) {
	end := t0.Add(15 * time.Minute) // 12:15:00
	ms := time.Millisecond
	far := time.Date(2500, 1, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		name    string
		wait    time.Duration // the Maintenance's Wait
		until   time.Time
		now     time.Time
		seconds string // Retry-After by default
		date    string // Retry-After with HTTPDate
	}{
		{"countdown", 0, end, t0, "900", "Sun, 29 Nov 2026 12:15:00 GMT"},
		{"half second in", 0, end, t0.Add(500 * ms), "900", "Sun, 29 Nov 2026 12:15:00 GMT"},
		{"1 ns in", 0, end, t0.Add(1), "900", "Sun, 29 Nov 2026 12:15:00 GMT"},
		{"1 s in", 0, end, t0.Add(time.Second), "899", "Sun, 29 Nov 2026 12:15:00 GMT"},
		{"1 ms left", 0, end, end.Add(-ms), "1", "Sun, 29 Nov 2026 12:15:00 GMT"},
		{"1 ns left", 0, end, end.Add(-1), "1", "Sun, 29 Nov 2026 12:15:00 GMT"},
		{"end with a fraction", 0, end.Add(ms), t0.Add(999 * ms), "900", "Sun, 29 Nov 2026 12:15:01 GMT"},
		{"end in another zone", 0, end.In(time.FixedZone("EST", -5*3600)), t0, "900", "Sun, 29 Nov 2026 12:15:00 GMT"},
		{"unknown end", 0, time.Time{}, t0.Add(250 * ms), "60", "Sun, 29 Nov 2026 12:01:01 GMT"},
		// An overrun: how late the work is, at least a second, at most Wait.
		{"at the end", 0, end, end, "1", "Sun, 29 Nov 2026 12:15:01 GMT"},
		{"1 ns late", 0, end, end.Add(1), "1", "Sun, 29 Nov 2026 12:15:02 GMT"},
		{"1.5 s late", 0, end, end.Add(1500 * ms), "2", "Sun, 29 Nov 2026 12:15:03 GMT"},
		{"59 s late", 0, end, end.Add(59 * time.Second), "59", "Sun, 29 Nov 2026 12:16:58 GMT"},
		{"overrun", 0, end, end.Add(time.Hour + 500*ms), "60", "Sun, 29 Nov 2026 13:16:01 GMT"},
		{"started in the past", 0, t0.Add(-time.Hour), t0, "60", "Sun, 29 Nov 2026 12:01:00 GMT"},
		{"custom wait", 90*time.Second + ms, time.Time{}, t0, "91", "Sun, 29 Nov 2026 12:01:31 GMT"},
		{"custom wait, overrun", 5 * time.Second, end, end.Add(time.Minute), "5", "Sun, 29 Nov 2026 12:16:05 GMT"},
		{"custom wait, short overrun", 5 * time.Second, end, end.Add(3 * time.Second), "3", "Sun, 29 Nov 2026 12:15:06 GMT"},
		{"custom wait, countdown", 5 * time.Second, end, t0, "900", "Sun, 29 Nov 2026 12:15:00 GMT"},
		{"negative wait", -time.Second, time.Time{}, t0, "60", "Sun, 29 Nov 2026 12:01:00 GMT"},
		{"endless wait", rate.InfDuration, time.Time{}, t0, "9223372037", "Tue, 11 Mar 2319 11:47:17 GMT"},
		{"end past a Duration", 0, far, t0, "9223372037", "Fri, 01 Jan 2500 00:00:00 GMT"},
	}
	for _, tt := range tests {
		for _, date := range []bool{false, true} {
			clk := newClock(tt.now)
			m := &Maintenance{Now: clk.Now, Wait: tt.wait, HTTPDate: date}
			want := tt.seconds
			if date {
				want = tt.date
			}
			m.Start(tt.until)
			for _, method := range []string{"GET", "HEAD", "POST"} {
				w := serve(m.Handler(ok), method, client)
				if got := want503(t, w, method, tt.now); got != want {
					t.Errorf("%s (date %v) %s: Retry-After = %q, want %q", tt.name, date, method, got, want)
				}
			}
		}
	}
}

// TestMaintenanceRoundTrip parses every 503 with ParseRetryAfter under client clocks skewed by
// -1h, 0 and +1h, over random ends and instants with sub-second parts, in both forms.
//
// Counting down, the parsed wait is never shorter than the time truly left (until - now). In the
// seconds form it is less than one second longer. In the date form the date is until rounded up
// and Date is now truncated, each of which may add up to a second: the wait a client measures
// against Date is less than one second longer than until - Date, the time left from the instant
// Date names, and less than two seconds longer than the time truly left. (Both roundings are
// required: a date rounded down would let a client with a true clock arrive early, and a Date
// rounded up would be a clock reading the server never had.)
//
// With no end to count down to, the parsed wait is the configured one, and in an overrun how
// late the work is, at least one second and at most the configured wait, rounded up in the same
// way: never 0, never negative, never a date before Date.
func TestMaintenanceRoundTrip(t *testing.T) {
	skews := []time.Duration{-time.Hour, 0, time.Hour}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, date := range []bool{false, true} {
		for _, wait := range []time.Duration{time.Second, time.Minute, 2500 * time.Millisecond} {
			clk := newClock(t0)
			m := &Maintenance{Now: clk.Now, Wait: wait, HTTPDate: date}
			h := m.Handler(ok)
			var counted, open int
			for range 3000 {
				start := t0.Add(time.Duration(rng.Int64N(int64(48 * time.Hour))))
				var until time.Time
				switch rng.IntN(4) {
				case 0: // unknown end
				case 1: // a whole-second end
					until = start.Add(time.Duration(rng.IntN(7200)) * time.Second).Truncate(time.Second)
				default:
					until = start.Add(time.Duration(rng.Int64N(int64(2 * time.Hour))))
				}
				m.Start(until)
				span := 3 * time.Hour
				if !until.IsZero() {
					span = until.Sub(start) + 10*time.Minute // mostly counting down, some overruns
				}
				now := start.Add(time.Duration(rng.Int64N(int64(span))))
				if rng.IntN(8) == 0 && !until.IsZero() {
					now = until.Add(time.Duration(rng.IntN(3)-1) * time.Duration(rng.Int64N(int64(time.Second))))
				}
				clk.Set(now)
				w := serve(h, "GET", client)
				want503(t, w, "GET", now)
				ra := w.Header().Get("Retry-After")
				var parsed time.Duration
				for i, skew := range skews {
					got, ok := ParseRetryAfter(w.Header(), now.Add(skew))
					if !ok {
						t.Fatalf("Retry-After %q does not parse (client clock %v)", ra, skew)
					}
					if i > 0 && got != parsed {
						t.Fatalf("Retry-After %q parses to %v or %v as the client clock moves", ra, parsed, got)
					}
					parsed = got
				}
				fail := func(format string, args ...any) {
					t.Helper()
					t.Fatalf("date form %v, until %v, now %v, Retry-After %q, Date %q, parsed %v: "+format,
						append([]any{date, until, now, ra, w.Header().Get("Date"), parsed}, args...)...)
				}
				if parsed < time.Second {
					fail("a wait below one second")
				}
				if !until.IsZero() && until.After(now) {
					counted++
					left := until.Sub(now)
					if parsed < left {
						fail("shorter than the %v left", left)
					}
					over := time.Second
					if date {
						if fromDate := until.Sub(now.Truncate(time.Second)); parsed-fromDate >= time.Second {
							fail("%v over the %v left from Date", parsed-fromDate, fromDate)
						}
						at, _ := http.ParseTime(ra)
						if at.Before(until) || !at.Before(until.Add(time.Second)) {
							fail("the date is not the end rounded up")
						}
						over = 2 * time.Second
					}
					if parsed-left >= over {
						fail("%v over the %v left", parsed-left, left)
					}
					continue
				}
				open++
				over := time.Second
				if date {
					over = 2 * time.Second
				}
				want := wait
				if !until.IsZero() { // an overrun: how late the work is, from 1 s to Wait
					want = min(max(now.Sub(until), time.Second), wait)
				}
				if parsed < want || parsed-want >= over {
					fail("want the wait %v, rounded up", want)
				}
			}
			t.Logf("date form %v, wait %v: %d countdowns, %d open ends", date, wait, counted, open)
			if counted < 1500 || open < 700 {
				t.Fatalf("only %d countdowns and %d open ends checked", counted, open)
			}
		}
	}
}

// TestMaintenanceResponder checks that the Responder writes the 503's body and is told the wait
// that Retry-After states, in both forms.
func TestMaintenanceResponder(t *testing.T) {
	for _, date := range []bool{false, true} {
		clk := newClock(t0.Add(300 * time.Millisecond))
		var told time.Duration
		json := func(w http.ResponseWriter, r *http.Request, f Refusal) {
			status, retryAfter := f.Status, f.RetryAfter
			told = retryAfter
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			fmt.Fprintf(w, `{"status":%d,"retry_after":%d}`, status, retryAfter/time.Second)
		}
		m := &Maintenance{Now: clk.Now, Respond: json, HTTPDate: date}
		m.Start(t0.Add(10*time.Minute + 500*time.Millisecond))
		w := serve(m.Handler(ok), "GET", client)
		wait := wantRefusal(t, w, http.StatusServiceUnavailable, clk.Now())
		if told != wait || wait != 601*time.Second {
			t.Errorf("date form %v: Retry-After %q says %v, responder told %v, want 601s", date, w.Header().Get("Retry-After"), wait, told)
		}
		if got, want := w.Body.String(), `{"status":503,"retry_after":601}`; got != want {
			t.Errorf("date form %v: body = %s, want %s", date, got, want)
		}
	}
}

func TestMaintenanceHeadAndContentType(t *testing.T) {
	m := &Maintenance{Now: newClock(t0).Now}
	m.Start(time.Time{})
	for _, method := range []string{"GET", "HEAD"} {
		w := serve(m.Handler(ok), method, client)
		want503(t, w, method, t0)
		if got := w.Header().Get("Content-Type"); got != "text/plain; charset=utf-8" {
			t.Errorf("%s: Content-Type = %q", method, got)
		}
	}
}

func TestMaintenanceExempt(t *testing.T) {
	var calls atomic.Int64
	health := func(r *http.Request) bool { calls.Add(1); return r.URL.Path == "/healthz" }
	admin := func(r *http.Request) bool { return strings.HasPrefix(r.URL.Path, "/admin/") }
	m := &Maintenance{Now: newClock(t0).Now, Exempt: func(r *http.Request) bool { return health(r) || admin(r) }}
	h := m.Handler(ok)
	get := func(path string) int {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", path, nil))
		return w.Code
	}
	for _, p := range []string{"/", "/healthz", "/admin/x"} {
		if code := get(p); code != http.StatusOK {
			t.Fatalf("off: %s got %d", p, code)
		}
	}
	if n := calls.Load(); n != 0 {
		t.Fatalf("exempt ran %d times while off", n)
	}
	m.Start(t0.Add(time.Hour))
	for p, want := range map[string]int{"/": 503, "/healthz": 200, "/admin/x": 200, "/admin": 503, "/healthz/x": 503} {
		if code := get(p); code != want {
			t.Errorf("on: %s got %d, want %d", p, code, want)
		}
	}
}

// TestMaintenanceWithLimit composes maintenance and Limit in both orders.
func TestMaintenanceWithLimit(t *testing.T) {
	const burst = 3
	setup := func(maintenanceFirst bool) (*Maintenance, http.Handler) {
		clk := newClock(t0)
		m := &Maintenance{Now: clk.Now}
		limit := Limit(rate.Every(time.Minute), burst, WithClock(clk.Now))
		if maintenanceFirst {
			return m, m.Handler(limit(ok))
		}
		return m, limit(m.Handler(ok))
	}

	t.Run("maintenance before Limit costs no quota", func(t *testing.T) {
		m, h := setup(true)
		m.Start(t0.Add(time.Hour))
		for range 10 * burst {
			want503(t, serve(h, "GET", client), "GET", t0)
		}
		m.Stop()
		for i := range burst {
			if w := serve(h, "GET", client); w.Code != http.StatusOK {
				t.Fatalf("after maintenance, request %d of the burst got %d", i+1, w.Code)
			}
		}
		wantRefusal(t, serve(h, "GET", client), http.StatusTooManyRequests, t0)
	})

	t.Run("Limit before maintenance", func(t *testing.T) {
		m, h := setup(false)
		m.Start(t0.Add(time.Hour))
		for i := range burst {
			if got := want503(t, serve(h, "GET", client), "GET", t0); got != "3600" {
				t.Fatalf("admitted request %d: Retry-After %q, want 3600", i+1, got)
			}
		}
		if w := serve(h, "GET", client); wantRefusal(t, w, http.StatusTooManyRequests, t0) != time.Minute {
			t.Fatalf("over the limit: Retry-After %q, want the limiter's 60", w.Header().Get("Retry-After"))
		}
		m.Stop()
		wantRefusal(t, serve(h, "GET", client), http.StatusTooManyRequests, t0)
	})
}

// TestMaintenanceConcurrent flips maintenance on and off from other goroutines while requests
// are served (run it with -race): each response is next's 200 or a complete 503.
func TestMaintenanceConcurrent(t *testing.T) {
	clk := newClock(t0)
	for _, date := range []bool{false, true} {
		m := &Maintenance{Now: clk.Now, HTTPDate: date, Exempt: func(r *http.Request) bool { return r.Method == "OPTIONS" }}
		h := m.Handler(ok)
		var wg sync.WaitGroup
		stop := make(chan struct{})
		for i := range 2 {
			wg.Go(func() {
				for n := 0; ; n++ {
					select {
					case <-stop:
						return
					default:
					}
					switch (n + i) % 4 {
					case 0:
						m.Start(clk.Now().Add(time.Duration(n) * time.Millisecond))
					case 1:
						m.Start(time.Time{})
					case 2:
						clk.Advance(time.Millisecond)
						m.Until()
					default:
						m.Stop()
					}
				}
			})
		}
		var served, refused atomic.Int64
		var workers sync.WaitGroup
		for range 8 {
			workers.Go(func() {
				for range 300 {
					w := serve(h, "GET", client)
					served.Add(1)
					switch w.Code {
					case http.StatusOK:
						if w.Body.String() != "ok" || w.Header().Get("Retry-After") != "" {
							t.Errorf("a 200 that is not next's: %v %q", w.Header(), w.Body)
						}
					case http.StatusServiceUnavailable:
						refused.Add(1)
						if wait, ok := ParseRetryAfter(w.Header(), t0); !ok || wait < time.Second || w.Header().Get("Date") == "" {
							t.Errorf("a 503 with Retry-After %q, Date %q", w.Header().Get("Retry-After"), w.Header().Get("Date"))
						}
					default:
						t.Errorf("status %d", w.Code)
					}
					if w := serve(h, "OPTIONS", client); w.Code != http.StatusOK {
						t.Errorf("exempt request got %d", w.Code)
					}
				}
			})
		}
		workers.Wait()
		close(stop)
		wg.Wait()
		t.Logf("date form %v: %d requests, %d refused", date, served.Load(), refused.Load())
	}
}

// TestMaintenanceOnTheWire serves a 503 through a real server on loopback: Date and Retry-After
// are the middleware's (the server adds its own Date only when the handler set none), the
// HEAD response has no body, and a Go client reads the wait with ParseRetryAfter.
func TestMaintenanceOnTheWire(t *testing.T) {
	clk := newClock(t0.Add(250 * time.Millisecond))
	m := &Maintenance{Now: clk.Now}
	m.Start(t0.Add(90 * time.Second))
	srv := httptest.NewServer(m.Handler(ok))
	defer srv.Close()
	c := srv.Client()
	c.Timeout = 10 * time.Second
	for _, method := range []string{"GET", "HEAD"} {
		req, _ := http.NewRequest(method, srv.URL, nil)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Date") != t0.Format(http.TimeFormat) {
			t.Fatalf("%s: %d with Date %q, want 503 with %q", method, resp.StatusCode, resp.Header.Get("Date"), t0.Format(http.TimeFormat))
		}
		if wait, ok := ParseRetryAfter(resp.Header, time.Now()); !ok || wait != 90*time.Second {
			t.Fatalf("%s: Retry-After %q", method, resp.Header.Get("Retry-After"))
		}
		if (method == "HEAD") != (len(body) == 0) {
			t.Fatalf("%s: body %q", method, body)
		}
	}
	m.Stop()
	resp, err := c.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Retry-After") != "" {
		t.Fatalf("after Stop: %d, Retry-After %q", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
}

func TestMaintenancePanics(t *testing.T) {
	wantPanics(t, map[string]func(){
		"nil next": func() { new(Maintenance).Handler(nil) },
	})
}

var nop = http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})

func TestMaintenanceAllocs(t *testing.T) {
	clk := newClock(t0)
	r := httptest.NewRequest("GET", "/", nil)
	for _, tt := range []struct {
		name  string
		date  bool
		until time.Time
		on    bool
	}{
		{"off", false, time.Time{}, false},
		{"on, seconds", false, t0.Add(15 * time.Minute), true},
		{"on, date", true, t0.Add(15 * time.Minute), true},
		{"on, unknown end, date", true, time.Time{}, true},
	} {
		m := &Maintenance{Now: clk.Now, HTTPDate: tt.date}
		if tt.on {
			m.Start(tt.until)
		}
		h := m.Handler(nop)
		w := newTestWriter()
		// Off costs nothing; a 503 costs the one allocation that holds its header values,
		// which are the response's own, and one more for the text of a Retry-After of 100
		// seconds or more (900 here).
		want := map[bool]float64{false: 0, true: 1}[tt.on]
		if tt.on && !tt.date {
			want = 2
		}
		if n := testing.AllocsPerRun(100, func() { h.ServeHTTP(w, r) }); n > want {
			t.Errorf("%s: %v allocations per request, want at most %v", tt.name, n, want)
		}
		if want := map[bool]int{false: 0, true: 503}[tt.on]; w.code != want {
			t.Errorf("%s: status %d, want %d", tt.name, w.code, want)
		}
	}
}

func BenchmarkMaintenanceOff(b *testing.B) {
	var m Maintenance
	h := m.Handler(nop)
	r := httptest.NewRequest("GET", "/", nil)
	w := newTestWriter()
	b.ReportAllocs()
	for b.Loop() {
		h.ServeHTTP(w, r)
	}
}

func BenchmarkMaintenanceOn(b *testing.B) {
	for _, form := range []struct {
		name string
		date bool
	}{{"seconds", false}, {"date", true}} {
		b.Run(form.name, func(b *testing.B) {
			m := &Maintenance{HTTPDate: form.date}
			m.Start(time.Now().Add(15 * time.Minute))
			h := m.Handler(nop)
			r := httptest.NewRequest("GET", "/", nil)
			w := newTestWriter()
			b.ReportAllocs()
			for b.Loop() {
				h.ServeHTTP(w, r)
			}
		})
	}
}

// TestMaintenanceDateBeyond9999 checks that the date form stays a valid IMF-fixdate whatever the
// announced end: an end in the last second of year 9999, rounded up, would be in year 10000.
func TestMaintenanceDateBeyond9999(t *testing.T) {
	last := time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC)
	for _, until := range []time.Time{last.Add(500 * time.Millisecond), last.Add(time.Hour), last.AddDate(500, 0, 0)} {
		for _, now := range []time.Time{t0, last.Add(-time.Second)} {
			m := &Maintenance{Now: func() time.Time { return now }, HTTPDate: true}
			m.Start(until)
			w := serve(m.Handler(ok), "GET", client)
			if got, want := w.Header().Get("Retry-After"), "Fri, 31 Dec 9999 23:59:59 GMT"; got != want {
				t.Errorf("until %v: Retry-After %q, want %q, the last HTTP-date", until, got, want)
			}
			if _, ok := ParseRetryAfter(w.Header(), now); !ok {
				t.Errorf("until %v: Retry-After %q does not parse", until, w.Header().Get("Retry-After"))
			}
		}
	}
}

// TestMaintenanceReturnRateFarEnd checks that an end further than a time.Duration holds (about
// 292 years) gets a Retry-After with a ReturnRate too, the longest wait one holds, as without
// it: the second the schedule books, in whole seconds, must not overflow into no wait at all.
func TestMaintenanceReturnRateFarEnd(t *testing.T) {
	for _, until := range []time.Time{time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC), t0.AddDate(300, 0, 0), t0.AddDate(1000, 0, 0)} {
		for _, returns := range []rate.Limit{0, 10} {
			m := &Maintenance{ReturnRate: returns, Now: func() time.Time { return t0 }}
			m.Start(until)
			w := serve(m.Handler(ok), "GET", client)
			wait, ok := ParseRetryAfter(w.Header(), t0)
			if got := w.Header().Get("Retry-After"); w.Code != http.StatusServiceUnavailable || !ok || got != "9223372037" {
				t.Errorf("until %v, ReturnRate %v: %d, Retry-After %q (%v), want 9223372037, the longest wait a Duration holds", until.Format(time.DateOnly), returns, w.Code, got, wait)
			}
		}
	}
}
