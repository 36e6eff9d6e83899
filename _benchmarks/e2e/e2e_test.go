package main

import (
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestMain lets the test binary be the server process of a pair, as the command is.
func TestMain(m *testing.M) {
	if serverMain() {
		return
	}
	os.Exit(m.Run())
}

// TestSubjects checks that every subject's server answers each kind of traffic as the table
// says: allowed traffic is admitted, refused traffic gets 429 after the first request (from the
// first with no limiter behind it), and the bare server admits everything.
func TestSubjects(t *testing.T) {
	for _, s := range subjects {
		for _, tr := range []traffic{allowed, refused} {
			if s.only != "" && s.only != tr {
				continue
			}
			t.Run(s.name+"/"+string(tr), func(t *testing.T) {
				h, closeFn, err := newHandler(s, tr)
				if err != nil {
					t.Fatal(err)
				}
				defer closeFn()
				srv := httptest.NewServer(h)
				defer srv.Close()
				var got []int
				for range 3 {
					resp, err := srv.Client().Get(srv.URL + "/")
					if err != nil {
						t.Fatal(err)
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					got = append(got, resp.StatusCode)
				}
				want := []int{200, 200, 200}
				switch {
				case s.name == "refusal":
					want = []int{429, 429, 429}
				case wantStatus(s.name, tr) == http.StatusTooManyRequests:
					want = []int{200, 429, 429}
				}
				if !slices.Equal(got, want) {
					t.Errorf("statuses %v, want %v", got, want)
				}
			})
		}
	}
}

// TestRunPair runs one short pair through server processes (this test binary, see TestMain)
// and checks that both servers were measured.
func TestRunPair(t *testing.T) {
	if runtime.GOOS == "windows" || runtime.GOOS == "plan9" {
		t.Skip("the servers report their CPU time with getrusage")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// Under the race detector, a process sleeps a second at exit unless told otherwise.
	t.Setenv("GORACE", strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	cfg := config{exe: exe, conns: 2, warmup: 10 * time.Millisecond, slices: 2,
		settle: 5 * time.Millisecond, duration: 40 * time.Millisecond}
	p, err := runPair(cfg, "retryafter", refused)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []measurement{p.bare, p.sub} {
		if m.n == 0 || m.wall < cfg.duration || m.cpu < 0 || m.p50 <= 0 || m.p99 < m.p50 {
			t.Errorf("measurement %+v: want requests, the whole duration, CPU time and 0 < p50 <= p99", m)
		}
	}
}

// TestWantStatus: only a limiter meeting refused traffic owes 429s.
func TestWantStatus(t *testing.T) {
	for _, c := range []struct {
		name string
		t    traffic
		want int
	}{
		{"bare", allowed, 200}, {"bare", refused, 200},
		{"retryafter", allowed, 200}, {"retryafter", refused, 429},
		{"go-limiter", refused, 429},
	} {
		if got := wantStatus(c.name, c.t); got != c.want {
			t.Errorf("wantStatus(%q, %s) = %d, want %d", c.name, c.t, got, c.want)
		}
	}
}

func TestPercentile(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		out := make([]time.Duration, len(v))
		for i, x := range v {
			out[i] = time.Duration(x) * time.Millisecond
		}
		return out
	}
	hundred := make([]int, 100)
	for i := range hundred {
		hundred[i] = i + 1
	}
	for _, c := range []struct {
		sorted []time.Duration
		p      float64
		want   time.Duration
	}{
		{nil, 0.5, 0},
		{ms(7), 0.99, 7 * time.Millisecond},
		{ms(1, 2), 0.5, 1 * time.Millisecond},
		{ms(1, 2, 3), 0.5, 2 * time.Millisecond},
		{ms(hundred...), 0.50, 50 * time.Millisecond},
		{ms(hundred...), 0.99, 99 * time.Millisecond},
		{ms(hundred...), 1, 100 * time.Millisecond},
	} {
		if got := percentile(c.sorted, c.p); got != c.want {
			t.Errorf("percentile(%v, %v) = %v, want %v", c.sorted, c.p, got, c.want)
		}
	}
}

func TestMedianSpread(t *testing.T) {
	if got := median(nil); !math.IsNaN(got) {
		t.Errorf("median(nil) = %v, want NaN", got)
	}
	if got := median([]float64{3, 1, 2}); got != 2 {
		t.Errorf("median(3, 1, 2) = %v, want 2", got)
	}
	if got := median([]float64{4, 1, 3, 2}); got != 2.5 {
		t.Errorf("median(4, 1, 3, 2) = %v, want 2.5", got)
	}
	if got, want := spread([]float64{1.1, 0.9, 1.0}), "1.00× (0.90–1.10)"; got != want {
		t.Errorf("spread = %q, want %q", got, want)
	}
	if got, want := spread([]float64{1.25}), "1.25×"; got != want {
		t.Errorf("spread of one = %q, want %q", got, want)
	}
	if got, want := times(math.Inf(1)), "–"; got != want {
		t.Errorf("times(+Inf) = %q, want %q", got, want)
	}
}

// TestCells: the A/A control comes first under each kind of traffic, and a subject that makes
// sense under one kind only is left out of the other.
func TestCells(t *testing.T) {
	cfg := config{subjects: []string{"retryafter", "refusal"}, traffics: []traffic{allowed, refused}, rounds: 2}
	want := []cell{{allowed, "bare"}, {allowed, "retryafter"}, {refused, "bare"}, {refused, "retryafter"}, {refused, "refusal"}}
	if got := cfg.cells(); !slices.Equal(got, want) {
		t.Errorf("cells = %v, want %v", got, want)
	}
	if got := cfg.pairs(); got != 10 {
		t.Errorf("pairs = %d, want 10", got)
	}
}

func TestParseFlags(t *testing.T) {
	got, err := parseSubjects("retryafter, bare,httprate,retryafter,")
	if err != nil || !slices.Equal(got, []string{"retryafter", "httprate"}) {
		t.Errorf("parseSubjects = %q, %v; want [retryafter httprate] (the A/A control always runs)", got, err)
	}
	if _, err := parseSubjects("retryafter,tollbooth"); err == nil || !strings.Contains(err.Error(), "tollbooth") {
		t.Errorf("parseSubjects of an unknown subject: %v, want an error naming it", err)
	}
	tr, err := parseTraffic("refused,allowed,refused")
	if err != nil || !slices.Equal(tr, []traffic{refused, allowed}) {
		t.Errorf("parseTraffic = %q, %v; want [refused allowed]", tr, err)
	}
	for _, bad := range []string{"", ",", "blocked"} {
		if _, err := parseTraffic(bad); err == nil {
			t.Errorf("parseTraffic(%q): no error", bad)
		}
	}
}

func TestThousands(t *testing.T) {
	for x, want := range map[float64]string{0: "0", 999: "999", 1000: "1,000", 25420.4: "25,420", 1234567: "1,234,567"} {
		if got := thousands(x); got != want {
			t.Errorf("thousands(%v) = %q, want %q", x, got, want)
		}
	}
}
