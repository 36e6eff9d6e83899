package retryaftercaddy

import (
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/retryafter/retryafter/gateway"
	"github.com/retryafter/retryafter/internal/testkit"
)

// An upstream's answer, as reverse_proxy copies it onto the ResponseWriter.
type upstreamAnswer struct {
	status     int
	retryAfter []string // nil: none
	date       string   // "": none
}

// upstreamAnswers are the answers the tests send through the handler: what real upstreams
// get wrong (httprate's 0, a fraction, time.RFC1123's UTC, a runaway counter, garbage, none),
// on the statuses where Retry-After means something and where it does not.
func upstreamAnswers(now time.Time) []upstreamAnswer {
	date := now.Add(-2 * time.Second).Format(http.TimeFormat) // an upstream clock 2 s slow
	in30 := now.Add(28 * time.Second).UTC()
	var out []upstreamAnswer
	for _, status := range []int{429, 503, 302, 307, 200, 404, 304} {
		for _, ra := range [][]string{
			{"0"}, {"1.5"}, {"7"}, {"+3"}, {"86400000"}, {"-1"}, {"soon"}, {"1", "2"}, nil,
			{in30.Format(time.RFC1123)}, {in30.Format(http.TimeFormat)}, {in30.Format(time.RFC850)},
			{now.Add(-time.Hour).UTC().Format(http.TimeFormat)},
		} {
			out = append(out, upstreamAnswer{status, ra, date}, upstreamAnswer{status, ra, ""})
		}
	}
	return out
}

// normalizeConfigs are the configurations the tests run each answer through.
var normalizeConfigs = []Normalize{
	{},
	{Fallback: caddy.Duration(7 * time.Second), Max: caddy.Duration(10 * time.Minute)},
	{FillMissing: true, ExactDates: true},
	{Fallback: caddy.Duration(1500 * time.Millisecond), Max: caddy.Duration(90 * time.Second), FillMissing: true},
}

// What the handler sends a client is what gateway.Normalizer.ModifyResponse makes of the same
// upstream response, on the same clock, for every answer and configuration: the handler runs
// the Normalizer on the header just before the status line, and changes nothing else.
func TestNormalizeIsTheNormalizer(t *testing.T) {
	now := testkit.T0.Add(400 * time.Millisecond)
	clock := func() time.Time { return now }
	for _, cfg := range normalizeConfigs {
		h := cfg
		h.now = clock
		provision(t, &h)
		direct := gateway.Normalizer{
			Now: clock, Fallback: time.Duration(cfg.Fallback), Max: time.Duration(cfg.Max),
			FillMissing: cfg.FillMissing, ExactDates: cfg.ExactDates,
		}
		for _, a := range upstreamAnswers(now) {
			upstream := func() http.Header {
				hdr := http.Header{"Content-Type": {"text/plain"}, "X-Upstream": {"yes"}}
				if a.retryAfter != nil {
					hdr["Retry-After"] = append([]string(nil), a.retryAfter...)
				}
				if a.date != "" {
					hdr.Set("Date", a.date)
				}
				return hdr
			}
			want := &http.Response{StatusCode: a.status, Header: upstream()}
			if err := direct.ModifyResponse(want); err != nil {
				t.Fatal(err)
			}

			w := httptest.NewRecorder()
			r := caddyRequest("192.0.2.1:1", new(caddyhttp.Server))
			err := h.ServeHTTP(w, r, caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
				for k, v := range upstream() {
					w.Header()[k] = v
				}
				w.WriteHeader(a.status)
				if a.status == http.StatusNotModified {
					return nil // a 304 has no body
				}
				_, err := io.WriteString(w, "body")
				return err
			}))
			if err != nil {
				t.Fatal(err)
			}
			if w.Code != a.status || (w.Body.String() != "body") != (a.status == http.StatusNotModified) {
				t.Fatalf("%+v: status %d body %q, want %d and the upstream's body", a, w.Code, w.Body, a.status)
			}
			if got := w.Result().Header; !reflect.DeepEqual(got, want.Header) {
				t.Errorf("%s, upstream %+v:\nclient got %v\nNormalizer %v", toJSON(cfg), a, got, want.Header)
			}
		}
	}
}

// The repairs the issue found Caddy's reverse_proxy passing through, by value: each comes out
// as the delay-seconds its sender meant, with the gateway's Date.
func TestNormalizeRepairsWhatReverseProxyPassesThrough(t *testing.T) {
	now := testkit.T0.Add(300 * time.Millisecond)
	date := now.Format(http.TimeFormat)
	for _, c := range []struct {
		cfg        Normalize
		status     int
		retryAfter string // "": none
		want       string // "": none
	}{
		{Normalize{}, 429, "0", "1"},
		{Normalize{}, 503, "1.5", "2"},
		{Normalize{}, 429, now.Add(30 * time.Second).UTC().Format(time.RFC1123), "31"},
		{Normalize{ExactDates: true}, 429, now.Add(30 * time.Second).UTC().Format(time.RFC1123), "30"},
		{Normalize{}, 429, "86400000", "3600"},
		{Normalize{Max: caddy.Duration(10 * time.Minute)}, 429, "86400000", "600"},
		{Normalize{}, 429, "soon", "5"},
		{Normalize{Fallback: caddy.Duration(7 * time.Second)}, 503, "soon", "7"},
		{Normalize{}, 429, "", ""},
		{Normalize{FillMissing: true}, 429, "", "5"},
		{Normalize{}, 302, "0", ""},
		{Normalize{}, 200, "0", "0"},
	} {
		h := c.cfg
		h.now = func() time.Time { return now }
		provision(t, &h)
		w := httptest.NewRecorder()
		err := h.ServeHTTP(w, caddyRequest("192.0.2.1:1", new(caddyhttp.Server)), caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
			if c.retryAfter != "" {
				w.Header().Set("Retry-After", c.retryAfter)
			}
			w.Header().Set("Date", date)
			w.WriteHeader(c.status)
			return nil
		}))
		if err != nil {
			t.Fatal(err)
		}
		if got := w.Header().Get("Retry-After"); got != c.want {
			t.Errorf("%s %d Retry-After %q: client got %q, want %q", toJSON(c.cfg), c.status, c.retryAfter, got, c.want)
		}
		if got := w.Header().Get("Date"); got != date {
			t.Errorf("%d Retry-After %q: Date %q, want %q", c.status, c.retryAfter, got, date)
		}
	}
}

// writeLog is a ResponseWriter that records each WriteHeader with the header at that moment.
type writeLog struct {
	header http.Header
	codes  []int
	seen   []http.Header
	body   strings.Builder
}

func (l *writeLog) Header() http.Header { return l.header }

func (l *writeLog) WriteHeader(code int) {
	l.codes = append(l.codes, code)
	l.seen = append(l.seen, l.header.Clone())
}

func (l *writeLog) Write(b []byte) (int, error) { return l.body.Write(b) }

// The header is repaired at the final status, not at an informational one before it, and not
// after the body has started (a Write or ReadFrom without WriteHeader sends 200).
func TestNormalizeWriterPaths(t *testing.T) {
	h := &Normalize{now: func() time.Time { return testkit.T0 }}
	provision(t, h)
	serve := func(next func(w http.ResponseWriter) error) *writeLog {
		t.Helper()
		l := &writeLog{header: http.Header{}}
		if err := h.ServeHTTP(l, caddyRequest("192.0.2.1:1", new(caddyhttp.Server)), caddyhttp.HandlerFunc(
			func(w http.ResponseWriter, r *http.Request) error { return next(w) })); err != nil {
			t.Fatal(err)
		}
		return l
	}

	l := serve(func(w http.ResponseWriter) error {
		w.Header().Set("Link", "</style.css>; rel=preload")
		w.Header().Set("Retry-After", "0")
		w.WriteHeader(http.StatusEarlyHints)
		w.WriteHeader(http.StatusTooManyRequests)
		return nil
	})
	if !reflect.DeepEqual(l.codes, []int{103, 429}) || l.seen[0].Get("Retry-After") != "0" || l.seen[1].Get("Retry-After") != "1" {
		t.Errorf("103 then 429: statuses %v with Retry-After %q, %q; want 103 untouched, then 429 with 1",
			l.codes, l.seen[0].Get("Retry-After"), l.seen[len(l.seen)-1].Get("Retry-After"))
	}

	for name, start := range map[string]func(w http.ResponseWriter) error{
		"Write": func(w http.ResponseWriter) error { _, err := w.Write([]byte("x")); return err },
		"ReadFrom": func(w http.ResponseWriter) error {
			_, err := w.(io.ReaderFrom).ReadFrom(strings.NewReader("x"))
			return err
		},
	} {
		l := serve(func(w http.ResponseWriter) error {
			w.Header().Set("Retry-After", "0")
			if err := start(w); err != nil {
				return err
			}
			w.WriteHeader(http.StatusTooManyRequests) // superfluous: 200 has gone out
			return nil
		})
		if got := l.header.Get("Retry-After"); got != "0" || l.body.String() != "x" {
			t.Errorf("%s, then WriteHeader(429): Retry-After %q and body %q, want the header untouched", name, got, l.body.String())
		}
	}

	// The wrapper unwraps, so that http.ResponseController reaches the writer beneath.
	l = &writeLog{header: http.Header{}}
	_ = h.ServeHTTP(l, caddyRequest("192.0.2.1:1", new(caddyhttp.Server)), caddyhttp.HandlerFunc(
		func(w http.ResponseWriter, r *http.Request) error {
			if u, ok := w.(interface{ Unwrap() http.ResponseWriter }); !ok || u.Unwrap() != l {
				t.Errorf("the wrapper does not unwrap to the writer beneath")
			}
			return nil
		}))
}

// An error of the next handler is returned to Caddy unchanged.
func TestNormalizePassesErrorsOn(t *testing.T) {
	h := new(Normalize)
	provision(t, h)
	want := caddyhttp.Error(http.StatusBadGateway, io.ErrUnexpectedEOF)
	got := h.ServeHTTP(httptest.NewRecorder(), caddyRequest("192.0.2.1:1", new(caddyhttp.Server)),
		caddyhttp.HandlerFunc(func(http.ResponseWriter, *http.Request) error { return want }))
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("error %v, want %v", got, want)
	}
}

// Every repair is logged at the debug level with what the upstream sent and what the client
// got; a conforming value is not.
func TestNormalizeLogsRepairs(t *testing.T) {
	h := &Normalize{now: func() time.Time { return testkit.T0 }}
	provision(t, h)
	core, logs := observer.New(zap.DebugLevel)
	h.logger = zap.New(core)
	for _, ra := range []string{"0", "7", "soon"} {
		_ = h.ServeHTTP(httptest.NewRecorder(), caddyRequest("192.0.2.1:1", new(caddyhttp.Server)), caddyhttp.HandlerFunc(
			func(w http.ResponseWriter, r *http.Request) error {
				w.Header().Set("Retry-After", ra)
				w.WriteHeader(http.StatusTooManyRequests)
				return nil
			}))
	}
	all := logs.All()
	if len(all) != 2 {
		t.Fatalf("%d entries logged, want 2 (for 0 and soon): %v", len(all), all)
	}
	for i, want := range []map[string]any{
		{"kind": "understood", "status": int64(429), "upstream_retry_after": []any{"0"}, "client_retry_after": time.Second},
		{"kind": "invalid", "status": int64(429), "upstream_retry_after": []any{"soon"}, "client_retry_after": 5 * time.Second},
	} {
		got := all[i].ContextMap()
		if all[i].Level != zap.DebugLevel {
			t.Errorf("entry %d at level %v, want debug", i, all[i].Level)
		}
		for k, v := range want {
			if !reflect.DeepEqual(got[k], v) {
				t.Errorf("entry %d: %s = %#v, want %#v (all: %v)", i, k, got[k], v, got)
			}
		}
	}
}

func TestNormalizeProvisionErrors(t *testing.T) {
	for _, c := range []struct{ json, want string }{
		{`{"fallback":-1}`, "fallback -1ns: want a duration above 0"},
		{`{"max":"500ms"}`, "max 500ms: want a duration of at least 1s"},
		{`{"max":-5}`, "max -5ns"},
		{`{"fallback":"2h"}`, "fallback 2h0m0s is longer than max 1h0m0s"},
		{`{"fallback":"10s","max":"5s"}`, "fallback 10s is longer than max 5s"},
		{`{"fallback":"1500ms","max":"1900ms"}`, "fallback 1.5s is longer than max 1s"},
	} {
		err := provisionErr(t, fromJSON[Normalize](t, c.json))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Provision error %v, want one saying %q", c.json, err, c.want)
		}
	}
	for _, ok := range []string{`{}`, `{"fallback":"1h","max":"1h"}`, `{"fallback":"1s","max":"1500ms"}`, `{"fill_missing":true,"exact_dates":true}`} {
		if err := provisionErr(t, fromJSON[Normalize](t, ok)); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
}

func TestNormalizeCaddyfile(t *testing.T) {
	for _, c := range []struct{ src, json string }{
		{"retry_after_normalize", `{}`},
		{"retry_after_normalize {\n fallback 5s\n max 1h\n fill_missing\n exact_dates\n}",
			`{"fallback":5000000000,"max":3600000000000,"fill_missing":true,"exact_dates":true}`},
		{"retry_after_normalize {\n max 1d\n}", `{"max":86400000000000}`},
	} {
		var h Normalize
		if err := fromCaddyfile(c.src, &h); err != nil {
			t.Errorf("%s: %v", c.src, err)
			continue
		}
		if got := toJSON(h); got != c.json {
			t.Errorf("%s:\n got %s\nwant %s", c.src, got, c.json)
		}
	}
	for _, c := range []struct{ src, want string }{
		{"retry_after_normalize 5s", "no argument on its line"},
		{"retry_after_normalize {\n fallback\n}", "fallback takes one duration"},
		{"retry_after_normalize {\n fallback 5s 6s\n}", "fallback takes one duration"},
		{"retry_after_normalize {\n fallback five\n}", `fallback "five"`},
		{"retry_after_normalize {\n max 0s\n}", `max "0s"`},
		{"retry_after_normalize {\n max -1s\n}", `max "-1s"`},
		{"retry_after_normalize {\n fill_missing yes\n}", "fill_missing takes no value"},
		{"retry_after_normalize {\n exact_dates\n exact_dates\n}", "exact_dates given twice"},
		{"retry_after_normalize {\n fallback_to 5s\n}", `unknown option "fallback_to"`},
	} {
		var h Normalize
		err := fromCaddyfile(c.src, &h)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want one saying %q", c.src, err, c.want)
		}
	}
}
