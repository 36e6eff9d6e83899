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
