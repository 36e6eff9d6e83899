package normalize_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/retryafter/retryafter"
	"github.com/retryafter/retryafter/traefik/internal/plugintest"
	"github.com/retryafter/retryafter/traefik/normalize"
)

const importPath = plugintest.Module + "/normalize"

// upstreamDate is the Date every upstream here sends, so that dates are measured against it and
// the answers do not depend on the clock.
const upstreamDate = "Fri, 04 Dec 2026 15:00:00 GMT"

// A repairCase is an upstream's response and what the client must get through the middleware.
type repairCase struct {
	name      string
	config    map[string]any // as Traefik's dynamic configuration gives it: strings from labels
	status    int
	upstream  http.Header
	retry     string // the client's Retry-After; "" for none
	dated     bool   // the client gets the gateway's Date, not the upstream's
	logged    string // in the debug log line; "" for no line
	unchanged bool   // the upstream's header passes as it was
}

var repairCases = []repairCase{
	{name: "httprate's 0 on a 429", status: 429,
		upstream: http.Header{"Retry-After": {"0"}},
		retry:    "1", dated: true, logged: "kind=understood"},
	{name: "a UTC date (time.RFC1123)", status: 429,
		upstream: http.Header{"Retry-After": {"Fri, 04 Dec 2026 15:00:30 UTC"}, "Date": {upstreamDate}},
		retry:    "31", dated: true, logged: "leniency=zone"},
	{name: "a UTC date, exactDates", status: 429, config: map[string]any{"exactDates": "true"},
		upstream: http.Header{"Retry-After": {"Fri, 04 Dec 2026 15:00:30 UTC"}, "Date": {upstreamDate}},
		retry:    "30", dated: true, logged: "kind=understood"},
	{name: "a 503 without Retry-After, fillMissing", status: 503,
		config:   map[string]any{"fillMissing": "true", "fallback": "7s"},
		upstream: http.Header{},
		retry:    "7", dated: true, logged: "kind=missing"},
	{name: "a 503 without Retry-After", status: 503,
		upstream: http.Header{"Date": {upstreamDate}}, unchanged: true},
	{name: "garbage on a 429", status: 429, config: map[string]any{"fallback": "9s"},
		upstream: http.Header{"Retry-After": {"soon"}},
		retry:    "9", dated: true, logged: "kind=invalid"},
	{name: "a day, clamped to max", status: 503, config: map[string]any{"max": "1h"},
		upstream: http.Header{"Retry-After": {"86400"}},
		retry:    "3600", dated: true, logged: "kind=clamped"},
	{name: "garbage on a redirect", status: 302,
		upstream: http.Header{"Retry-After": {"soon"}, "Location": {"/elsewhere"}},
		dated:    true, logged: "kind=removed"},
	{name: "a conforming delay", status: 429,
		upstream: http.Header{"Retry-After": {"12"}, "Date": {upstreamDate}},
		retry:    "12", dated: true},
	{name: "a 200", status: 200,
		upstream: http.Header{"Retry-After": {"0"}, "Date": {upstreamDate}}, unchanged: true},
}

// upstream answers with the case's status and header, the way a service behind Traefik does.
func upstream(tc repairCase) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for k, v := range tc.upstream {
			w.Header()[k] = append([]string(nil), v...)
		}
		w.WriteHeader(tc.status)
		w.Write([]byte("body\n"))
	})
}

// checkRepairs runs every case through the plugin p and checks what the client gets; log holds
// what the plugin printed, or nil when it printed to the process's output.
func checkRepairs(t *testing.T, p *plugintest.Plugin, log *bytes.Buffer) {
	t.Helper()
	for _, tc := range repairCases {
		if log != nil {
			log.Reset()
		}
		h, err := p.New(context.Background(), tc.config, upstream(tc), "test-normalize")
		if err != nil {
			t.Fatalf("%s: New: %v", tc.name, err)
		}
		rec := httptest.NewRecorder()
		before := time.Now().Truncate(time.Second)
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/x", nil))
		resp := rec.Result()
		if resp.StatusCode != tc.status || rec.Body.String() != "body\n" {
			t.Errorf("%s: status %d, body %q; want %d and the upstream's", tc.name, resp.StatusCode, rec.Body.String(), tc.status)
		}
		if got := resp.Header.Values("Retry-After"); !tc.unchanged && (tc.retry == "" && len(got) != 0 || tc.retry != "" && (len(got) != 1 || got[0] != tc.retry)) {
			t.Errorf("%s: Retry-After %q, want %q", tc.name, got, tc.retry)
		}
		if tc.unchanged && !headerEqual(resp.Header, tc.upstream) {
			t.Errorf("%s: header %v, want the upstream's %v", tc.name, resp.Header, tc.upstream)
		}
		if tc.dated {
			date, err := http.ParseTime(resp.Header.Get("Date"))
			if err != nil || date.Before(before) || date.After(time.Now()) {
				t.Errorf("%s: Date %q, want the gateway's clock", tc.name, resp.Header.Get("Date"))
			}
			if tc.retry != "" {
				if wait, ok := retryafter.ParseRetryAfter(resp.Header, date); !ok || wait < time.Second {
					t.Errorf("%s: Retry-After %q does not parse strictly as a wait of at least 1s", tc.name, tc.retry)
				}
			}
		}
		if log == nil {
			continue
		}
		line := log.String()
		switch {
		case tc.logged == "" && line != "":
			t.Errorf("%s: logged %q, want nothing", tc.name, line)
		case tc.logged != "" && (!strings.Contains(line, tc.logged) || !strings.Contains(line, "retryAfterNormalize test-normalize: ") || strings.Count(line, "\n") != 1):
			t.Errorf("%s: logged %q, want one line with %q", tc.name, line, tc.logged)
		}
	}
}

func headerEqual(a, b http.Header) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range b {
		if strings.Join(a[k], "\n") != strings.Join(v, "\n") {
			return false
		}
	}
	return true
}

// TestRepairsInterpreted loads the plugin as Traefik does, interpreted by Yaegi v0.16.1 from a
// vendored tree, and serves every case through it: a change that Yaegi cannot run fails here.
func TestRepairsInterpreted(t *testing.T) {
	var log bytes.Buffer
	p := plugintest.Load(t, plugintest.GoPath(t, importPath), importPath, &log)
	checkRepairs(t, p, &log)
	checkConfigErrors(t, p)
}

// TestRepairsCompiled runs the same cases on the compiled plugin.
func TestRepairsCompiled(t *testing.T) {
	p := plugintest.Compiled(normalize.New, normalize.CreateConfig)
	checkRepairs(t, p, nil)
	checkConfigErrors(t, p)
}

// checkConfigErrors checks that New refuses the configurations it documents as wrong.
func checkConfigErrors(t *testing.T, p *plugintest.Plugin) {
	t.Helper()
	for _, config := range []map[string]any{
		{"fallback": "soon"},
		{"fallback": "0s"},
		{"fallback": "-5s"},
		{"max": "500ms"},
		{"max": "1d"},
		{"fallback": "2h", "max": "1h"},
		{"fallback": "2h"},
		{"fillMissing": "maybe"},
	} {
		if _, err := p.New(context.Background(), config, http.NotFoundHandler(), "bad"); err == nil {
			t.Errorf("New(%v) succeeded, want an error", config)
		}
	}
	for _, config := range []map[string]any{
		nil,
		{"fallback": "1h", "max": "1h"},
		{"fallback": "30s", "max": "1m", "fillMissing": true, "exactDates": "false"},
	} {
		if _, err := p.New(context.Background(), config, http.NotFoundHandler(), "good"); err != nil {
			t.Errorf("New(%v): %v", config, err)
		}
	}
}

// TestWriteWithoutWriteHeader checks that a body written without a status line passes as a 200,
// untouched.
func TestWriteWithoutWriteHeader(t *testing.T) {
	h, err := normalize.New(context.Background(), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "0")
		w.Write([]byte("ok"))
	}), normalize.CreateConfig(), "n")
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	if rec.Code != 200 || rec.Header().Get("Retry-After") != "0" || rec.Header().Get("Date") != "" {
		t.Errorf("got %d %v, want 200 and the header as the handler set it", rec.Code, rec.Header())
	}
}

// BenchmarkRequest measures a 200 passed untouched and a 429 whose Retry-After: 0 is repaired
// (and logged), through the plugin as Traefik interprets it and compiled: what the plugin costs
// per request under Yaegi.
func BenchmarkRequest(b *testing.B) {
	for _, mode := range []string{"interpreted", "compiled"} {
		for _, tc := range []repairCase{repairCases[len(repairCases)-1], repairCases[0]} {
			b.Run(mode+"/"+strconv.Itoa(tc.status), func(b *testing.B) {
				p := plugintest.Compiled(normalize.New, normalize.CreateConfig)
				if mode == "interpreted" {
					p = plugintest.Load(b, plugintest.GoPath(b, importPath), importPath, io.Discard)
				}
				h, err := p.New(context.Background(), nil, upstream(tc), "bench")
				if err != nil {
					b.Fatal(err)
				}
				req := httptest.NewRequest("GET", "/", nil)
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					h.ServeHTTP(httptest.NewRecorder(), req)
				}
			})
		}
	}
}
