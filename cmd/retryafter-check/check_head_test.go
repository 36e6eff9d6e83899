package main

import (
	"strings"
	"testing"
	"time"
)

func TestCompareHEAD(t *testing.T) {
	get := response(429, "Date", date0, "Retry-After", "5", "RateLimit", `"default";r=0;t=5`)
	for _, c := range []struct {
		status int
		kv     []string
		after  time.Duration // how long after the GET the HEAD went
		want   Result
		seen   string
	}{
		{429, []string{"Date", date0, "Retry-After", "5", "RateLimit", `"default";r=0;t=5`}, 0, Pass, "HEAD: 429 Too Many Requests, Retry-After: 5, like GET"},
		{429, []string{"Date", date0, "Retry-After", "4", "RateLimit", `"default";r=0;t=4`}, time.Second, Pass, "like GET"},
		{200, []string{"Date", date0}, 0, Fail, "HEAD admitted (200 OK) right after GET was refused (429 Too Many Requests): HEAD is limited apart, or not at all"},
		{503, []string{"Date", date0, "Retry-After", "5"}, 0, Fail, "HEAD: 503 Service Unavailable, GET: 429 Too Many Requests"},
		{429, []string{"Date", date0, "RateLimit", `"default";r=0;t=5`}, 0, Fail, "Retry-After on GET, not on HEAD"},
		{429, []string{"Date", date0, "Retry-After", "60", "RateLimit", `"default";r=0;t=5`}, 0, Fail, `Retry-After "60" for HEAD, "5" for GET`},
		{429, []string{"Date", date0, "Retry-After", "5.0", "RateLimit", `"default";r=0;t=5`}, 0, Fail, `Retry-After "5.0" for HEAD, "5" for GET`},
		{429, []string{"Retry-After", "5", "RateLimit", `"default";r=0;t=5`}, 0, Fail, "Date on GET, not on HEAD"},
		{429, []string{"Date", date0, "Retry-After", "5"}, 0, Fail, "RateLimit on GET, not on HEAD"},
		// A HEAD the server does not serve says nothing of its limiter.
		{405, []string{"Date", date0, "Allow", "GET"}, 0, NA, "HEAD answered 405 Method Not Allowed: the server does not serve HEAD here, which says nothing of its limiter"},
		{501, []string{"Date", date0}, 0, NA, "HEAD answered 501 Not Implemented: the server does not serve HEAD here"},
		// Neither admitted nor refused.
		{500, []string{"Date", date0}, 0, NA, "HEAD answered 500 Internal Server Error, neither admitted nor refused"},
		{302, []string{"Date", date0, "Location", "/"}, 0, NA, "HEAD answered 302 Found, neither admitted nor refused"},
	} {
		h := response(c.status, c.kv...)
		h.method = "HEAD"
		h.sent, h.received = get.received.Add(c.after), get.received.Add(c.after)
		got := compareHEAD(get, h)
		if got.Name != checkHEAD || got.Result != c.want || !strings.Contains(got.Seen, c.seen) {
			t.Errorf("%d %q: %s %q, want %s and %q", c.status, c.kv, got.Result, got.Seen, c.want, c.seen)
		}
	}
}

// TestCompareHEADWaits checks that HEAD is like GET only when both are refusals whose waits
// agree: a wait on one side only, or on neither, is not alike.
func TestCompareHEADWaits(t *testing.T) {
	for _, c := range []struct {
		get, head *exchange
		want      Result
		seen      string
	}{
		{response(429, "Date", date0, "Retry-After", "1.5"), response(429, "Date", date0, "Retry-After", "soon"), Fail,
			`Retry-After "soon" for HEAD reads as no wait, "1.5" for GET does`},
		{response(429, "Date", date0, "Retry-After", "soon"), response(429, "Date", date0, "Retry-After", "1.5"), Fail,
			`Retry-After "1.5" for HEAD reads as a wait, "soon" for GET does not`},
		{response(429, "Date", date0, "Retry-After", "soon"), response(429, "Date", date0, "Retry-After", "later"), NA,
			"neither GET nor HEAD tells a wait: whether they agree cannot be told"},
		{response(429, "Date", date0), response(429, "Date", date0), NA,
			"neither GET nor HEAD tells a wait"},
		{response(429, "Date", date0, "Retry-After", "1.5"), response(429, "Date", date0, "Retry-After", "1.5"), Pass, "like GET"},
		// GitHub's 403 on GET; on HEAD a plain 403, which is no refusal.
		{response(403, "Date", date0, "X-Ratelimit-Remaining", "0", "X-Ratelimit-Reset", "1795953605"), response(403, "Date", date0), Fail,
			"HEAD answered 403 Forbidden, which is no refusal, right after GET was refused (403 Forbidden)"},
		{response(403, "Date", date0, "X-Ratelimit-Remaining", "0", "X-Ratelimit-Reset", "1795953605"),
			response(403, "Date", date0, "X-Ratelimit-Remaining", "0", "X-Ratelimit-Reset", "1795953605"), Pass, "like GET"},
		{response(403, "Date", date0, "X-Ratelimit-Remaining", "0", "X-Ratelimit-Reset", "1795953605"),
			response(403, "Date", date0, "X-Ratelimit-Remaining", "0", "X-Ratelimit-Reset", "1795953699"), Fail, "X-Ratelimit-Reset"},
	} {
		c.head.method = "HEAD"
		got := compareHEAD(c.get, c.head)
		if got.Result != c.want || !strings.Contains(got.Seen, c.seen) {
			t.Errorf("GET %v, HEAD %v: %s %q, want %s and %q", c.get.header, c.head.header, got.Result, got.Seen, c.want, c.seen)
		}
	}
}
