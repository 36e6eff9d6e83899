package main

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/retryafter/retryafter/internal/testkit"
)

// A slowTransport delays every request and every response by each, as a network does.
type slowTransport struct {
	rt   http.RoundTripper
	each time.Duration
}

func (s slowTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	time.Sleep(s.each)
	resp, err := s.rt.RoundTrip(r)
	time.Sleep(s.each)
	return resp, err
}

// retryTimeline runs the probe against server over a network 50 ms each way and returns when
// the first n requests reached the server, from the start.
func retryTimeline(t *testing.T, server func() http.Handler, n int) []time.Duration {
	var got []time.Duration
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{next: server()}
		net := serve(t, rec)
		defer net.close()
		start := time.Now()
		Probe{URL: testURL, Transport: slowTransport{net.tr, 50 * time.Millisecond}}.Run(t.Context())
		for _, s := range rec.seen[:min(n, len(rec.seen))] {
			got = append(got, s.at.Sub(start))
		}
	})
	return got
}

// TestRetryTiming checks when the retries reach the server. The obeying retry waits from when
// the refusal arrived, so it reaches the server the round trip later than told; the early
// retry counts from when the refused request was sent, so it reaches the server exactly a
// second and tightMargin before told after the refusal did, the round trip cancelling: both
// give the server the benefit of the round trip.
func TestRetryTiming(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		d := make([]time.Duration, len(v))
		for i, x := range v {
			d[i] = time.Duration(x) * time.Millisecond
		}
		return d
	}
	for _, c := range []struct {
		name   string
		server func() http.Handler
		want   []time.Duration
	}{
		// Retry-After 2 each time: 5 admitted 100 ms apart, then the refusal r1 at 550;
		// obeying at 550 + 2000 + 100; the next refusal r2 at once; the early retry at
		// r2 + 900; obeying after it at r2 + 2000 + 100, refused; obeying that alone, again
		// 2100 later.
		{"charges refused requests", func() http.Handler { return withCORS("", &tokenBucket{charge: true}) },
			ms(50, 150, 250, 350, 450, 550, 2650, 2750, 3650, 4850, 6950)},
		// A 503 until 10.5 s, announced as the date 00:00:11 with Date 00:00:00: the
		// refusal, the HEAD, the early retry 2.1 s before the date (Date has whole seconds),
		// obeying at the date by the probe's clock, which Date agrees with, as a client does.
		{"maintenance, HTTP-date", func() http.Handler { return maintenance(true, 10500*time.Millisecond, 0, false) },
			ms(50, 150, 8950, 11050)},
		// The same with delay-seconds ("11"): the early retry 1.1 s before it.
		{"maintenance, delay-seconds", func() http.Handler { return maintenance(false, 10500*time.Millisecond, 0, false) },
			ms(50, 150, 9950, 11150)},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := retryTimeline(t, c.server, len(c.want))
			if len(got) != len(c.want) {
				t.Fatalf("requests reached the server at %v, want %v", got, c.want)
			}
			for i := range got {
				if got[i] != c.want[i] {
					t.Fatalf("requests reached the server at %v, want %v", got, c.want)
				}
			}
		})
	}
}

// A scriptClock is a clock that moves only when the probe sleeps.
type scriptClock struct{ now time.Time }

func (c *scriptClock) Now() time.Time { return c.now }

func (c *scriptClock) Sleep(_ context.Context, d time.Duration) error {
	c.now = c.now.Add(d)
	return nil
}

// scripted answers the probe's requests in turn with the statuses of script (429 with
// Retry-After: retryAfter, 200 without), then 429 to everything, with a Date from clk.
func scripted(clk *scriptClock, retryAfter string, script ...int) http.RoundTripper {
	i := 0
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		status := http.StatusTooManyRequests
		if i < len(script) {
			status = script[i]
		}
		i++
		h := http.Header{"Date": {clk.now.UTC().Format(http.TimeFormat)}}
		if status == http.StatusTooManyRequests {
			h.Set("Retry-After", retryAfter)
		}
		return &http.Response{StatusCode: status, Header: h, Body: http.NoBody, Request: r}, nil
	})
}

// TestRetryVerdicts runs the retry checks against scripted answers, on a clock that moves only
// when the probe sleeps, for the branches no realistic server above reaches: which check the
// blame falls on when retries are refused.
func TestRetryVerdicts(t *testing.T) {
	const ok, no = http.StatusOK, http.StatusTooManyRequests
	for _, c := range []struct {
		name     string
		wait     string // the Retry-After of every refusal; "" is 2
		script   []int  // r1, then the retries in turn
		want     string
		seen     map[string]string
		requests int // the last two are the refused GET and the HEAD of the head check
	}{
		{"all admitted as told", "", []int{no, ok, no, no, ok},
			"obey=pass tight=pass refusal-free=pass", nil, 7},
		// A wait of 1 s: the early retry goes at once, and tells nothing of padding, whatever
		// its answer; refusal-free is still judged on it.
		{"a 1 s wait, all admitted as told", "1", []int{no, ok, no, no, ok},
			"obey=pass tight=n/a refusal-free=pass", map[string]string{checkTight: "cannot judge"}, 7},
		{"a 1 s wait, early retry admitted", "1", []int{no, ok, no, ok},
			"obey=pass tight=n/a refusal-free=n/a", map[string]string{checkTight: "cannot judge"}, 6},
		// Obeying was refused on its own already: the probe does not obey again to find out.
		{"obeying refused, then obeying after an early retry refused too", "", []int{no, no, no, no},
			"obey=fail tight=pass refusal-free=n/a",
			map[string]string{
				checkObey: "waited 2 s as told, then retried: refused",
				checkFree: "obeying alone is refused too, so what the early retry cost cannot be told apart",
			}, 6},
		{"obeying admitted once, then refused alone", "", []int{no, ok, no, no, no, no},
			"obey=fail tight=pass refusal-free=n/a",
			map[string]string{checkObey: "on request 6: waited 2 s as told, then retried: refused"}, 8},
		{"obeying admitted alone, refused after an early retry", "", []int{no, ok, no, no, no, ok},
			"obey=pass tight=pass refusal-free=fail",
			map[string]string{checkFree: "the refused early retry was charged"}, 8},
		{"early retry admitted", "", []int{no, ok, no, ok},
			"obey=pass tight=fail refusal-free=n/a",
			map[string]string{checkFree: "the early retry was admitted"}, 6},
	} {
		t.Run(c.name, func(t *testing.T) {
			clk := &scriptClock{now: testkit.T0}
			wait := c.wait
			if wait == "" {
				wait = "2"
			}
			rep := Probe{URL: testURL, Transport: scripted(clk, wait, c.script...), Now: clk.Now, Sleep: clk.Sleep}.Run(t.Context())
			var got []string
			for _, name := range []string{checkObey, checkTight, checkFree} {
				got = append(got, name+"="+string(rep.check(name).Result))
			}
			if g := strings.Join(got, " "); g != c.want {
				t.Errorf("got %s, want %s", g, c.want)
			}
			for name, phrase := range c.seen {
				if s := rep.check(name).Seen; !strings.Contains(s, phrase) {
					t.Errorf("%s: %q, want it to hold %q", name, s, phrase)
				}
			}
			if rep.Requests != c.requests {
				t.Errorf("sent %d requests, want %d", rep.Requests, c.requests)
			}
		})
	}
}

// ownClockClient is a client as urllib3, go-retryablehttp, got, ky and axios-retry are: it sends
// requests pace apart until one is refused, reads its Retry-After (delay-seconds, or a date in
// zone GMT or UTC), sleeps until its own clock reaches the instant named, retries once, and
// reports whether the retry was admitted.
func ownClockClient(t *testing.T, rt http.RoundTripper, pace time.Duration) bool {
	t.Helper()
	do := func() *http.Response {
		req, _ := http.NewRequest(http.MethodGet, testURL, nil)
		resp, err := rt.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	for range 100 {
		sent := time.Now()
		resp := do()
		if resp.StatusCode != http.StatusTooManyRequests {
			time.Sleep(time.Until(sent.Add(pace)))
			continue
		}
		v := resp.Header.Get("Retry-After")
		var at time.Time
		if secs, err := strconv.Atoi(v); err == nil {
			at = time.Now().Add(time.Duration(secs) * time.Second)
		} else if at, err = time.Parse(time.RFC1123, v); err != nil {
			t.Fatalf("Retry-After %q: %v", v, err)
		}
		time.Sleep(time.Until(at))
		return do().StatusCode < 300
	}
	t.Fatal("no refusal")
	return false
}

// TestObeyIsWhatClientsExperience runs the probe, and apart from it a client that retries at
// the date by its own clock, against servers that answer with a date, the two starting at
// every 10 ms of a second, over a network without delay and one of 30 ms each way. The probe's
// obey verdict must be what the client experiences, every time. Without delay, a date cut to
// the second must fail at every instant but the whole second, where the cut takes nothing off,
// and a date rounded up must pass at every instant.
func TestObeyIsWhatClientsExperience(t *testing.T) {
	cut := func(off time.Duration) Result {
		if off%time.Second == 0 {
			return Pass
		}
		return Fail
	}
	for _, c := range []struct {
		name   string
		server func() http.Handler
		want   func(offset time.Duration) Result // the verdict without delay
	}{
		{"window end cut to the second", func() http.Handler {
			return withCORS("", &fixedWindow{limit: 3, window: 5 * time.Second})
		}, cut},
		{"window end rounded up", func() http.Handler {
			return withCORS("", &fixedWindow{limit: 3, window: 5 * time.Second, roundUp: true})
		}, func(time.Duration) Result { return Pass }},
		{"go-limiter-like", func() http.Handler { return withCORS("", newIntervalBucket(5, 2*time.Second)) }, cut},
	} {
		for _, delay := range []time.Duration{0, 30 * time.Millisecond} {
			t.Run(fmt.Sprintf("%s, %v each way", c.name, delay), func(t *testing.T) {
				var wrong []string
				runs := 0
				for off := time.Duration(0); off < time.Second; off += 10 * time.Millisecond {
					runs++
					var admitted bool
					var obey *Check
					synctest.Test(t, func(t *testing.T) {
						n := serve(t, c.server())
						defer n.close()
						time.Sleep(off)
						admitted = ownClockClient(t, slowTransport{n.tr, delay}, defaultPace)
					})
					synctest.Test(t, func(t *testing.T) {
						n := serve(t, c.server())
						defer n.close()
						time.Sleep(off)
						obey = Probe{URL: testURL, Transport: slowTransport{n.tr, delay}}.Run(t.Context()).check(checkObey)
					})
					client := Fail
					if admitted {
						client = Pass
					}
					if obey.Result != client || delay == 0 && obey.Result != c.want(off) {
						wrong = append(wrong, fmt.Sprintf("at +%v: obey=%s (%s), the client: %s", off, obey.Result, obey.Seen, client))
					}
				}
				if len(wrong) > 0 {
					t.Errorf("wrong at %d of %d instants:\n%s", len(wrong), runs, strings.Join(wrong, "\n"))
				}
			})
		}
	}
}

// TestObeyAt checks when the probe obeys a refusal, and how it says so: delay-seconds from the
// response, a date at its instant by the probe's clock unless the Dates prove the server's
// clock apart, and by the least skew they prove then.
func TestObeyAt(t *testing.T) {
	for _, c := range []struct {
		kv   []string      // the refusal's fields; it was received at T0
		want time.Duration // when the probe retries, from T0
		how  string
	}{
		{[]string{"Date", date0, "Retry-After", "3"}, 3 * time.Second, "waited 3 s as told"},
		{[]string{"Date", date0, "Retry-After", "0"}, 0, `retried at once as told ("0")`},
		{[]string{"Date", date0, "Retry-After", imf(3 * time.Second)}, 3 * time.Second,
			"waited 3 s, until the date by the probe's clock (Date agrees with it to the second)"},
		// Date a second behind: the server read its clock in the second before T0 - 0.1 s, which
		// still agrees with the probe's; the date is obeyed by the probe's clock.
		{[]string{"Date", imf(-time.Second), "Retry-After", imf(2 * time.Second)}, 2 * time.Second,
			"waited 2 s, until the date by the probe's clock (Date agrees with it to the second)"},
		{[]string{"Retry-After", imf(3 * time.Second)}, 3 * time.Second,
			"waited 3 s, until the date by the probe's clock (no valid Date to measure the server's by)"},
		// A date equal to Date, but the second of Date is behind the probe's: it has passed.
		{[]string{"Date", imf(-time.Second), "Retry-After", imf(-time.Second)}, -time.Second,
			"retried at once, the date having passed by the probe's clock (Date agrees with it to the second)"},
		{[]string{"Date", date0, "Retry-After", testkit.T0.Add(-3 * time.Second).Format(time.RFC1123)}, -3 * time.Second,
			"retried at once, the date being 3 s before Date"},
		// Date ten seconds ahead: the server's clock is taken as 10 s ahead, the least Date
		// proves, so that the retry is not early by it.
		{[]string{"Date", imf(10 * time.Second), "Retry-After", imf(13 * time.Second)}, 3 * time.Second,
			"waited 3 s, until the date by the server's clock (10 s ahead of the probe's, as Date shows)"},
		{[]string{"Date", imf(-time.Hour), "Retry-After", imf(-time.Hour + 3*time.Second)}, 3 * time.Second,
			"waited 3 s, until the date by the server's clock (1h0m0s behind the probe's, as Date shows)"},
	} {
		e := response(429, c.kv...)
		q := &session{s: &sender{}}
		q.s.skew.add(e)
		tl := readTold(e)
		at := q.obeyAt(tl, e)
		if got := at.Sub(testkit.T0); got != c.want {
			t.Errorf("%q: retries at T0%+v, want T0%+v", c.kv, got, c.want)
		}
		if how := q.obeyed(tl, e, at); how != c.how {
			t.Errorf("%q: %q, want %q", c.kv, how, c.how)
		}
	}
}
