package retryaftercaddy

// These tests load configurations into a real Caddy, started in the test process by Caddy's
// caddytest package, with its admin endpoint and every site on loopback ports chosen free at
// the start, and send it requests over loopback.

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddytest"

	"github.com/retryafter/retryafter"
	"github.com/retryafter/retryafter/gateway"
)

// The loopback ports of the in-process Caddy, chosen in TestMain.
var adminPort, sitePort int

func TestMain(m *testing.M) {
	// Caddy keeps its data (certificates, locks) and its autosaved configuration under the
	// XDG folders: a temporary one keeps the tests off the user's.
	dir, err := os.MkdirTemp("", "retryaftercaddy")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Setenv("XDG_DATA_HOME", dir+"/data")
	os.Setenv("XDG_CONFIG_HOME", dir+"/config")
	adminPort, sitePort = freePort(), freePort()
	// Caddy restarts its admin endpoint with each load; caddytest posts each load on the default
	// transport, which could otherwise send it on a kept-alive connection to the one before.
	http.DefaultTransport.(*http.Transport).DisableKeepAlives = true
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// freePort returns a loopback TCP port that nothing listened on a moment ago.
func freePort() int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// globalOptions are the options every test Caddyfile starts with: the admin endpoint and
// every listener on loopback, no automatic HTTPS, nothing written outside the test's folders.
const globalOptions = `{
	admin localhost:ADMIN
	default_bind 127.0.0.1
	auto_https off
	persist_config off
	skip_install_trust
	grace_period 1ns
}
`

// expand replaces ADMIN, SITE and UPSTREAM in config with the test's ports and upstream.
func expand(config, upstream string) string {
	return strings.NewReplacer("ADMIN", strconv.Itoa(adminPort), "SITE", strconv.Itoa(sitePort),
		"UPSTREAM", upstream).Replace(config)
}

// loadCaddy loads config, of type "caddyfile" or "json", into the in-process Caddy and returns
// a client for it; the test fails if Caddy does not run it.
func loadCaddy(t *testing.T, config, configType string) *caddytest.Tester {
	t.Helper()
	tc := caddytest.NewTester(t).WithDefaultOverrides(caddytest.Config{
		AdminPort: adminPort, LoadRequestTimeout: 10 * time.Second, TestRequestTimeout: 10 * time.Second,
	})
	tc.InitServer(config, configType)
	if t.Failed() {
		t.FailNow()
	}
	return tc
}

// get sends a GET for path to the site, with the given headers, and returns the response with
// its body read. Each request has a connection of its own: the tests load one configuration
// after another on the same port, and a connection kept from the last one belongs to a server
// that Caddy is closing (grace_period 1ns), which resets it. A new connection may still meet
// that server for a moment after a load, while it stops accepting on the listener it shares
// with the new one: a request closed (reset, or ended at EOF) with no answer is sent again, at
// most twice. Were the first one counted, the tests that count would fail, not pass.
func get(t *testing.T, tc *caddytest.Tester, path string, header ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest("GET", fmt.Sprintf("http://127.0.0.1:%d%s", sitePort, path), nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Close = true
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := tc.Client.Do(req)
	for try := 0; try < 2 && (errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.EOF)); try++ {
		t.Logf("GET %s: %v; sending it again", path, err)
		resp, err = tc.Client.Do(req)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(body)
}

// wantRefusal checks that resp is a refusal with status, a Date within a minute of the test's
// clock and a Retry-After that the strict parser reads, measured against that Date, as a whole
// number of seconds from 1 to most, and returns that wait.
func wantRefusal(t *testing.T, resp *http.Response, status int, most time.Duration) time.Duration {
	t.Helper()
	if resp.StatusCode != status {
		t.Fatalf("status %d, want %d", resp.StatusCode, status)
	}
	date, err := http.ParseTime(resp.Header.Get("Date"))
	if err != nil || time.Until(date).Abs() > time.Minute {
		t.Fatalf("Date %q: want an HTTP-date of now", resp.Header.Get("Date"))
	}
	wait, ok := retryafter.ParseRetryAfter(resp.Header, date)
	if !ok || wait < time.Second || wait > most || wait%time.Second != 0 {
		t.Fatalf("Retry-After %q: want whole seconds from 1 to %v", resp.Header.Get("Retry-After"), most)
	}
	return wait
}

// limitCaddyfile is the retry_after_limit of the package's README, with a slower rate so that
// a test's requests cannot be admitted again by the refill, and its JSON form.
const (
	limitCaddyfile = globalOptions + `
http://127.0.0.1:SITE {
	respond "hello"
	retry_after_limit {
		rate  1/h
		burst 2
		key   {client_ip}
		rate_limit_fields api
	}
}
`
	limitJSON = `{
	"admin": {"listen": "localhost:ADMIN"},
	"apps": {"http": {"grace_period": 1, "servers": {"srv0": {
		"listen": ["127.0.0.1:SITE"],
		"automatic_https": {"disable": true},
		"routes": [{"handle": [
			{"handler": "retry_after_limit", "name": "json", "rate": "1/h", "burst": 2, "key": "{http.vars.client_ip}",
			 "rate_limit_fields": {"policy": "api"}},
			{"handler": "static_response", "body": "hello"}
		]}]
	}}}}
}`
)

// retry_after_limit in a real Caddy, from the Caddyfile and from JSON: the burst is admitted,
// then the client is refused with 429, a Retry-After in whole seconds up to the refill time of
// one request, a Date, and the RateLimit fields of the configured policy.
func TestLimitInCaddy(t *testing.T) {
	for _, c := range []struct{ name, config, configType string }{
		{"Caddyfile", limitCaddyfile, "caddyfile"},
		{"JSON", limitJSON, "json"},
	} {
		t.Run(c.name, func(t *testing.T) {
			tc := loadCaddy(t, expand(c.config, ""), c.configType)
			for i := range 2 {
				if resp, body := get(t, tc, "/"); resp.StatusCode != 200 || body != "hello" {
					t.Fatalf("request %d: %d %q, want 200 hello", i, resp.StatusCode, body)
				}
			}
			resp, _ := get(t, tc, "/")
			wantRefusal(t, resp, http.StatusTooManyRequests, time.Hour)
			if got := resp.Header.Get("RateLimit-Policy"); got != `"api";q=2;w=7200` {
				t.Errorf("RateLimit-Policy %q, want \"api\";q=2;w=7200", got)
			}
			if got := resp.Header.Get("RateLimit"); !strings.HasPrefix(got, `"api";r=0;t=`) {
				t.Errorf("RateLimit %q, want \"api\";r=0;t=...", got)
			}
		})
	}
}

// A key from a header counts each value apart, through Caddy's placeholders, and the empty
// value is a key of its own; maintenance answers 503 before the limiter, from the Caddyfile.
func TestLimitKeyAndMaintenanceInCaddy(t *testing.T) {
	tc := loadCaddy(t, expand(globalOptions+`
http://127.0.0.1:SITE {
	retry_after_limit /keyed {
		rate  1/h
		burst 1
		key   {header.X-Api-Key}
	}
	retry_after_limit /down {
		maintenance {
			wait 2m
		}
	}
	respond "hello"
}
`, ""), "caddyfile")
	for i, c := range []struct {
		key  string
		want int
	}{{"a", 200}, {"a", 429}, {"b", 200}, {"b", 429}, {"", 200}, {"", 429}} {
		if resp, _ := get(t, tc, "/keyed", "X-Api-Key", c.key); resp.StatusCode != c.want {
			t.Errorf("request %d with key %q: %d, want %d", i, c.key, resp.StatusCode, c.want)
		}
	}
	resp, _ := get(t, tc, "/down")
	if wait := wantRefusal(t, resp, http.StatusServiceUnavailable, 2*time.Minute); wait != 2*time.Minute {
		t.Errorf("maintenance with wait 2m: Retry-After %v", wait)
	}
	if resp, body := get(t, tc, "/elsewhere"); resp.StatusCode != 200 || body != "hello" {
		t.Errorf("a path no directive matches: %d %q", resp.StatusCode, body)
	}
}

// misbehavingUpstream answers every path /<status>/... with that status, the Retry-After the
// request names in X-Send-Retry-After, and its own Date, a second slow; it is what Caddy
// proxies to.
func misbehavingUpstream(t *testing.T) *httptest.Server {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		parts := strings.SplitN(strings.TrimPrefix(r.URL.Path, "/"), "/", 2)
		status, err := strconv.Atoi(parts[0])
		if err != nil || len(parts) != 2 {
			http.Error(w, "want /<status>/...", http.StatusBadRequest)
			return
		}
		date := time.Now().Add(-time.Second).UTC().Format(http.TimeFormat)
		w.Header().Set("Date", date)
		w.Header().Set("X-Upstream-Date", date) // what the Normalizer replaces, kept for the test
		if ra := r.Header.Get("X-Send-Retry-After"); ra != "" {
			w.Header().Set("Retry-After", ra)
		}
		w.WriteHeader(status)
	}))
	t.Cleanup(up.Close)
	return up
}

// normalizeCases are what the upstream sends; its Date is its clock, and a date in Retry-After
// is measured against it.
func normalizeCases() []struct{ status, retryAfter string } {
	in20 := time.Now().Add(19 * time.Second).UTC() // 20 s after the upstream's slow Date
	return []struct{ status, retryAfter string }{
		{"429", "0"}, {"503", "1.5"}, {"429", in20.Format(time.RFC1123)}, {"429", "86400000"},
		{"429", "7"}, {"503", "soon"}, {"429", ""}, {"302", "0"}, {"200", "0"},
	}
}

// retry_after_normalize in front of reverse_proxy, from the Caddyfile and from JSON: what the
// client gets is what gateway.Normalizer makes of the upstream's response. Without the
// directive, reverse_proxy passes the upstream's values through untouched.
func TestNormalizeInFrontOfReverseProxy(t *testing.T) {
	up := misbehavingUpstream(t)
	upstream := strings.TrimPrefix(up.URL, "http://")
	for _, c := range []struct {
		name, config, configType string
		norm                     func() *gateway.Normalizer // nil: no directive
	}{
		{"Caddyfile", globalOptions + `
http://127.0.0.1:SITE {
	reverse_proxy UPSTREAM
	retry_after_normalize {
		fallback 5s
		max 1h
		fill_missing
		exact_dates
	}
}
`, "caddyfile", func() *gateway.Normalizer {
			return &gateway.Normalizer{Fallback: 5 * time.Second, Max: time.Hour, FillMissing: true, ExactDates: true}
		}},
		{"JSON", `{
	"admin": {"listen": "localhost:ADMIN"},
	"apps": {"http": {"grace_period": 1, "servers": {"srv0": {
		"listen": ["127.0.0.1:SITE"],
		"automatic_https": {"disable": true},
		"routes": [{"handle": [
			{"handler": "retry_after_normalize", "fallback": "7s", "max": "10m"},
			{"handler": "reverse_proxy", "upstreams": [{"dial": "UPSTREAM"}]}
		]}]
	}}}}
}`, "json", func() *gateway.Normalizer {
			return &gateway.Normalizer{Fallback: 7 * time.Second, Max: 10 * time.Minute}
		}},
		{"without it", globalOptions + `
http://127.0.0.1:SITE {
	reverse_proxy UPSTREAM
}
`, "caddyfile", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			tc := loadCaddy(t, expand(c.config, upstream), c.configType)
			for _, k := range normalizeCases() {
				resp, _ := get(t, tc, "/"+k.status+"/x", "X-Send-Retry-After", k.retryAfter)
				// What the upstream sent, as the Normalizer sees it in ModifyResponse.
				status, _ := strconv.Atoi(k.status)
				sent := &http.Response{StatusCode: status, Header: http.Header{}}
				if k.retryAfter != "" {
					sent.Header.Set("Retry-After", k.retryAfter)
				}
				if c.norm == nil {
					if got := resp.Header.Get("Retry-After"); got != k.retryAfter {
						t.Errorf("%s %q without the directive: client got %q", k.status, k.retryAfter, got)
					}
					continue
				}
				// The upstream's Date, which reverse_proxy passed on, measured the date; the
				// client's Date is the gateway's clock.
				clientDate, err := http.ParseTime(resp.Header.Get("Date"))
				if err != nil {
					t.Fatalf("%s %q: Date %q", k.status, k.retryAfter, resp.Header.Get("Date"))
				}
				norm := c.norm()
				norm.Now = func() time.Time { return clientDate }
				sent.Header.Set("Date", resp.Header.Get("X-Upstream-Date"))
				_ = norm.ModifyResponse(sent)
				if got, want := resp.Header.Get("Retry-After"), sent.Header.Get("Retry-After"); got != want {
					t.Errorf("%s %q: client got Retry-After %q, the Normalizer makes %q", k.status, k.retryAfter, got, want)
				}
				if (status == 429 || status == 503) && sent.Header.Get("Retry-After") != "" {
					wantRefusal(t, resp, status, time.Hour)
				}
			}
		})
	}
}

// The upstream's Retry-After: 0 and the Date the client gets, by value, as the issue saw them.
func TestNormalizeRepairsZeroInCaddy(t *testing.T) {
	up := misbehavingUpstream(t)
	tc := loadCaddy(t, expand(globalOptions+`
http://127.0.0.1:SITE {
	retry_after_normalize
	reverse_proxy UPSTREAM
}
`, strings.TrimPrefix(up.URL, "http://")), "caddyfile")
	resp, _ := get(t, tc, "/429/x", "X-Send-Retry-After", "0")
	if got := resp.Header.Get("Retry-After"); got != "1" {
		t.Errorf("upstream's Retry-After 0: client got %q, want 1", got)
	}
	wantRefusal(t, resp, http.StatusTooManyRequests, time.Second)
}

// postLoad posts config to the admin endpoint's /load and returns the status and the answer,
// the error's text when it is one.
func postLoad(t *testing.T, config, contentType string) (int, string) {
	t.Helper()
	// A new connection each time: Caddy restarts its admin endpoint with each load, refused
	// ones included, and a kept-alive connection to the one before would answer EOF.
	// A connection made as the endpoint restarts can reach the listener being closed, which
	// resets it before reading the request: sent again, a load is the same load.
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
	var resp *http.Response
	var err error
	for try := 0; ; try++ {
		resp, err = client.Post(fmt.Sprintf("http://localhost:%d/load", adminPort), contentType, strings.NewReader(config))
		if err == nil || try == 10 || !(errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, io.EOF)) {
			break
		}
		time.Sleep(10 * time.Millisecond) // the endpoint, a real server's, is starting again
	}
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var answer struct{ Error string }
	if json.Unmarshal(body, &answer) == nil && answer.Error != "" {
		return resp.StatusCode, answer.Error
	}
	return resp.StatusCode, string(body)
}

// A configuration with a value the handlers cannot use is refused by Caddy's admin endpoint
// with an error that names the value, whether the Caddyfile adapter or Provision finds it, and
// the configuration running before keeps serving.
func TestBadConfigIsRefused(t *testing.T) {
	tc := loadCaddy(t, expand(limitCaddyfile, ""), "caddyfile")
	site := func(directive string) string {
		return expand(globalOptions+"http://127.0.0.1:SITE {\n"+directive+"\nrespond \"hello\"\n}\n", "")
	}
	route := func(handler string) string {
		return expand(`{"admin": {"listen": "localhost:ADMIN"}, "apps": {"http": {"servers": {"srv0": {
			"listen": ["127.0.0.1:SITE"], "automatic_https": {"disable": true},
			"routes": [{"handle": [`+handler+`]}]}}}}}`, "")
	}
	for _, c := range []struct{ config, contentType, want string }{
		{site("retry_after_limit {\n rate 1/d\n burst 5\n}"), "text/caddyfile", `retry_after_limit: rate "1/d": want N/s, N/m or N/h`},
		{site("retry_after_limit {\n rate 1/s\n}"), "text/caddyfile", "retry_after_limit: rate 1/s needs a burst"},
		{site("retry_after_limit {\n rate 1/s\n burst 5\n key {client_addr}\n}"), "text/caddyfile", "unrecognized placeholder {client_addr}"},
		{site("retry_after_limit {\n rate 1/s\n burst 0\n}"), "text/caddyfile", `retry_after_limit: burst "0"`},
		{site("retry_after_limit {\n rate 1/s\n burst 5\n sliding\n}"), "text/caddyfile", `unknown option "sliding"`},
		{site("retry_after_limit {\n maintenance tomorrow\n}"), "text/caddyfile", `maintenance until "tomorrow": want an RFC 3339 time`},
		{site("retry_after_normalize {\n max 10ms\n}"), "text/caddyfile", "retry_after_normalize: max 10ms: want a duration of at least 1s"},
		{site("retry_after_normalize {\n fallback 2h\n}"), "text/caddyfile", "fallback 2h0m0s is longer than max 1h0m0s"},
		{site("retry_after_normalize 5s"), "text/caddyfile", "retry_after_normalize takes no argument on its line"},
		{route(`{"handler": "retry_after_limit", "rate": "1/s", "burst": 0}`), "application/json", "retry_after_limit: rate 1/s needs a burst"},
		{route(`{"handler": "retry_after_limit", "rate": "1/s", "burst": 1, "key": "{client_addr}"}`), "application/json", "unrecognized placeholder {client_addr}"},
		{route(`{"handler": "retry_after_limit", "rate": "fast", "burst": 1}`), "application/json", `rate "fast"`},
		{route(`{"handler": "retry_after_limit", "rates": "1/s", "burst": 1}`), "application/json", `unknown field "rates"`},
		{route(`{"handler": "retry_after_limit", "rate": "1/s", "burst": 1, "rate_limit_fields": {"policy": "\u00e9"}}`), "application/json", "printable ASCII"},
		{route(`{"handler": "retry_after_normalize", "fallback": -5}`), "application/json", "fallback -5ns"},
	} {
		status, body := postLoad(t, c.config, c.contentType)
		if status != http.StatusBadRequest || !strings.Contains(body, c.want) {
			t.Errorf("loading\n%s\nanswered %d %s; want 400 saying %q", c.config, status, body, c.want)
		}
	}
	if resp, body := get(t, tc, "/"); resp.StatusCode != 200 || body != "hello" {
		t.Errorf("after the refused loads: %d %q, want the running configuration's 200 hello", resp.StatusCode, body)
	}
}

// Neither directive needs an order line: wherever they are written in a site, the Caddyfile
// adapter puts retry_after_limit before basic_auth, and retry_after_normalize after encode and
// before reverse_proxy.
func TestDirectivesNeedNoOrder(t *testing.T) {
	adapted, warnings, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(`http://127.0.0.1:8080 {
	reverse_proxy 127.0.0.1:8081
	basic_auth /admin {
		bob $2a$14$Zkx19XLiW6VYouLHR5NmfOFU0z2GTNmpkT/5qqR7hx4IjWJPDhjvG
	}
	retry_after_normalize
	encode
	retry_after_limit {
		rate 1/s
		burst 5
	}
}
`), nil)
	if err != nil || len(warnings) > 0 {
		t.Fatalf("adapting: %v %v", err, warnings)
	}
	var cfg struct {
		Apps struct {
			HTTP struct {
				Servers map[string]struct {
					Routes []struct {
						Handle []struct {
							Routes []struct {
								Handle []struct {
									Handler string `json:"handler"`
								} `json:"handle"`
							} `json:"routes"`
						} `json:"handle"`
					} `json:"routes"`
				} `json:"servers"`
			} `json:"http"`
		} `json:"apps"`
	}
	if err := json.Unmarshal(adapted, &cfg); err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, srv := range cfg.Apps.HTTP.Servers {
		for _, r := range srv.Routes {
			for _, sub := range r.Handle {
				for _, sr := range sub.Routes {
					for _, h := range sr.Handle {
						order = append(order, h.Handler)
					}
				}
			}
		}
	}
	want := []string{"retry_after_limit", "authentication", "encode", "retry_after_normalize", "reverse_proxy"}
	if !reflect.DeepEqual(order, want) {
		t.Fatalf("handlers in the order %v, want %v\n%s", order, want, adapted)
	}
}

// CORS headers set with the header directive, which runs before retry_after_limit, reach its
// 429, and the limiter exposes Retry-After and Date to the page.
func TestLimitRefusalReadableByAPage(t *testing.T) {
	tc := loadCaddy(t, expand(globalOptions+`
http://127.0.0.1:SITE {
	header Access-Control-Allow-Origin "https://app.example"
	retry_after_limit {
		rate  1/h
		burst 1
	}
	respond "hello"
}
`, ""), "caddyfile")
	get(t, tc, "/", "Origin", "https://app.example")
	resp, _ := get(t, tc, "/", "Origin", "https://app.example")
	wantRefusal(t, resp, http.StatusTooManyRequests, time.Hour)
	if got := resp.Header.Get("Access-Control-Allow-Origin"); got != "https://app.example" {
		t.Errorf("Access-Control-Allow-Origin %q on the 429", got)
	}
	exposed := strings.ToLower(strings.Join(resp.Header.Values("Access-Control-Expose-Headers"), ","))
	if !strings.Contains(exposed, "retry-after") || !strings.Contains(exposed, "date") {
		t.Errorf("Access-Control-Expose-Headers %q: want Retry-After and Date", exposed)
	}
}

// Every mistake in a retry_after_limit or retry_after_normalize of a Caddyfile fails its adaptation, as caddy adapt and
// caddy validate run it, with the file and line of the mistake, in one short sentence.
func TestMistakesHaveFileAndLine(t *testing.T) {
	for _, c := range []struct {
		block string // the directive, from line 2 of the file
		want  string // what the error starts with, after the adapter's prefix
		line  int
	}{
		{"retry_after_limit {\n\trate 1/s\n\tburst 5\n\tkey {client_addr}\n}", "retry_after_limit: key {client_addr}: unrecognized placeholder {client_addr}", 5},
		{"retry_after_limit {\n\trate 1/d\n\tburst 5\n}", `retry_after_limit: rate "1/d": want N/s, N/m or N/h`, 3},
		{"retry_after_limit {\n\trate 10/s\n}", "retry_after_limit: rate 10/s needs a burst, a whole number of at least 1", 2},
		{"retry_after_limit {\n\tburst 0\n}", `retry_after_limit: burst "0": want a whole number of at least 1`, 3},
		{"retry_after_limit {\n\tmaintenance 2026-12-01 {\n\t}\n}", `retry_after_limit: maintenance until "2026-12-01": want an RFC 3339 time`, 3},
		{"retry_after_limit {\n\trate 1/s\n\tburst 1\n\trate_limit_fields \"a\tb\"\n}", `retry_after_limit: rate_limit_fields policy "a\tb": want printable ASCII`, 5},
		{"retry_after_normalize {\n\tmax 10ms\n}", "retry_after_normalize: max 10ms: want a duration of at least 1s", 3},
		{"retry_after_normalize {\n\tfallback 2h\n}", "retry_after_normalize: fallback 2h0m0s is longer than max 1h0m0s", 2},
	} {
		src := "http://127.0.0.1:8080 {\n" + c.block + "\n\trespond \"hello\"\n}\n"
		_, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(src), map[string]any{"filename": "Caddyfile"})
		if err == nil {
			t.Errorf("%s: adapted, want an error", c.block)
			continue
		}
		msg := err.Error()
		_, mistake, _ := strings.Cut(msg, "': ")
		if !strings.HasPrefix(mistake, c.want) || !strings.HasSuffix(msg, fmt.Sprintf(", at Caddyfile:%d", c.line)) {
			t.Errorf("%s:\nerror %q\nwant %q at Caddyfile:%d", c.block, msg, c.want, c.line)
		}
		if len(mistake) > 140 || strings.Count(mistake, ": ") > 3 {
			t.Errorf("%s: %q is not one short sentence", c.block, mistake)
		}
	}
}

// A client at its limit stays refused across a reload through the admin endpoint of a
// configuration that changed elsewhere (another site's rate), and across one that raises the
// rate it gets the new rate's wait at once; the limit that was removed is forgotten.
func TestLimitCountsSurviveAReload(t *testing.T) {
	config := func(rate, other string) string {
		return expand(globalOptions+`
http://127.0.0.1:SITE {
	retry_after_limit {
		name  site
		rate  `+rate+`
		burst 2
	}
	respond "hello"
}

http://127.0.0.1:UPSTREAM {
	retry_after_limit {
		rate  `+other+`
		burst 5
	}
	respond "other"
}
`, strconv.Itoa(freePort()))
	}
	tc := loadCaddy(t, config("1/h", "1/s"), "caddyfile")
	for range 2 {
		get(t, tc, "/")
	}
	resp, _ := get(t, tc, "/")
	wantRefusal(t, resp, http.StatusTooManyRequests, time.Hour)
	if n, _ := buckets.References("name site"); n != 1 {
		t.Fatalf("%d references to the site's buckets, want 1", n)
	}

	if status, body := postLoad(t, config("1/h", "2/s"), "text/caddyfile"); status != http.StatusOK {
		t.Fatalf("reload: %d %s", status, body)
	}
	resp, _ = get(t, tc, "/")
	if wait := wantRefusal(t, resp, http.StatusTooManyRequests, time.Hour); wait < 59*time.Minute {
		t.Errorf("after a reload of another site's rate: Retry-After %v, want the hour's wait it had", wait)
	}

	if status, body := postLoad(t, config("1/s", "2/s"), "text/caddyfile"); status != http.StatusOK {
		t.Fatalf("reload: %d %s", status, body)
	}
	resp, _ = get(t, tc, "/")
	if wait := wantRefusal(t, resp, http.StatusTooManyRequests, time.Hour); wait != time.Second {
		t.Errorf("after a reload raising the rate to 1/s: Retry-After %v, want 1s", wait)
	}
}

// The admin endpoint's /retry-after/maintenance/<name> turns a maintenance_switch of a running
// Caddy on and off, without a reload.
func TestMaintenanceSwitchInCaddy(t *testing.T) {
	tc := loadCaddy(t, expand(globalOptions+`
http://127.0.0.1:SITE {
	retry_after_limit {
		maintenance_switch ops
	}
	respond "hello"
}
`, ""), "caddyfile")
	send := func(method string) int {
		req, _ := http.NewRequest(method, fmt.Sprintf("http://localhost:%d/retry-after/maintenance/ops", adminPort), strings.NewReader(`{"until": "2099-01-01T00:00:00Z"}`))
		req.Close = true
		resp, err := tc.Client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if resp, _ := get(t, tc, "/"); resp.StatusCode != 200 {
		t.Fatalf("switch off: %d", resp.StatusCode)
	}
	if code := send("POST"); code != 200 {
		t.Fatalf("POST: %d", code)
	}
	resp, _ := get(t, tc, "/")
	wantRefusal(t, resp, http.StatusServiceUnavailable, 100*365*24*time.Hour)
	if code := send("DELETE"); code != 200 {
		t.Fatalf("DELETE: %d", code)
	}
	if resp, _ := get(t, tc, "/"); resp.StatusCode != 200 {
		t.Errorf("switched off: %d", resp.StatusCode)
	}
}

// The Caddyfile names each limit that has no name by its key and its place among the limits
// of that key, so that two sites importing one snippet keep buckets of their own.
func TestCaddyfileNamesEveryLimit(t *testing.T) {
	adapted, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(`(limited) {
	retry_after_limit {
		rate 1/s
		burst 5
	}
}

http://127.0.0.1:8080 {
	import limited
	retry_after_limit /api/* {
		rate 1/s
		burst 5
		key {header.X-Api-Key}
	}
	respond "a"
}

http://127.0.0.1:8081 {
	import limited
	retry_after_limit /named {
		name mine
		rate 1/s
		burst 5
	}
	retry_after_limit /down {
		maintenance
	}
	respond "b"
}
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	var cfg any
	if err := json.Unmarshal(adapted, &cfg); err != nil {
		t.Fatal(err)
	}
	var names []string
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if v["handler"] == "retry_after_limit" {
				name, _ := v["name"].(string)
				names = append(names, name)
			}
			for _, e := range v {
				walk(e)
			}
		case []any:
			for _, e := range v {
				walk(e)
			}
		}
	}
	walk(cfg)
	sort.Strings(names)
	want := []string{"", "mine", "{client address} #1", "{client address} #2", "{http.request.header.X-Api-Key} #1"}
	if !reflect.DeepEqual(names, want) {
		t.Errorf("names %q, want %q\n%s", names, want, adapted)
	}
}
