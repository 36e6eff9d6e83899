package main

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/retryafter/retryafter"
)

const (
	testURL    = "http://api.test/v1/things"
	testOrigin = "https://app.test"
)

// A probeCase is a server and every verdict the probe must reach on it.
type probeCase struct {
	name   string
	server func() http.Handler // built inside the bubble
	delay  time.Duration       // how long after the server starts the probe starts
	before int                 // how many requests other traffic sends just before the probe
	probe  Probe               // URL, Transport and Origin are filled in unless set
	noOrig bool                // send no Origin

	want     string            // "name=result ..." for every check, in report order
	seen     map[string]string // check name: a phrase its Seen must hold
	limited  bool              // whether the report must say the server was already limited
	exit     int
	gaveUp   string // a phrase GaveUp must hold; "" when the probe must finish
	requests int    // how many requests it must send; 0: do not check
}

// allPass is the verdicts of a server that gets everything right.
const allPass = "retry-after=pass date=pass obey=pass tight=pass refusal-free=pass head=pass cors=pass ratelimit=n/a"

var probeCases = []probeCase{
	{
		name: "ours", server: ours,
		want: "retry-after=pass date=pass obey=pass tight=n/a refusal-free=pass head=pass cors=pass ratelimit=pass",
		seen: map[string]string{
			checkRetryAfter: `"1": delay-seconds`,
			checkDate:       "agrees with the probe's clock to the second",
			checkObey:       "waited 1 s as told, then retried: admitted (200 OK)",
			checkTight:      `cannot judge "1": a second early is at once, which a limiter refuses whether the wait is padded or not (retried at once: refused (429 Too Many Requests, Retry-After: 1))`,
			checkFree:       "waited the rest (1 s in all), then retried: admitted (200 OK)",
			checkHEAD:       "HEAD: 429 Too Many Requests, Retry-After: 1, like GET",
			checkCORS:       "Access-Control-Expose-Headers: Retry-After, Date, RateLimit, RateLimit-Policy",
			checkRateLimit:  `RateLimit: "default";r=0;t=1: t=1 agrees with Retry-After`,
		},
		// 5 admitted, the refusal, the obeying retry, the next refusal, the early retry, the
		// retry after it, a refused GET and the HEAD.
		requests: 12,
	},
	{
		name: "ours without -origin", server: ours, noOrig: true,
		want: "retry-after=pass date=pass obey=pass tight=n/a refusal-free=pass head=pass cors=n/a ratelimit=pass",
		seen: map[string]string{checkCORS: "no -origin given"},
	},
	{
		name: "ours, with X-RateLimit-* too", noOrig: true,
		server: func() http.Handler {
			return retryafter.Limit(1, 5, retryafter.WithRateLimitFields(""), retryafter.WithLegacyRateLimitFields(true))(hello())
		},
		want: "retry-after=pass date=pass obey=pass tight=n/a refusal-free=pass head=pass cors=n/a ratelimit=pass",
		seen: map[string]string{
			checkRateLimit: `RateLimit: "default";r=0;t=1: t=1 agrees with Retry-After; X-RateLimit-Limit: 5, X-RateLimit-Remaining: 0, X-RateLimit-Reset: 1 (seconds): agrees with Retry-After (all 5 refusals pass)`,
		},
	},
	{
		// Other traffic spent the burst just before: the first request is refused.
		name: "ours, limited by earlier traffic", server: ours, before: 5, limited: true,
		want: "retry-after=pass date=pass obey=pass tight=n/a refusal-free=pass head=pass cors=pass ratelimit=pass",
		// The refusal, the obeying retry, the next refusal, the early retry, the retry after
		// it, a refused GET and the HEAD.
		requests: 7,
	},
	{
		name: "maintenance, delay-seconds", server: func() http.Handler { return maintenance(false, 10500*time.Millisecond, 0, false) },
		want: allPass,
		seen: map[string]string{
			checkRetryAfter: `"11": delay-seconds`,
			checkHEAD:       "HEAD: 503 Service Unavailable, Retry-After: 11, like GET",
			checkTight:      "retried 1.1 s early: refused (503 Service Unavailable, Retry-After: 1)",
			checkObey:       "waited 11 s as told, then retried: admitted (200 OK)",
		},
		requests: 4, // the refusal, the HEAD, the early retry, the obeying retry
	},
	{
		name: "maintenance, HTTP-date", server: func() http.Handler { return maintenance(true, 10500*time.Millisecond, 0, false) },
		want: allPass,
		seen: map[string]string{
			checkRetryAfter: `"Sat, 01 Jan 2000 00:00:11 GMT": IMF-fixdate, 11 s after Date`,
			checkTight:      "retried at least 1.1 s before the date: refused (503 Service Unavailable",
			checkObey:       "waited 11 s, until the date by the probe's clock (Date agrees with it to the second), then retried: admitted (200 OK)",
			checkCORS:       "Access-Control-Expose-Headers: Retry-After, Date",
		},
		requests: 4,
	},
	{
		name: "maintenance, HTTP-date, server clock two hours slow", server: func() http.Handler { return maintenance(true, 10500*time.Millisecond, -2*time.Hour, false) },
		want: "retry-after=pass date=fail obey=pass tight=pass refusal-free=pass head=pass cors=pass ratelimit=n/a",
		seen: map[string]string{
			checkDate: `"Fri, 31 Dec 1999 22:00:00 GMT": IMF-fixdate, at least 1h59m59s behind the probe's clock; one of the two clocks is wrong`,
			checkObey: "waited 11 s, until the date by the server's clock (2h0m0s behind the probe's, as Date shows), then retried: admitted",
		},
		exit: exitFail,
	},
	{
		name: "maintenance overrun", server: func() http.Handler { return maintenance(false, 10500*time.Millisecond, 0, true) },
		want: "retry-after=pass date=pass obey=fail tight=pass refusal-free=n/a head=pass cors=pass ratelimit=n/a",
		seen: map[string]string{
			checkObey: "waited 11 s as told, then retried: refused (503 Service Unavailable, Retry-After: 1): obeying is not enough",
			checkFree: "a maintenance window cannot be obeyed twice",
		},
		exit: exitFail,
	},
	{
		name: "httprate-like, a window under a second: Retry-After 0", server: func() http.Handler { return withCORS("", newSlidingWindow(5, 500*time.Millisecond)) },
		want: "retry-after=fail date=pass obey=fail tight=n/a refusal-free=n/a head=pass cors=fail ratelimit=pass",
		seen: map[string]string{
			checkRetryAfter: `"0": a wait of 0 tells clients to retry at once`,
			checkObey:       `retried at once as told ("0"), then retried: refused (429 Too Many Requests, Retry-After: 0): obeying is not enough`,
			checkTight:      `Retry-After "0" leaves no second to take off`,
			checkCORS:       "Access-Control-Expose-Headers: (none): does not expose Retry-After",
			checkRateLimit:  "X-RateLimit-Limit: 5, X-RateLimit-Remaining: 0, X-RateLimit-Reset: 946684800 (an epoch, 0 s after Date): agrees with Retry-After",
		},
		exit: exitFail,
	},
	{
		name: "httprate-like, the whole window", server: func() http.Handler { return withCORS("", newSlidingWindow(5, 10*time.Second)) },
		want: "retry-after=pass date=pass obey=fail tight=fail refusal-free=n/a head=pass cors=fail ratelimit=fail",
		seen: map[string]string{
			checkObey:  "waited 10 s as told, then retried: refused (429 Too Many Requests, Retry-After: 10)",
			checkTight: "retried 1.1 s early: admitted (200 OK): the wait is padded by a second or more",
			checkFree:  "the early retry was admitted",
			// The next refusal, 1 s before the window's end, still says the whole window.
			checkRateLimit: "X-RateLimit-Reset: 946684820 (an epoch, 1 s after Date): but Retry-After says 10 s: a client reading X-RateLimit-Reset comes back early",
		},
		exit: exitFail,
	},
	{
		name: "go-limiter-like, reset mid-second", delay: 900 * time.Millisecond,
		server: func() http.Handler { return withCORS("", newIntervalBucket(5, 2*time.Second)) },
		want:   "retry-after=fail date=pass obey=fail tight=n/a refusal-free=n/a head=pass cors=fail ratelimit=pass",
		seen: map[string]string{
			checkRetryAfter: `"Sat, 01 Jan 2000 00:00:02 UTC": not an HTTP-date: zone UTC (Go's time.RFC1123 or RFC1123Z); an HTTP-date ends in GMT`,
			checkObey:       "until the date by the probe's clock (Date agrees with it to the second), then retried: refused (429 Too Many Requests",
			checkTight:      "no room for an early retry",
			checkRateLimit:  "X-RateLimit-Reset: Sat, 01 Jan 2000 00:00:02 UTC (a date, 1 s after Date): agrees with Retry-After",
		},
		exit: exitFail,
	},
	{
		name: "go-limiter-like, reset on a whole second", server: func() http.Handler { return withCORS("", newIntervalBucket(5, 2*time.Second)) },
		want: "retry-after=fail date=pass obey=pass tight=n/a refusal-free=pass head=pass cors=fail ratelimit=pass",
		seen: map[string]string{
			checkRetryAfter: "zone UTC",
			checkObey:       "until the date by the probe's clock (Date agrees with it to the second), then retried: admitted (200 OK)",
			checkTight:      `cannot judge "Sat, 01 Jan 2000 00:00:04 UTC", 2 s after Date: a second early is at once`,
		},
		exit: exitFail,
	},
	{
		// 3 requests a 5 s window from 00:00:00.3: the date 00:00:05 is the window's end cut to
		// the second; a client retrying at it by its own clock is refused, as is the probe.
		name: "window end cut to the second", delay: 300 * time.Millisecond,
		server: func() http.Handler {
			return withCORS("Retry-After, Date", &fixedWindow{limit: 3, window: 5 * time.Second})
		},
		// The refused retry, at 00:00:05, is told 00:00:05 with a Date of 00:00:05: a wait of 0.
		want: "retry-after=fail date=pass obey=fail tight=n/a refusal-free=n/a head=pass cors=pass ratelimit=n/a",
		seen: map[string]string{
			checkRetryAfter: `request 5 (GET): "Sat, 01 Jan 2000 00:00:05 GMT": the same second as Date, a wait of 0 (3 of 4 refusals fail)`,
			checkObey:       "waited 4.6 s, until the date by the probe's clock (Date agrees with it to the second), then retried: refused (429 Too Many Requests, Retry-After: Sat, 01 Jan 2000 00:00:05 GMT): obeying is not enough (the date is early: cut to the second rather than rounded up",
		},
		exit: exitFail,
	},
	{
		name: "window end rounded up", delay: 300 * time.Millisecond,
		server: func() http.Handler {
			return withCORS("Retry-After, Date", &fixedWindow{limit: 3, window: 5 * time.Second, roundUp: true})
		},
		want: allPass,
		seen: map[string]string{
			checkRetryAfter: `"Sat, 01 Jan 2000 00:00:06 GMT": IMF-fixdate, 6 s after Date`,
			checkObey:       "waited 5.6 s, until the date by the probe's clock (Date agrees with it to the second), then retried: admitted (200 OK)",
			checkTight:      "retried at least 1.1 s before the date: refused",
		},
	},
	{
		// 5 requests a 2 s window, Retry-After the time left cut to whole seconds: the first
		// refusal, 1.75 s before the end, says "1"; the retry after it, 0.75 s before, "0".
		name: "time left cut to whole seconds",
		server: func() http.Handler {
			return withCORS("Retry-After", &fixedWindow{limit: 5, window: 2 * time.Second, cutSeconds: true})
		},
		want: "retry-after=fail date=pass obey=fail tight=n/a refusal-free=n/a head=pass cors=pass ratelimit=n/a",
		seen: map[string]string{
			checkRetryAfter: `request 7 (GET): "0": a wait of 0 tells clients to retry at once (3 of 4 refusals fail)`,
			checkDate:       "agrees with the probe's clock to the second (all 4 refusals pass)",
			checkObey:       "waited 1 s as told, then retried: refused (429 Too Many Requests, Retry-After: 0)",
		},
		exit: exitFail,
	},
	{
		name: "charges refused requests", server: func() http.Handler { return withCORS("", &tokenBucket{charge: true}) },
		want: "retry-after=pass date=pass obey=pass tight=pass refusal-free=fail head=pass cors=pass ratelimit=n/a",
		seen: map[string]string{
			checkObey: "waited 2 s as told, then retried: admitted (200 OK)",
			checkFree: "after the refused early retry, waited the rest (2 s in all), then retried: refused (429 Too Many Requests, Retry-After: 2), while obeying alone is admitted: the refused early retry was charged",
		},
		exit: exitFail,
	},
	{
		name: "exact, but no Date", server: func() http.Handler { return withCORS("", &tokenBucket{noDate: true}) },
		want: "retry-after=pass date=fail obey=pass tight=n/a refusal-free=pass head=pass cors=pass ratelimit=n/a",
		seen: map[string]string{checkDate: "absent from the 429"},
		exit: exitFail,
	},
	{
		name: "no Retry-After", server: func() http.Handler { return withCORS("", &tokenBucket{noRetryAfter: true, fields: "x"}) },
		want: "retry-after=fail date=pass obey=fail tight=n/a refusal-free=n/a head=pass cors=n/a ratelimit=n/a",
		seen: map[string]string{
			checkRetryAfter: "absent from the 429: a client cannot know when to come back",
			checkObey:       "until the instant of X-Ratelimit-Reset: 946684801 by the probe's clock",
			checkRateLimit:  "X-RateLimit-Limit: 5, X-RateLimit-Remaining: 0, X-RateLimit-Reset: 946684801 (an epoch, 1 s after Date): no usable Retry-After to compare with",
			checkCORS:       "no Retry-After to expose",
		},
		exit: exitFail,
	},
	{
		name: "OpenAI's reset alone", server: func() http.Handler { return withCORS("", &tokenBucket{noRetryAfter: true, fields: "openai"}) },
		want: "retry-after=fail date=pass obey=pass tight=n/a refusal-free=n/a head=pass cors=n/a ratelimit=n/a",
		seen: map[string]string{checkObey: "as X-Ratelimit-Reset-Requests: 751ms told, there being no usable Retry-After, then retried: admitted"},
		exit: exitFail,
	},
	{
		name: "Anthropic's reset alone", server: func() http.Handler { return withCORS("", &tokenBucket{noRetryAfter: true, fields: "anthropic"}) },
		want: "retry-after=fail date=pass obey=pass tight=n/a refusal-free=n/a head=pass cors=n/a ratelimit=n/a",
		seen: map[string]string{checkObey: "until the instant of Anthropic-Ratelimit-Requests-Reset: 2000-01-01T00:00:01.001Z"},
		exit: exitFail,
	},
	{
		name: "GitHub's 403", server: func() http.Handler { return withCORS("", &tokenBucket{noRetryAfter: true, fields: "github"}) },
		want: "retry-after=fail date=pass obey=pass tight=n/a refusal-free=pass head=pass cors=n/a ratelimit=n/a",
		seen: map[string]string{checkRetryAfter: "absent from the 403", checkObey: "until the instant of X-Ratelimit-Reset: 946684802"},
		exit: exitFail,
	},
	{
		name: "HEAD not limited", server: oursGETOnly,
		want: "retry-after=pass date=pass obey=pass tight=n/a refusal-free=pass head=fail cors=pass ratelimit=n/a",
		seen: map[string]string{checkHEAD: "HEAD admitted (200 OK) right after GET was refused (429 Too Many Requests)"},
		exit: exitFail,
	},
	{
		name: "RateLimit t truncated", server: func() http.Handler { return withCORS("", &tokenBucket{fields: "early"}) },
		want: "retry-after=pass date=pass obey=pass tight=n/a refusal-free=pass head=pass cors=pass ratelimit=fail",
		seen: map[string]string{checkRateLimit: `RateLimit: "default";r=0;t=0: t=0 but Retry-After says 1 s: a client reading RateLimit comes back early`},
		exit: exitFail,
	},
	{
		name: "RateLimit-Reset of draft 06, truncated", server: func() http.Handler { return withCORS("", &tokenBucket{fields: "draft06"}) },
		want: "retry-after=pass date=pass obey=pass tight=n/a refusal-free=pass head=pass cors=pass ratelimit=fail",
		seen: map[string]string{checkRateLimit: "RateLimit-Limit: 5, RateLimit-Remaining: 0, RateLimit-Reset: 0: but Retry-After says 1 s: a client reading RateLimit-Reset comes back early"},
		exit: exitFail,
	},
	{
		name: "RateLimit in an old draft's syntax", server: func() http.Handler { return withCORS("", &tokenBucket{fields: "old"}) },
		want: "retry-after=pass date=pass obey=pass tight=n/a refusal-free=pass head=pass cors=pass ratelimit=fail",
		seen: map[string]string{checkRateLimit: `RateLimit: "limit=5, remaining=0, reset=1": not a Structured Field List: a comma or the end expected at byte 5`},
		exit: exitFail,
	},
	{
		name: "never refuses", server: hello,
		exit: exitGaveUp, gaveUp: "no refusal: the request budget is spent (-budget), after 300 requests (300 × 200 OK)", requests: 300,
	},
	{
		name: "never refuses, small budget", server: ours, probe: Probe{Budget: 3},
		exit: exitGaveUp, gaveUp: "no refusal: the request budget is spent (-budget), after 3 requests (3 × 200 OK)", requests: 3,
	},
	{
		name: "never refuses, short time budget", server: hello, probe: Probe{Timeout: time.Second},
		exit: exitGaveUp, gaveUp: "no refusal: waiting 50ms would pass the time budget (-timeout 1s, 50ms left), after 20 requests (20 × 200 OK)", requests: 20,
	},
	{
		name: "redirect to another host", server: redirectElsewhere,
		exit: exitGaveUp, requests: 1,
		gaveUp: "answered 302 Found, Location: http://elsewhere.test/v1/things, on another host: retryafter-check follows no redirect and sends only to the URL it is given",
	},
	{
		name: "a wait beyond the time budget", server: func() http.Handler { return maintenanceUnknownEnd(time.Hour) },
		want: "retry-after=pass date=pass obey=n/a tight=n/a refusal-free=n/a head=pass cors=pass ratelimit=n/a",
		seen: map[string]string{
			checkObey:  "not checked: waiting 59m59s would pass the time budget (-timeout 3m0s, 3m0s left)",
			checkTight: "not checked: waiting 59m59s would pass",
		},
		exit: exitGaveUp, gaveUp: "waiting 59m59s would pass the time budget (-timeout 3m0s, 3m0s left), after 2 requests", requests: 2,
	},
}

// verdicts formats the results of r's checks as probeCase.want does.
func verdicts(r *Report) string {
	parts := make([]string, len(r.Checks))
	for i, c := range r.Checks {
		parts[i] = fmt.Sprintf("%s=%s", c.Name, c.Result)
	}
	return strings.Join(parts, " ")
}

// runCase runs the probe of c against its server on the fake network, in a bubble, and
// returns the report and the requests the server saw.
func runCase(t *testing.T, c probeCase) (rep *Report, served, dialled []string) {
	synctest.Test(t, func(t *testing.T) {
		n := serve(t, c.server())
		defer n.close()
		time.Sleep(c.delay)
		for range c.before {
			req, _ := http.NewRequest(http.MethodGet, testURL, nil)
			resp, err := n.tr.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
		}
		p := c.probe
		p.URL, p.Transport = testURL, n.tr
		if !c.noOrig {
			p.Origin = testOrigin
		}
		rep = p.Run(t.Context())
		served, dialled = n.served(), n.dialled
	})
	return rep, served, dialled
}

// TestProbe holds the probe to the verdict of every check against every server: each failing
// check is caught and named, and nothing passes by accident.
func TestProbe(t *testing.T) {
	for _, c := range probeCases {
		t.Run(c.name, func(t *testing.T) { checkCase(t, c) })
	}
}

// checkCase runs the probe of c and holds it to c's verdicts, and to sending every request to
// the URL given, within its budget.
func checkCase(t *testing.T, c probeCase) {
	t.Helper()
	rep, served, dialled := runCase(t, c)
	var table strings.Builder
	writeTable(&table, rep)
	t.Logf("\n%s", table.String())

	if got := verdicts(rep); got != c.want {
		t.Errorf("verdicts:\n got %s\nwant %s", got, c.want)
	}
	for name, phrase := range c.seen {
		if ch := rep.check(name); ch == nil || !strings.Contains(ch.Seen, phrase) {
			t.Errorf("%s: seen %q, want it to hold %q", name, seenOf(ch), phrase)
		}
	}
	if limited := rep.Refusal != nil && rep.Refusal.AlreadyLimited; limited != c.limited ||
		limited != strings.Contains(table.String(), "\nalready limited: the first request was refused") {
		t.Errorf("already limited: %v, want %v", limited, c.limited)
	}
	if rep.Exit != c.exit {
		t.Errorf("exit = %d, want %d", rep.Exit, c.exit)
	}
	if c.gaveUp == "" && rep.GaveUp != "" || !strings.Contains(rep.GaveUp, c.gaveUp) {
		t.Errorf("gave up %q, want %q", rep.GaveUp, c.gaveUp)
	}
	checkRequests(t, c, rep, served, dialled)
}

// checkRequests holds the probe of c, which reported rep, to the requests it must send: as many
// as c says, every one counted, within the budget, and every one to the URL given.
func checkRequests(t *testing.T, c probeCase, rep *Report, served, dialled []string) {
	t.Helper()
	if c.requests != 0 && rep.Requests != c.requests {
		t.Errorf("requests = %d, want %d", rep.Requests, c.requests)
	}
	if served = served[c.before:]; rep.Requests != len(served) {
		t.Errorf("the report counts %d requests, the server saw %d", rep.Requests, len(served))
	}
	budget := c.probe.Budget
	if budget <= 0 {
		budget = defaultBudget
	}
	if rep.Requests > budget {
		t.Errorf("sent %d requests, over the budget of %d", rep.Requests, budget)
	}
	for _, s := range served {
		if s != "GET api.test /v1/things" && s != "HEAD api.test /v1/things" {
			t.Errorf("served %q: not the URL given", s)
		}
	}
	for _, d := range dialled {
		if d != "api.test:80" {
			t.Errorf("dialled %q", d)
		}
	}
}

func seenOf(c *Check) string {
	if c == nil {
		return "(no such check)"
	}
	return c.Seen
}

// TestEveryCheckCanFail makes sure the cases above make every check both fail and pass.
func TestEveryCheckCanFail(t *testing.T) {
	for _, name := range checkNames {
		var fails, passes bool
		for _, c := range probeCases {
			fails = fails || strings.Contains(" "+c.want+" ", " "+name+"=fail ")
			passes = passes || strings.Contains(" "+c.want+" ", " "+name+"=pass ")
		}
		if !fails || !passes {
			t.Errorf("check %s: a case where it fails: %v, where it passes: %v", name, fails, passes)
		}
	}
}

// TestJudgeEvery checks how the verdicts on every refusal of a run sum up.
func TestJudgeEvery(t *testing.T) {
	refusals := func(n int) []*exchange {
		es := make([]*exchange, n)
		for i := range es {
			es[i] = &exchange{n: 10 + i, method: http.MethodGet, status: http.StatusTooManyRequests}
		}
		es[n-1].method = http.MethodHead
		return es
	}
	// by returns a check whose verdict on the refusal numbered n is results[n-10].
	by := func(results ...Result) func(*exchange) Check {
		return func(e *exchange) Check {
			return Check{Name: checkRetryAfter, Result: results[e.n-10], Seen: fmt.Sprintf("seen %d", e.n)}
		}
	}
	for _, c := range []struct {
		results []Result
		want    Check
	}{
		{[]Result{Pass}, Check{checkRetryAfter, Pass, "seen 10"}},
		{[]Result{Fail}, Check{checkRetryAfter, Fail, "seen 10"}},
		{[]Result{NA}, Check{checkRetryAfter, NA, "seen 10"}},
		{[]Result{Pass, Pass, Pass}, Check{checkRetryAfter, Pass, "seen 10 (all 3 refusals pass)"}},
		{[]Result{Fail, Pass, Fail}, Check{checkRetryAfter, Fail, "seen 10 (2 of 3 refusals fail)"}},
		{[]Result{Pass, NA, Fail}, Check{checkRetryAfter, Fail, "request 12 (HEAD): seen 12 (1 of 3 refusals fail)"}},
		{[]Result{NA, NA, NA}, Check{checkRetryAfter, NA, "seen 10"}},
		{[]Result{NA, Pass, NA}, Check{checkRetryAfter, Pass, "request 11 (GET): seen 11 (1 of 3 refusals pass, the others: n/a)"}},
		{[]Result{Pass, NA}, Check{checkRetryAfter, Pass, "seen 10 (1 of 2 refusals pass, the others: n/a)"}},
	} {
		if got := judgeEvery(refusals(len(c.results)), by(c.results...)); got != c.want {
			t.Errorf("%v: %+v, want %+v", c.results, got, c.want)
		}
	}
}
