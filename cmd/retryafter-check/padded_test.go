package main

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/retryafter/retryafter"
)

// The servers of a padded wait: each limiter twice, once telling the wait it keeps and once
// padding it, where the padding shows only when the quota runs out late in a window. The same
// comparison for go-chi/httprate, which needs a module of its own, is in interop.

// secondsUp is left in whole seconds, rounded up.
func secondsUp(left, _ time.Duration) string {
	return strconv.FormatInt(int64((left+time.Second-1)/time.Second), 10)
}

// wholeWindow is the window's length, whatever is left of it.
func wholeWindow(_, window time.Duration) string {
	return strconv.FormatInt(int64(window/time.Second), 10)
}

// plusOne adds a second to the Retry-After of every refusal of next.
func plusOne(next http.Handler) http.Handler {
	return editor{next: next, edit: func(_ *http.Request, status int, h http.Header) int {
		if n, err := strconv.Atoi(h.Get("Retry-After")); err == nil {
			h.Set("Retry-After", strconv.Itoa(n+1))
		}
		return status
	}}
}

// limitEvery3s is this package's middleware at a request every 3 s, in bursts of 3.
func limitEvery3s() http.Handler { return retryafter.Limit(rate.Every(3*time.Second), 3)(hello()) }

var paddedCases = []probeCase{
	{
		name: "fixed window, the time left rounded up", noOrig: true,
		server: func() http.Handler { return &fixedWindow{limit: 3, window: 10 * time.Second, says: secondsUp} },
		want:   "retry-after=pass date=pass obey=pass tight=pass refusal-free=pass head=pass cors=n/a ratelimit=n/a",
		seen:   map[string]string{checkTight: "later round, the quota spent again 5 s after an admission"},
	},
	{
		// At the default pace the quota runs out 150 ms into the window, where the whole
		// window is the wait: only a quota spent later in a window shows the padding.
		name: "fixed window, always the whole window", noOrig: true,
		server: func() http.Handler { return &fixedWindow{limit: 3, window: 10 * time.Second, says: wholeWindow} },
		want:   "retry-after=pass date=pass obey=pass tight=fail refusal-free=pass head=pass cors=n/a ratelimit=n/a",
		seen:   map[string]string{checkTight: "later round, the quota spent again 5 s after an admission"},
		exit:   exitFail,
	},
	{
		// The first round takes 10 requests, leaving 4 of 14, and the later round would need
		// 5: the probe gives up rather than pass a wait it did not check.
		name: "fixed window, always the whole window, no budget for the later round", noOrig: true,
		server: func() http.Handler { return &fixedWindow{limit: 3, window: 10 * time.Second, says: wholeWindow} },
		probe:  Probe{Budget: 14},
		want:   "retry-after=pass date=pass obey=pass tight=n/a refusal-free=pass head=n/a cors=n/a ratelimit=n/a",
		seen: map[string]string{
			checkTight: "retried 1.1 s early: refused (429 Too Many Requests, Retry-After: 10); the later round not checked: the later round needs about 5 requests, and 4 are left of -budget 14 (-skip-later skips it)",
			checkHEAD:  "not checked: the later round needs about 5 requests",
		},
		exit: exitGaveUp, gaveUp: "the later round needs about 5 requests, and 4 are left of -budget 14 (-skip-later skips it)",
		requests: 10,
	},
	{
		name: "fixed window, always the whole window, no time for the later round", noOrig: true,
		server: func() http.Handler { return &fixedWindow{limit: 3, window: 10 * time.Second, says: wholeWindow} },
		probe:  Probe{Timeout: 30 * time.Second},
		want:   "retry-after=pass date=pass obey=pass tight=n/a refusal-free=pass head=n/a cors=n/a ratelimit=n/a",
		exit:   exitGaveUp, gaveUp: "the later round would take about 16 s, and 9.7 s is left of -timeout 30s (-skip-later skips it)",
	},
	{
		name: "Limit", noOrig: true, server: limitEvery3s,
		want: "retry-after=pass date=pass obey=pass tight=pass refusal-free=pass head=pass cors=n/a ratelimit=n/a",
	},
	{
		name: "Limit, a second added", noOrig: true,
		server: func() http.Handler { return plusOne(limitEvery3s()) },
		want:   "retry-after=pass date=pass obey=pass tight=fail refusal-free=n/a head=pass cors=n/a ratelimit=n/a",
		exit:   exitFail,
	},
}

// TestPaddedWait holds the probe to the verdict each server deserves: a wait told as the server
// keeps it passes, a padded one fails, wherever in a window the quota runs out.
func TestPaddedWait(t *testing.T) {
	for _, c := range paddedCases {
		t.Run(c.name, func(t *testing.T) { checkCase(t, c) })
	}
}
