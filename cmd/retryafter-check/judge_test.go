package main

import (
	"context"
	"math"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Verdicts that must not depend on the probe's own timing, nor on a limiter's status code:
// the probe oversleeps as a loaded machine does, a rate limiter refuses with 503, a request of
// the later round is answered 5xx, and a Retry-After overflows a time.Duration.

// An alignedWindow allows limit requests a window, the windows aligned to the clock (multiples
// of window since the zero time), as go-chi/httprate aligns them; a refusal's Retry-After is
// says(left, window).
type alignedWindow struct {
	limit  int
	window time.Duration
	says   func(left, window time.Duration) string

	mu    sync.Mutex
	cur   time.Time
	count int
}

func (f *alignedWindow) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	now := time.Now()
	f.mu.Lock()
	win := now.Truncate(f.window)
	if !win.Equal(f.cur) {
		f.cur, f.count = win, 0
	}
	ok := f.count < f.limit
	if ok {
		f.count++
	}
	f.mu.Unlock()
	if ok {
		hello().ServeHTTP(w, r)
		return
	}
	w.Header().Set("Retry-After", f.says(win.Add(f.window).Sub(now), f.window))
	http.Error(w, http.StatusText(http.StatusTooManyRequests), http.StatusTooManyRequests)
}

// oversleeping is a Sleep that wakes up to most later than asked, each time by a draw of r, as
// timers do on a loaded machine; with r nil, always most later.
func oversleeping(r *rand.Rand, most time.Duration) func(context.Context, time.Duration) error {
	var mu sync.Mutex
	return func(ctx context.Context, d time.Duration) error {
		mu.Lock()
		late := most
		if r != nil {
			late = time.Duration(r.Int64N(int64(most) + 1))
		}
		mu.Unlock()
		return sleepContext(ctx, d+late)
	}
}

// judged runs the probe of c and logs its table.
func judged(t *testing.T, c probeCase) *Report {
	t.Helper()
	c.noOrig = true
	rep, _, _ := runCase(t, c)
	var b strings.Builder
	writeTable(&b, rep)
	t.Logf("\n%s", b.String())
	return rep
}

// wantResult fails t unless rep's check name has the result want and its Seen holds phrase.
func wantResult(t *testing.T, rep *Report, name string, want Result, phrase string) {
	t.Helper()
	c := rep.check(name)
	if c == nil || c.Result != want || !strings.Contains(c.Seen, phrase) {
		t.Errorf("%s = %v, want %s holding %q", name, c, want, phrase)
	}
}

// TestTightOversleep runs the probe, its every sleep up to 100 ms late (in every third run,
// each exactly as late), against a fixed window aligned to the clock at random phases: an
// honest one, telling the time left rounded up, is never failed, and one always telling the
// whole window always is, by the first round or the later.
func TestTightOversleep(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 1))
	const window, runs = 10 * time.Second, 40
	for i := range runs {
		phase := time.Duration(r.Int64N(int64(window)))
		most := time.Duration(r.Int64N(int64(100*time.Millisecond) + 1))
		if i == 0 {
			most = 100 * time.Millisecond
		}
		for _, padded := range []bool{false, true} {
			var draws *rand.Rand
			if i%3 != 0 {
				draws = rand.New(rand.NewPCG(seed, uint64(i)))
			}
			says := secondsUp
			if padded {
				says = wholeWindow
			}
			rep, _, _ := runCase(t, probeCase{
				server: func() http.Handler { return &alignedWindow{limit: 3, window: window, says: says} },
				delay:  phase, noOrig: true,
				probe: Probe{Sleep: oversleeping(draws, most)},
			})
			tight := rep.check(checkTight)
			switch {
			case !padded && (rep.Exit != exitPass || tight.Result == Fail):
				t.Errorf("honest, phase %s, sleeps up to %s late: %s, exit %d; tight: %s", phase, most, verdicts(rep), rep.Exit, tight.Seen)
			case padded && (rep.Exit != exitFail || tight.Result != Fail):
				t.Errorf("whole window, phase %s, sleeps up to %s late: %s, exit %d; tight: %s", phase, most, verdicts(rep), rep.Exit, tight.Seen)
			}
		}
	}
}

// TestTightLateAdmission: an honest limiter that rounds its wait up may admit an early retry
// that went late: that is no padding. The retry 30 ms late, 250 ms into an aligned window.
func TestTightLateAdmission(t *testing.T) {
	late := func(ctx context.Context, d time.Duration) error { return sleepContext(ctx, d+30*time.Millisecond) }
	rep := judged(t, probeCase{
		server: func() http.Handler { return &alignedWindow{limit: 3, window: 10 * time.Second, says: secondsUp} },
		delay:  250 * time.Millisecond, probe: Probe{Sleep: late},
	})
	if tight := rep.check(checkTight); tight.Result == Fail || rep.Exit != exitPass {
		t.Errorf("an honest window: tight %s, exit %d: %s", tight.Result, rep.Exit, tight.Seen)
	}
}

// as503 turns every 429 of next into a 503.
func as503(next http.Handler) http.Handler {
	return editor{next: next, edit: func(_ *http.Request, status int, _ http.Header) int {
		if status == http.StatusTooManyRequests {
			return http.StatusServiceUnavailable
		}
		return status
	}}
}

// wholeWindow10s allows 3 requests a fixed window of 10 s and always tells the whole window.
func wholeWindow10s() http.Handler {
	return &fixedWindow{limit: 3, window: 10 * time.Second, says: wholeWindow}
}

// TestLaterRound503 holds a quota refused with 503 to the later round, as one refused with 429.
func TestLaterRound503(t *testing.T) {
	rep := judged(t, probeCase{server: func() http.Handler { return as503(wholeWindow10s()) }})
	wantResult(t, rep, checkTight, Fail, "later round")
	if rep.Exit != exitFail {
		t.Errorf("exit %d, want %d", rep.Exit, exitFail)
	}
	honest := judged(t, probeCase{server: func() http.Handler {
		return as503(&fixedWindow{limit: 3, window: 10 * time.Second, says: secondsUp})
	}})
	wantResult(t, honest, checkTight, Pass, "later round")
}

// nthAnswer answers the requests numbered in codes (from 1) with that status, else next.
func nthAnswer(codes map[int]int, next http.Handler) http.Handler {
	var mu sync.Mutex
	n := 0
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		n++
		c, ok := codes[n]
		mu.Unlock()
		if ok {
			http.Error(w, http.StatusText(c), c)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// TestLaterRoundUnjudged: when the later round cannot judge, tight does not keep the first
// round's pass, which says nothing of a wait padded to the whole window.
func TestLaterRoundUnjudged(t *testing.T) {
	var mu sync.Mutex
	long := 0
	// The third sleep of over 8 s, before the later round's early retry, wakes 600 ms late.
	lateOnce := func(ctx context.Context, d time.Duration) error {
		mu.Lock()
		if d > 8*time.Second {
			if long++; long == 3 {
				d += 600 * time.Millisecond
			}
		}
		mu.Unlock()
		return sleepContext(ctx, d)
	}
	for _, c := range []struct {
		name   string
		server func() http.Handler
		probe  Probe
		phrase string
	}{
		{"the later round's early retry answered 502", func() http.Handler { return nthAnswer(map[int]int{14: 502}, wholeWindow10s()) }, Probe{}, "502 Bad Gateway"},
		{"the later round's early retry late", wholeWindow10s, Probe{Sleep: lateOnce}, "late"},
		{"the retry before the later round answered 500", func() http.Handler { return nthAnswer(map[int]int{10: 500}, wholeWindow10s()) }, Probe{}, "not admitted"},
	} {
		t.Run(c.name, func(t *testing.T) {
			rep := judged(t, probeCase{server: c.server, probe: c.probe})
			wantResult(t, rep, checkTight, NA, c.phrase)
			if rep.Exit == exitPass && rep.GaveUp != "" || rep.Exit == exitFail {
				t.Errorf("exit %d, gave up %q", rep.Exit, rep.GaveUp)
			}
		})
	}
}

// TestObeyOwnLateness: a retry that the probe itself sent late shows nothing of obeying, and is
// no fault of the server's; only the server's own refusal holding it back is.
func TestObeyOwnLateness(t *testing.T) {
	var mu sync.Mutex
	long := 0
	// The first sleep of over a second, before the obeying retry, wakes 600 ms late.
	lateFirst := func(ctx context.Context, d time.Duration) error {
		mu.Lock()
		if d > time.Second {
			if long++; long == 1 {
				d += 600 * time.Millisecond
			}
		}
		mu.Unlock()
		return sleepContext(ctx, d)
	}
	rep := judged(t, probeCase{server: limitEvery3s, probe: Probe{Sleep: lateFirst}})
	wantResult(t, rep, checkObey, NA, "0.6 s late")

	// A maintenance window of 5 s whose HEAD, sent first, is decided at once and answered 6 s
	// later.
	rep = judged(t, probeCase{server: func() http.Handler {
		return editor{next: maintenance(false, 5*time.Second, 0, false), edit: func(r *http.Request, status int, _ http.Header) int {
			if r.Method == http.MethodHead {
				time.Sleep(6 * time.Second)
			}
			return status
		}}
	}})
	wantResult(t, rep, checkObey, NA, "late")
	if rep.Exit == exitFail {
		t.Errorf("exit %d: %s", rep.Exit, verdicts(rep))
	}
}

// TestHugeFraction: a Retry-After of fractional seconds at the very edge of a time.Duration is
// a wait beyond any budget, never a negative one that retries at once.
func TestHugeFraction(t *testing.T) {
	for _, v := range []string{"9223372036.854775807", "9223372036.8547758", "+9223372036.854775807", "9223372036.854775808", "99999999999999999999.5"} {
		d, ok := generousSeconds(v)
		if ok && d < 9223372036*time.Second {
			t.Errorf("generousSeconds(%q) = %s, want at least 9223372036 s", v, d)
		}
		rep := judged(t, probeCase{server: func() http.Handler {
			return editor{next: limit3(), edit: func(_ *http.Request, status int, h http.Header) int {
				if status == http.StatusTooManyRequests {
					h.Set("Retry-After", v)
				}
				return status
			}}
		}, probe: Probe{Timeout: 20 * time.Second}})
		if c := rep.check(checkObey); c == nil || c.Result == Fail || !strings.Contains(rep.GaveUp, "would pass the time budget") {
			t.Errorf("Retry-After %s: obey %v, gave up %q, want not checked, the wait beyond the time budget", v, c, rep.GaveUp)
		}
	}
}

// TestHugeResetSeconds: a RateLimit t, or a reset in seconds, that overflows a time.Duration
// waits longer than Retry-After, never less.
func TestHugeResetSeconds(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, v := range []string{"9223372037", "18446744074", "999999999999999"} {
		e := &exchange{status: http.StatusTooManyRequests, sent: now, received: now, read: now, header: http.Header{
			"Retry-After":      {"5"},
			"Ratelimit":        {`"default";r=0;t=` + v},
			"Ratelimit-Policy": {`"default";q=5;w=5`},
		}}
		if c := checkRateLimitFields(e, readTold(e)); c.Result != Fail || !strings.Contains(c.Seen, "waits longer than it must") {
			t.Errorf("t=%s: %s %s", v, c.Result, c.Seen)
		}
	}
	if want, wrong := disagreement(time.Duration(maxSeconds)*time.Second, told{wait: math.MaxInt64, usable: true}, false); want <= 0 || wrong != "" {
		t.Errorf("disagreement at the largest wait: %s %q", want, wrong)
	}
}

// TestGenerousSecondsSaturates reads random numbers of seconds, whole and fractional, of up to
// 25 digits each side: each is a wait, never a negative one, and the largest Duration from
// where a float64 of them reaches it.
func TestGenerousSecondsSaturates(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	r := rand.New(rand.NewPCG(seed, 2))
	digits := func() string {
		b := make([]byte, 1+r.IntN(25))
		for i := range b {
			b[i] = byte('0' + r.IntN(10))
		}
		return string(b)
	}
	for range 10000 {
		v := digits()
		if r.IntN(2) == 0 {
			v += "." + digits()
		}
		d, ok := generousSeconds(v)
		f, _ := strconv.ParseFloat(v, 64)
		if !ok || d < 0 || f*float64(time.Second) >= float64(math.MaxInt64) && d != math.MaxInt64 {
			t.Fatalf("seed %d: generousSeconds(%q) = %d, %v", seed, v, d, ok)
		}
	}
}

// TestTarpitHEAD: a refusal held 3 s before its header is sent lets the window of 2 s end
// before HEAD goes: HEAD admitted then says nothing of how HEAD is limited.
func TestTarpitHEAD(t *testing.T) {
	rep := judged(t, probeCase{server: func() http.Handler {
		f := &fixedWindow{limit: 3, window: 2 * time.Second, says: secondsUp}
		return editor{next: f, edit: func(_ *http.Request, status int, _ http.Header) int {
			if status == http.StatusTooManyRequests {
				time.Sleep(3 * time.Second)
			}
			return status
		}}
	}})
	wantResult(t, rep, checkHEAD, NA, "too late to compare")
}

// TestManyRetryAfterLines: 2001 lines of Retry-After crowd no other field out of what the
// probe keeps: Date, sent on every refusal, is judged as sent.
func TestManyRetryAfterLines(t *testing.T) {
	rep := judged(t, probeCase{server: func() http.Handler {
		return editor{next: limit3(), edit: func(_ *http.Request, status int, h http.Header) int {
			if status == http.StatusTooManyRequests {
				v := make([]string, 2001)
				for i := range v {
					v[i] = "1"
				}
				v[2000] = "100"
				h["Retry-After"] = v
			}
			return status
		}}
	}})
	wantResult(t, rep, checkDate, Pass, "")
}
