package maintenance

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/retryafter/retryafter"
	"github.com/retryafter/retryafter/internal/header"
	"github.com/retryafter/retryafter/traefik/internal/plugintest"
)

const importPath = plugintest.Module + "/maintenance"

// never is a next handler that fails the test if the middleware calls it.
func never(t *testing.T) http.Handler {
	return http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		t.Error("the middleware called next")
	})
}

// service is the next handler that the middleware passes requests to once the work is over.
var service = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	w.Write([]byte("ok\n"))
})

// serve sends one GET through h and returns the response and the instants just before and after.
func serve(h http.Handler) (resp *http.Response, before, after time.Time) {
	rec := httptest.NewRecorder()
	before = time.Now()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	return rec.Result(), before, time.Now()
}

// checkAnswers checks the plugin p's 503s on the real clock: it cannot be set from Traefik's
// configuration, so the checks hold for any instant the request is served at.
func checkAnswers(t *testing.T, p *plugintest.Plugin) {
	t.Helper()
	ctx := context.Background()
	until := time.Now().Add(90*time.Second + 300*time.Millisecond)
	config := map[string]any{"until": until.Format(time.RFC3339Nano)}

	h, err := p.New(ctx, config, never(t), "m")
	if err != nil {
		t.Fatal(err)
	}
	resp, before, after := serve(h)
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusServiceUnavailable || string(body) != "Service Unavailable\n" {
		t.Errorf("status %d, body %q; want 503 and http.Error's body", resp.StatusCode, body)
	}
	date, err := http.ParseTime(resp.Header.Get("Date"))
	if err != nil || date.Before(before.Truncate(time.Second)) || date.After(after) {
		t.Errorf("Date %q, want the clock's reading", resp.Header.Get("Date"))
	}
	// Seconds count from when the response is received: a client that waits exactly that long
	// from then is not early, and one second less would have been.
	secs, err := strconv.Atoi(resp.Header.Get("Retry-After"))
	wait := time.Duration(secs) * time.Second
	if err != nil || after.Add(wait).Before(until) || before.Add(wait-time.Second).After(until) {
		t.Errorf("Retry-After %q between %v and %v, want the seconds left until %v", resp.Header.Get("Retry-After"), before, after, until)
	}

	// The date form: the end, rounded up, measured against Date by the strict parser.
	config["httpDate"] = "true"
	h, err = p.New(ctx, config, never(t), "m")
	if err != nil {
		t.Fatal(err)
	}
	resp, _, _ = serve(h)
	if got, want := resp.Header.Get("Retry-After"), header.RoundUpDate(until).Format(http.TimeFormat); got != want {
		t.Errorf("httpDate: Retry-After %q, want %q", got, want)
	}
	date, _ = http.ParseTime(resp.Header.Get("Date"))
	if w, ok := retryafter.ParseRetryAfter(resp.Header, date); !ok || date.Add(w).Before(until) {
		t.Errorf("httpDate: Retry-After %q against Date %q: a wait of %v, short of %v", resp.Header.Get("Retry-After"), resp.Header.Get("Date"), w, until)
	}

	// An unknown end: Wait.
	for _, tc := range []struct {
		config map[string]any
		want   string
	}{
		{map[string]any{}, "60"},
		{map[string]any{"wait": "90s"}, "90"},
		{map[string]any{"wait": "1500ms", "httpDate": "false"}, "2"},
	} {
		h, err := p.New(ctx, tc.config, never(t), "m")
		if err != nil {
			t.Fatal(err)
		}
		resp, _, _ := serve(h)
		if got := resp.Header.Get("Retry-After"); resp.StatusCode != 503 || got != tc.want {
			t.Errorf("%v: %d, Retry-After %q; want 503 and %q", tc.config, resp.StatusCode, got, tc.want)
		}
	}

	// The end is honoured: from it on, requests pass to the service.
	for _, until := range []time.Time{time.Now(), time.Now().Add(-10 * time.Minute)} {
		h, err := p.New(ctx, map[string]any{"until": until.Format(time.RFC3339Nano)}, service, "m")
		if err != nil {
			t.Fatal(err)
		}
		resp, _, _ := serve(h)
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Retry-After") != "" {
			t.Errorf("until %v, passed: %d, Retry-After %q; want the service's 200", until, resp.StatusCode, resp.Header.Get("Retry-After"))
		}
	}

	for _, config := range []map[string]any{
		{"until": "tomorrow"},
		{"until": "2026-12-05 06:00"},
		{"wait": "0s"},
		{"wait": "soon"},
		{"httpDate": "perhaps"},
	} {
		if _, err := p.New(ctx, config, never(t), "bad"); err == nil {
			t.Errorf("New(%v) succeeded, want an error", config)
		}
	}
	// The zero time would read as no end, 503 for ever, where any other past until lets every
	// request through: it is refused, so that no until means two things.
	for _, until := range []string{"0001-01-01T00:00:00Z", "0000-12-31T23:00:00-01:00"} {
		if _, err := p.New(ctx, map[string]any{"until": until}, never(t), "zero"); err == nil || !strings.Contains(err.Error(), "zero time") {
			t.Errorf("until %s: %v, want an error saying it is the zero time", until, err)
		}
	}
}

// TestAnswersInterpreted loads the plugin as Traefik does, interpreted by Yaegi v0.16.1 from a
// vendored tree: a change that Yaegi cannot run fails here.
func TestAnswersInterpreted(t *testing.T) {
	checkAnswers(t, plugintest.Load(t, plugintest.GoPath(t, importPath), importPath, io.Discard))
}

// TestAnswersCompiled runs the same checks on the compiled plugin.
func TestAnswersCompiled(t *testing.T) {
	checkAnswers(t, plugintest.Compiled(New, CreateConfig))
}

// TestSameAnswerAsMaintenance holds the plugin to retryafter.Maintenance's answer at many instants
// of an injected clock before the announced end, in both forms; from the end on, a client that
// waited as told is let in.
func TestSameAnswerAsMaintenance(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	until := t0.Add(2*time.Minute + 250*time.Millisecond)
	for _, httpDate := range []bool{false, true} {
		var now time.Time
		clock := func() time.Time { return now }
		m := &retryafter.Maintenance{Now: clock, Wait: 90 * time.Second, HTTPDate: httpDate}
		m.Start(until)
		want := m.Handler(never(t))
		got, err := New(context.Background(), service, &Config{Until: until.Format(time.RFC3339Nano), Wait: "90s", HTTPDate: httpDate}, "m")
		if err != nil {
			t.Fatal(err)
		}
		got.(*handler).now = clock
		for step := time.Duration(0); t0.Add(step).Before(until); step += 77 * time.Millisecond {
			now = t0.Add(step)
			a, b := httptest.NewRecorder(), httptest.NewRecorder()
			want.ServeHTTP(a, httptest.NewRequest("GET", "/", nil))
			got.ServeHTTP(b, httptest.NewRequest("GET", "/", nil))
			for _, name := range []string{"Retry-After", "Date"} {
				if a.Header().Get(name) != b.Header().Get(name) || a.Code != b.Code {
					t.Fatalf("httpDate %v, at %v: %d %s %q, want retryafter.Maintenance's %d %q", httpDate, now, b.Code, name, b.Header().Get(name), a.Code, a.Header().Get(name))
				}
			}
			// The round trip: a client that waits what it was told, from this instant, is let in.
			told, ok := retryafter.ParseRetryAfter(b.Header(), now)
			if !ok {
				t.Fatalf("at %v: Retry-After %q does not parse", now, b.Header().Get("Retry-After"))
			}
			saved := now
			now = now.Add(told)
			c := httptest.NewRecorder()
			got.ServeHTTP(c, httptest.NewRequest("GET", "/", nil))
			if c.Code != http.StatusOK {
				t.Fatalf("at %v, told %v: the retry got %d, want the service's 200", saved, told, c.Code)
			}
			now = saved
		}
	}
}
