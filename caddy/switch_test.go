package retryaftercaddy

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/retryafter/retryafter/internal/testkit"
)

// admin sends method to the switch of name through the admin API's handler and returns the
// status and the state it reports.
func admin(t *testing.T, method, name, body string) (int, switchState) {
	t.Helper()
	r := httptest.NewRequest(method, switchPath+name, strings.NewReader(body))
	w := httptest.NewRecorder()
	var st switchState
	if err := serveSwitch(w, r); err != nil {
		var apiErr caddy.APIError
		if !errors.As(err, &apiErr) {
			t.Fatalf("%s %s: %v, want an APIError", method, name, err)
		}
		return apiErr.HTTPStatus, st
	}
	if err := json.Unmarshal(w.Body.Bytes(), &st); err != nil {
		t.Fatalf("%s %s: %q: %v", method, name, w.Body.String(), err)
	}
	return w.Code, st
}

// The admin API turns a named maintenance switch on, with or without an until, and off,
// without a reload; with an until it ends there by itself; its state survives a reload; a name
// no handler uses is 404.
func TestMaintenanceSwitch(t *testing.T) {
	clk := testkit.NewClock(testkit.T0)
	h := &Limit{MaintenanceSwitch: "unit", now: clk.Now}
	loaded := load(t, nil, h)
	serve := func(h *Limit) *httptest.ResponseRecorder { return testkit.Serve(inCaddy(h), "GET", "192.0.2.1:1") }
	if w := serve(h); w.Code != http.StatusOK {
		t.Fatalf("switch off: %d, want 200", w.Code)
	}
	until := testkit.T0.Add(3 * time.Second).Format(time.RFC3339)
	if code, st := admin(t, "POST", "unit", `{"until": "`+until+`"}`); code != 200 || !st.On || st.Until != until {
		t.Fatalf("POST: %d %+v", code, st)
	}
	w := serve(h)
	if wait := testkit.WantRefusal(t, w, http.StatusServiceUnavailable, clk.Now()); wait != 3*time.Second {
		t.Fatalf("switched on until %s: Retry-After %v, want 3s", until, wait)
	}
	clk.Advance(3 * time.Second)
	if w := serve(h); w.Code != http.StatusOK {
		t.Errorf("at until: %d, want 200", w.Code)
	}
	if code, st := admin(t, "POST", "unit", ""); code != 200 || !st.On || st.Until != "" {
		t.Fatalf("POST without a body: %d %+v", code, st)
	}
	next := &Limit{MaintenanceSwitch: "unit", Rate: "1/s", Burst: 5, now: clk.Now}
	load(t, loaded, next)
	if wait := testkit.WantRefusal(t, serve(next), http.StatusServiceUnavailable, clk.Now()); wait != time.Minute {
		t.Errorf("on with no end, after a reload: Retry-After %v, want 1m", wait)
	}
	if code, st := admin(t, "GET", "unit", ""); code != 200 || !st.On {
		t.Errorf("GET: %d %+v", code, st)
	}
	if code, st := admin(t, "DELETE", "unit", ""); code != 200 || st.On {
		t.Errorf("DELETE: %d %+v", code, st)
	}
	if w := serve(next); w.Code != http.StatusOK {
		t.Errorf("switched off: %d, want 200", w.Code)
	}
	for _, c := range []struct {
		method, name, body string
		want               int
	}{
		{"POST", "nosuch", "", http.StatusNotFound},
		{"POST", "unit", `{"until": "tomorrow"}`, http.StatusBadRequest},
		{"POST", "unit", `{"until": `, http.StatusBadRequest},
		{"PUT", "unit", "", http.StatusMethodNotAllowed},
	} {
		if code, _ := admin(t, c.method, c.name, c.body); code != c.want {
			t.Errorf("%s %s %q: %d, want %d", c.method, c.name, c.body, code, c.want)
		}
	}
	load(t, []*Limit{next})
	if code, _ := admin(t, "GET", "unit", ""); code != http.StatusNotFound {
		t.Errorf("after the last handler of the switch was cleaned up: %d, want 404", code)
	}
}

// adminError sends method to the switch of name and returns the status and the message of the
// error it answers, "" when none.
func adminError(t *testing.T, method, name, body string) (int, string) {
	t.Helper()
	r := httptest.NewRequest(method, switchPath+name, strings.NewReader(body))
	w := httptest.NewRecorder()
	if err := serveSwitch(w, r); err != nil {
		var apiErr caddy.APIError
		if !errors.As(err, &apiErr) {
			t.Fatalf("%s %s: %v, want an APIError", method, name, err)
		}
		return apiErr.HTTPStatus, apiErr.Err.Error()
	}
	return w.Code, ""
}

// A POST to the switch takes only the body its doc gives: an unknown field (GET's "on", a
// misspelt until or hold), a second value or anything after the object, a value of the wrong
// type, a body that is not an object, or the zero time as until is answered 400 saying why, and
// the switch is left as it was, off or on. It turned maintenance on, with no end, for each.
func TestMaintenanceSwitchPostStrict(t *testing.T) {
	h := &Limit{MaintenanceSwitch: "strict"}
	load(t, nil, h)
	const until = "2030-06-01T22:00:00Z"
	for _, c := range []struct{ body, why string }{
		{`{"on": false}`, `unknown field "on"`},
		{`{"untill": "` + until + `"}`, `unknown field "untill"`},
		{`{"until": "` + until + `", "hodl": true}`, `unknown field "hodl"`},
		{`{"until": "` + until + `"}{"hold": true}`, "after the object"},
		{`{"hold": true} {}`, "after the object"},
		{`{"hold": true} x`, "after the object"},
		{`{"hold": true},`, "after the object"},
		{`{"hold": "yes"}`, "hold"},
		{`{"hold": 1}`, "hold"},
		{`{"until": 1924992000}`, "until"},
		{`{"until": "tomorrow"}`, "RFC 3339"},
		{`{"until": "0001-01-01T00:00:00Z"}`, "zero time"},
		{`{"until": "0001-01-01T01:00:00+01:00"}`, "zero time"},
		{`null`, "object"},
		{`[]`, "object"},
		{`"on"`, "object"},
		{`true`, "object"},
		{`{"hold": true`, "JSON"},
	} {
		for _, before := range []string{"", `{"until": "2029-01-01T00:00:00Z", "hold": true}`} {
			if before == "" {
				admin(t, "DELETE", "strict", "")
			} else if code, _ := admin(t, "POST", "strict", before); code != 200 {
				t.Fatalf("POST %s: %d", before, code)
			}
			_, was := admin(t, "GET", "strict", "")
			code, why := adminError(t, "POST", "strict", c.body)
			if code != http.StatusBadRequest || !strings.Contains(why, c.why) {
				t.Errorf("POST %s: %d %q, want 400 saying %q", c.body, code, why, c.why)
			}
			if _, now := admin(t, "GET", "strict", ""); now != was {
				t.Errorf("POST %s changed the switch from %+v to %+v", c.body, was, now)
			}
		}
	}
	for _, c := range []struct {
		body string
		want switchState
	}{
		{"", switchState{On: true}},
		{" \n", switchState{On: true}},
		{`{}`, switchState{On: true}},
		{`{"until": "` + until + `"}` + "\n", switchState{On: true, Until: until}},
		{`{"until": "` + until + `", "hold": true}`, switchState{On: true, Until: until, Hold: true}},
		{`{"hold": false}`, switchState{On: true}},
	} {
		admin(t, "DELETE", "strict", "")
		if code, st := admin(t, "POST", "strict", c.body); code != 200 || st != c.want {
			t.Errorf("POST %q: %d %+v, want 200 %+v", c.body, code, st, c.want)
		}
	}
}

// Two POSTs at once leave the switch as one of them set it, until and hold together, never the
// until of one with the hold of the other, and a GET while POSTs change the switch sees one
// state or another that was sent, never half of a change; the handler agrees with GET.
func TestMaintenanceSwitchConcurrentPosts(t *testing.T) {
	h := &Limit{MaintenanceSwitch: "race"}
	load(t, nil, h)
	sent := []string{`{"until": "2030-01-01T00:00:00Z", "hold": true}`, `{"until": "2031-01-01T00:00:00Z"}`}
	want := map[switchState]bool{
		{On: true, Until: "2030-01-01T00:00:00Z", Hold: true}: true,
		{On: true, Until: "2031-01-01T00:00:00Z"}:             true,
	}
	post := func(body string) {
		if code, _ := adminError(t, "POST", "race", body); code != 200 {
			t.Errorf("POST %s: %d", body, code)
		}
	}
	past := time.Date(2032, 1, 1, 0, 0, 0, 0, time.UTC) // after both untils: only a hold refuses
	var spins atomic.Int64
	for round := range 2000 {
		admin(t, "DELETE", "race", "")
		// Both wait, running, for the other, so that their POSTs overlap rather than take
		// turns on one processor.
		var wg sync.WaitGroup
		var ready atomic.Int32
		for i, body := range sent {
			wg.Go(func() {
				ready.Add(1)
				for ready.Load() < 2 {
				}
				for range (round*7 + i*13) % 256 { // shift one against the other, round by round
					spins.Add(1)
				}
				post(body)
			})
		}
		wg.Wait()
		_, st := admin(t, "GET", "race", "")
		if !want[st] {
			t.Fatalf("round %d: after two POSTs at once the switch is %+v, which neither sent", round, st)
		}
		if refusing := !h.maint.over(past); refusing != st.Hold {
			t.Fatalf("round %d: the switch is %+v, and after its until the handler refuses: %v", round, st, refusing)
		}
	}
	var done atomic.Bool
	var wg sync.WaitGroup
	wg.Go(func() {
		defer done.Store(true)
		for i := range 20_000 {
			post(sent[i%2])
		}
	})
	for seen := 0; !done.Load(); seen++ {
		if _, st := admin(t, "GET", "race", ""); !want[st] {
			t.Fatalf("GET %d while the switch changes: %+v, which no POST sent", seen, st)
		}
	}
	wg.Wait()
}
