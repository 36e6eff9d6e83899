package retryaftercaddy

import (
	"net/http"
	"testing"
	"time"

	"github.com/retryafter/retryafter/internal/testkit"
)

// load provisions each handler as a configuration load does, after the one before, and then
// cleans up the handlers of the configuration it replaces, as Caddy does.
func load(t *testing.T, old []*Limit, next ...*Limit) []*Limit {
	t.Helper()
	for _, h := range next {
		provision(t, h)
	}
	for _, h := range old {
		if err := h.Cleanup(); err != nil {
			t.Fatal(err)
		}
	}
	return next
}

// statuses sends n requests from remote through h and returns their statuses.
func statuses(h *Limit, remote string, n int) []int {
	var got []int
	for range n {
		got = append(got, testkit.Serve(inCaddy(h), "GET", remote).Code)
	}
	return got
}

// A limit that a new configuration keeps, unchanged or of the same name, keeps every key's
// bucket: a client at its limit stays refused, with the same wait, and another keeps what it
// had left; a limit that changed without a name starts afresh.
func TestBucketsSurviveALoad(t *testing.T) {
	for _, c := range []struct {
		name      string
		old, next Limit
		kept      bool
	}{
		{"unchanged", Limit{Rate: "1/h", Burst: 2}, Limit{Rate: "1/h", Burst: 2}, true},
		{"unchanged, key", Limit{Rate: "1/h", Burst: 2, Key: "{http.vars.client_ip}"}, Limit{Rate: "1/h", Burst: 2, Key: "{http.vars.client_ip}"}, true},
		{"named, other fields", Limit{Name: "api", Rate: "1/h", Burst: 2}, Limit{Name: "api", Rate: "1/h", Burst: 2, RateLimitFields: &RateLimitFields{}}, true},
		{"unnamed, changed", Limit{Rate: "1/h", Burst: 2}, Limit{Rate: "2/h", Burst: 2}, false},
		{"renamed", Limit{Name: "api", Rate: "1/h", Burst: 2}, Limit{Name: "web", Rate: "1/h", Burst: 2}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			clk := testkit.NewClock(testkit.T0)
			old, next := c.old, c.next
			old.now, next.now = clk.Now, clk.Now
			loaded := load(t, nil, &old)
			statuses(&old, "192.0.2.1:1", 2) // at its limit
			statuses(&old, "192.0.2.2:1", 1) // one left
			w := testkit.Serve(inCaddy(&old), "GET", "192.0.2.1:1")
			before := testkit.WantRefusal(t, w, http.StatusTooManyRequests, clk.Now())

			clk.Advance(time.Second)
			load(t, loaded, &next)
			w = testkit.Serve(inCaddy(&next), "GET", "192.0.2.1:1")
			if !c.kept {
				if w.Code != http.StatusOK {
					t.Fatalf("a changed limit: the client at its limit got %d, want a fresh bucket", w.Code)
				}
				return
			}
			if got := testkit.WantRefusal(t, w, http.StatusTooManyRequests, clk.Now()); got != before-time.Second {
				t.Errorf("after the load: Retry-After %v, want %v", got, before-time.Second)
			}
			if got := statuses(&next, "192.0.2.2:1", 2); got[0] != 200 || got[1] != 429 {
				t.Errorf("the client with one request left: %v, want [200 429]", got)
			}
		})
	}
}

// A new rate or burst of a named limit applies from the load on to the tokens each key holds:
// a key keeps its tokens, at most the new burst, and refills at the new rate; a key the limit
// never saw starts with the new burst.
func TestBucketsTakeANewPolicy(t *testing.T) {
	for _, c := range []struct {
		name      string
		old, next Limit
		spent     int   // by the client before the load
		want      []int // its statuses after it
	}{
		{"burst raised, at its limit", Limit{Rate: "1/h", Burst: 2}, Limit{Rate: "1/h", Burst: 5}, 2, []int{429}},
		{"burst raised, one left", Limit{Rate: "1/h", Burst: 2}, Limit{Rate: "1/h", Burst: 5}, 1, []int{200, 429}},
		{"burst cut", Limit{Rate: "1/h", Burst: 5}, Limit{Rate: "1/h", Burst: 2}, 1, []int{200, 200, 429}},
		{"burst cut, at the new burst", Limit{Rate: "1/h", Burst: 5}, Limit{Rate: "1/h", Burst: 2}, 3, []int{200, 200, 429}},
	} {
		t.Run(c.name, func(t *testing.T) {
			clk := testkit.NewClock(testkit.T0)
			old, next := c.old, c.next
			old.Name, next.Name = "api", "api"
			old.now, next.now = clk.Now, clk.Now
			loaded := load(t, nil, &old)
			statuses(&old, "192.0.2.1:1", c.spent)
			load(t, loaded, &next)
			got := statuses(&next, "192.0.2.1:1", len(c.want))
			for i := range got {
				if got[i] != c.want[i] {
					t.Fatalf("after the load: %v, want %v", got, c.want)
				}
			}
			if fresh := statuses(&next, "192.0.2.9:1", next.Burst+1); fresh[next.Burst-1] != 200 || fresh[next.Burst] != 429 {
				t.Errorf("a new client: %v, want the new burst of %d admitted", fresh, next.Burst)
			}
		})
	}

	// A rate raised from 1/h to 1/s: the client at its limit is told, and admitted after, a
	// second rather than an hour.
	clk := testkit.NewClock(testkit.T0)
	old := &Limit{Name: "api", Rate: "1/h", Burst: 1, now: clk.Now}
	next := &Limit{Name: "api", Rate: "1/s", Burst: 1, now: clk.Now}
	loaded := load(t, nil, old)
	statuses(old, "192.0.2.1:1", 1)
	load(t, loaded, next)
	w := testkit.Serve(inCaddy(next), "GET", "192.0.2.1:1")
	if wait := testkit.WantRefusal(t, w, http.StatusTooManyRequests, clk.Now()); wait != time.Second {
		t.Fatalf("rate raised to 1/s: Retry-After %v, want 1s", wait)
	}
	clk.Advance(time.Second)
	if got := statuses(next, "192.0.2.1:1", 1); got[0] != 200 {
		t.Errorf("after the Retry-After of the new rate: %v, want 200", got)
	}
}

// The buckets of a limit are deleted when the last handler that uses them is cleaned up, and a
// limit that comes back after that starts afresh.
func TestBucketsReleasedWithTheLastHandler(t *testing.T) {
	clk := testkit.NewClock(testkit.T0)
	a := &Limit{Name: "gone", Rate: "1/h", Burst: 1, now: clk.Now}
	b := &Limit{Name: "gone", Rate: "1/h", Burst: 1, now: clk.Now}
	load(t, nil, a, b)
	statuses(a, "192.0.2.1:1", 1)
	if got := statuses(b, "192.0.2.1:1", 1); got[0] != 429 {
		t.Fatalf("two handlers of one name: the second admitted a client at its limit")
	}
	id := a.identity()
	if n, _ := buckets.References(id); n != 2 {
		t.Fatalf("%d references, want 2", n)
	}
	load(t, []*Limit{a, b})
	if n, ok := buckets.References(id); ok || n != 0 {
		t.Fatalf("after both were cleaned up: %d references, want none", n)
	}
	c := &Limit{Name: "gone", Rate: "1/h", Burst: 1, now: clk.Now}
	load(t, nil, c)
	if got := statuses(c, "192.0.2.1:1", 1); got[0] != 200 {
		t.Errorf("a limit loaded again after it was gone: %v, want a fresh bucket", got)
	}
}
