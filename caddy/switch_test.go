package retryaftercaddy

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
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
