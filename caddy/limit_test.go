package retryaftercaddy

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	"golang.org/x/time/rate"

	"github.com/retryafter/retryafter"
	"github.com/retryafter/retryafter/internal/testkit"
)

// The central property, through the Caddy handler: a client that waits exactly the Retry-After
// of a 429 and retries is admitted, and one that retries a second earlier is not, for every
// rate form and arrival pattern.
func TestLimitRoundTrip(t *testing.T) {
	for _, c := range []struct {
		rate  string
		burst int
		every time.Duration // the refill interval, which scales the arrivals
	}{
		{"1/s", 1, time.Second},
		{"5/s", 3, 200 * time.Millisecond},
		{"12/m", 2, 5 * time.Second},
		{"7/h", 4, time.Hour / 7},
		{"1000/s", 10, time.Millisecond},
	} {
		t.Run(c.rate, func(t *testing.T) {
			clk := testkit.NewClock(testkit.T0)
			h := &Limit{Rate: c.rate, Burst: c.burst, now: clk.Now}
			provision(t, h)
			rng := rand.New(rand.NewPCG(1, uint64(c.burst)))
			refusals := testkit.RoundTrip(t, inCaddy(h), clk, 300, func() time.Duration {
				return time.Duration(rng.Int64N(int64(2 * c.every)))
			})
			if refusals == 0 {
				t.Fatal("no request was refused: the property was not exercised")
			}
		})
	}
}

// caddyRequest returns a request from remote as a Caddy server with no trusted proxies hands
// it to its handlers.
func caddyRequest(remote string, srv *caddyhttp.Server) *http.Request {
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = remote
	return caddyhttp.PrepareRequest(r, caddy.NewReplacer(), nil, srv)
}

// The default key is Caddy's client_ip keyed as retryafter.ClientIP keys the same address.
func TestDefaultKeyIsClientIPs(t *testing.T) {
	h := &Limit{Rate: "1/s", Burst: 1}
	provision(t, h)
	root := retryafter.ClientIP()
	remotes := []string{
		"192.0.2.1:1234", "203.0.113.255:1", "[2001:db8:1:2:3:4:5:6]:443", "[2001:db8::1]:80",
		"[::ffff:192.0.2.9]:1", "[fe80::1%eth0]:1", "[::1]:5", "127.0.0.1:9",
	}
	rng := rand.New(rand.NewPCG(2, 3))
	for range 200 {
		var b [16]byte
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		a := netip.AddrFrom16(b)
		if rng.IntN(2) == 0 {
			a = netip.AddrFrom4([4]byte(b[:4]))
		}
		remotes = append(remotes, netip.AddrPortFrom(a, 1).String())
	}
	for _, remote := range remotes {
		r := caddyRequest(remote, new(caddyhttp.Server))
		got, err := h.clientIPKey(r)
		if err != nil {
			t.Fatalf("%s: %v", remote, err)
		}
		plain := httptest.NewRequest("GET", "/", nil)
		plain.RemoteAddr = remote
		want, err := root(plain)
		if err != nil {
			t.Fatalf("%s: retryafter.ClientIP: %v", remote, err)
		}
		if got != want {
			t.Errorf("%s: key %q, retryafter.ClientIP's %q", remote, got, want)
		}
	}

	// Without a client_ip, as for a Unix socket that Caddy does not trust, there is no key.
	r := caddyRequest("@", new(caddyhttp.Server))
	if _, err := h.clientIPKey(r); err == nil || !strings.Contains(err.Error(), "no client IP") {
		t.Fatalf("a request without client_ip: err = %v, want retryafter.ErrNoClientIP", err)
	}
}

// An IPv6 client is counted by its /64, so that it cannot get a fresh bucket by changing the
// address's last 64 bits.
func TestDefaultKeyCountsAnIPv6ClientByItsPrefix(t *testing.T) {
	clk := testkit.NewClock(testkit.T0)
	h := &Limit{Rate: "1/h", Burst: 1, now: clk.Now}
	provision(t, h)
	hh := inCaddy(h)
	for _, c := range []struct {
		remote string
		want   int
	}{
		{"[2001:db8:1:2::1]:1", 200},
		{"[2001:db8:1:2:ffff:ffff:ffff:ffff]:2", 429},
		{"[2001:db8:1:3::1]:1", 200},
		{"192.0.2.1:1", 200},
		{"192.0.2.2:1", 200},
		{"192.0.2.1:2", 429},
	} {
		if w := testkit.Serve(hh, "GET", c.remote); w.Code != c.want {
			t.Errorf("%s: status %d, want %d", c.remote, w.Code, c.want)
		}
	}
}

// A key with placeholders counts each value apart; a key that comes out empty is one key of
// its own, shared by every such request, which logs one warning however many requests come,
// and never an error or a 500.
func TestPlaceholderKey(t *testing.T) {
	clk := testkit.NewClock(testkit.T0)
	h := &Limit{Rate: "1/h", Burst: 2, Key: "{http.request.header.X-Api-Key}", now: clk.Now}
	provision(t, h)
	core, logs := observer.New(zap.DebugLevel)
	h.logger = zap.New(core)
	hh := inCaddy(h)
	send := func(key string) int {
		r := httptest.NewRequest("GET", "/", nil)
		if key != "" {
			r.Header.Set("X-Api-Key", key)
		}
		w := httptest.NewRecorder()
		hh.ServeHTTP(w, r)
		return w.Code
	}
	for i, c := range []struct {
		key  string
		want int
	}{{"a", 200}, {"a", 200}, {"a", 429}, {"b", 200}, {"", 200}, {"", 200}, {"", 429}, {"b", 200}, {"b", 429}} {
		if got := send(c.key); got != c.want {
			t.Errorf("request %d with key %q: status %d, want %d", i, c.key, got, c.want)
		}
	}
	for i := range 100 {
		if got := send(""); got != http.StatusTooManyRequests {
			t.Fatalf("empty key, request %d: status %d, want 429", i, got)
		}
	}
	if all := logs.All(); len(all) != 1 || all[0].Level != zap.WarnLevel || !strings.Contains(all[0].Message, "key is empty") {
		t.Errorf("logged %v, want one warning of the empty key", all)
	}

	// A key without placeholders is one bucket for every client.
	global := &Limit{Rate: "1/h", Burst: 1, Key: "everyone", now: clk.Now}
	provision(t, global)
	hg := inCaddy(global)
	if a, b := testkit.Serve(hg, "GET", "192.0.2.1:1").Code, testkit.Serve(hg, "GET", "192.0.2.2:1").Code; a != 200 || b != 429 {
		t.Errorf("a constant key: statuses %d and %d, want 200 and 429", a, b)
	}
}

// A warning is logged once when the client address comes from the left-most X-Forwarded-For
// entry of a trusted proxy (the server is not in trusted_proxies_strict mode), and not in
// strict mode.
func TestWarnsOfTheLeftmostClientIP(t *testing.T) {
	for _, strict := range []int{0, 1} {
		h := &Limit{Rate: "1/s", Burst: 100}
		provision(t, h)
		core, logs := observer.New(zap.DebugLevel)
		h.logger = zap.New(core)
		srv := &caddyhttp.Server{TrustedProxiesStrict: strict}
		for range 3 {
			r := caddyRequest("192.0.2.1:1", srv)
			caddyhttp.SetVar(r.Context(), caddyhttp.TrustedProxyVarKey, true)
			w := httptest.NewRecorder()
			if err := h.ServeHTTP(w, r, caddyhttp.HandlerFunc(func(http.ResponseWriter, *http.Request) error { return nil })); err != nil {
				t.Fatal(err)
			}
		}
		want := 1
		if strict > 0 {
			want = 0
		}
		if n := logs.FilterMessageSnippet("left-most X-Forwarded-For").Len(); n != want {
			t.Errorf("trusted_proxies_strict %d: %d warnings, want %d", strict, n, want)
		}
	}
}

// Maintenance answers 503 with a Retry-After counting down to its end on the injected clock,
// before the limiter, and with no rate it is the whole handler.
func TestLimitMaintenance(t *testing.T) {
	until := testkit.T0.Add(90 * time.Second)
	for _, c := range []struct {
		name string
		h    Limit
		at   time.Duration // after T0
		want time.Duration // the Retry-After
	}{
		{"until", Limit{Rate: "1/s", Burst: 1, Maintenance: &Maintenance{Until: until.Format(time.RFC3339)}}, 0, 90 * time.Second},
		{"until, no limiter", Limit{Maintenance: &Maintenance{Until: until.Format(time.RFC3339)}}, 30 * time.Second, 60 * time.Second},
		{"overrun, hold", Limit{Maintenance: &Maintenance{Until: until.Format(time.RFC3339), Hold: true}}, 100 * time.Second, 10 * time.Second},
		{"overrun, hold, capped by wait", Limit{Maintenance: &Maintenance{Until: until.Format(time.RFC3339), Hold: true, Wait: caddy.Duration(4 * time.Second)}}, 100 * time.Second, 4 * time.Second},
		{"unknown end", Limit{Maintenance: &Maintenance{}}, 0, time.Minute},
		{"unknown end, wait", Limit{Maintenance: &Maintenance{Wait: caddy.Duration(2 * time.Minute)}}, 0, 2 * time.Minute},
		{"http_date", Limit{Maintenance: &Maintenance{Until: until.Format(time.RFC3339), HTTPDate: true}}, 0, 90 * time.Second},
	} {
		t.Run(c.name, func(t *testing.T) {
			clk := testkit.NewClock(testkit.T0.Add(c.at))
			h := c.h
			h.now = clk.Now
			provision(t, &h)
			hh := inCaddy(&h)
			for range 3 {
				w := testkit.Serve(hh, "GET", "192.0.2.1:1")
				if got := testkit.WantRefusal(t, w, http.StatusServiceUnavailable, clk.Now()); got != c.want {
					t.Fatalf("Retry-After %q, a wait of %v; want %v", w.Header().Get("Retry-After"), got, c.want)
				}
				_, date := time.Parse(http.TimeFormat, w.Header().Get("Retry-After"))
				if (date == nil) != c.h.Maintenance.HTTPDate {
					t.Fatalf("Retry-After %q, http_date %v", w.Header().Get("Retry-After"), c.h.Maintenance.HTTPDate)
				}
			}
		})
	}
}

// Maintenance with an until ends at until by itself: a client that waits the Retry-After of
// the 503 and comes back is passed to the next handler, on its first retry. With hold it stays
// on past until, and a past until is logged at load.
func TestLimitMaintenanceEndsAtUntil(t *testing.T) {
	for _, hold := range []bool{false, true} {
		clk := testkit.NewClock(testkit.T0)
		until := testkit.T0.Add(3 * time.Second)
		h := &Limit{Maintenance: &Maintenance{Until: until.Format(time.RFC3339), Hold: hold}, now: clk.Now}
		provision(t, h)
		clk.Advance(400 * time.Millisecond)
		w := testkit.Serve(inCaddy(h), "GET", "192.0.2.1:1")
		wait := testkit.WantRefusal(t, w, http.StatusServiceUnavailable, clk.Now())
		if wait != 3*time.Second {
			t.Fatalf("hold %v: Retry-After %v, want 3s", hold, wait)
		}
		clk.Advance(wait)
		w = testkit.Serve(inCaddy(h), "GET", "192.0.2.1:1")
		if !hold && (w.Code != http.StatusOK || w.Body.String() != "next") {
			t.Errorf("after until: %d %q, want the next handler's 200", w.Code, w.Body.String())
		}
		if hold && w.Code != http.StatusServiceUnavailable {
			t.Errorf("after until, with hold: %d, want 503", w.Code)
		}

		// Loaded after until: over at once, or held; either is a warning at load.
		late := &Limit{Maintenance: &Maintenance{Until: until.Format(time.RFC3339), Hold: hold}, now: clk.Now}
		provision(t, late)
		core, logs := observer.New(zap.DebugLevel)
		late.logger = zap.New(core)
		late.warnPastUntil()
		want := "the window is over"
		if hold {
			want = "hold is set"
		}
		if all := logs.All(); len(all) != 1 || !strings.Contains(all[0].Message, want) {
			t.Errorf("hold %v, loaded after until: logged %v, want one warning saying %q", hold, all, want)
		}
	}
}

// rate_limit_fields and legacy_rate_limit_fields send the root package's fields with the
// configured policy name, on admitted and refused responses alike, and nothing is sent
// without them.
func TestLimitRateLimitFields(t *testing.T) {
	for _, c := range []struct {
		name           string
		fields         *RateLimitFields
		legacy         bool
		policy, limitX string // want; "" means absent
	}{
		{"none", nil, false, "", ""},
		{"default policy", &RateLimitFields{}, false, `"default";q=3;w=3`, ""},
		{"named policy", &RateLimitFields{Policy: "api"}, false, `"api";q=3;w=3`, ""},
		{"both", &RateLimitFields{Policy: "api"}, true, `"api";q=3;w=3`, "3"},
		{"legacy alone", nil, true, "", "3"},
	} {
		t.Run(c.name, func(t *testing.T) {
			clk := testkit.NewClock(testkit.T0)
			h := &Limit{Rate: "1/s", Burst: 3, RateLimitFields: c.fields, LegacyRateLimitFields: c.legacy, now: clk.Now}
			provision(t, h)
			hh := inCaddy(h)
			for i := range 4 {
				w := testkit.Serve(hh, "GET", "192.0.2.1:1")
				if want := map[bool]int{true: 429, false: 200}[i == 3]; w.Code != want {
					t.Fatalf("request %d: status %d, want %d", i, w.Code, want)
				}
				if got := w.Header().Get("RateLimit-Policy"); got != c.policy {
					t.Errorf("request %d: RateLimit-Policy %q, want %q", i, got, c.policy)
				}
				if got := w.Header().Get("X-RateLimit-Limit"); got != c.limitX {
					t.Errorf("request %d: X-RateLimit-Limit %q, want %q", i, got, c.limitX)
				}
				if (w.Header().Get("RateLimit") != "") != (c.policy != "") {
					t.Errorf("request %d: RateLimit %q with RateLimit-Policy %q", i, w.Header().Get("RateLimit"), c.policy)
				}
			}
		})
	}
}

func TestParseRate(t *testing.T) {
	for _, c := range []struct {
		in   string
		want rate.Limit
	}{
		{"1/s", 1}, {"12/m", 0.2}, {"7200/h", 2}, {"1000000000/s", 1e9}, {"1/h", 1.0 / 3600}, {"007/s", 7},
	} {
		got, err := parseRate(c.in)
		if err != nil || got != c.want {
			t.Errorf("parseRate(%q) = %v, %v; want %v", c.in, got, err, c.want)
		}
	}
	for _, in := range []string{
		"", "0/s", "-1/s", "+1/s", "1/d", "1", "1/", "/s", "1.5/s", "1e3/s", "1000000001/s",
		" 1/s", "1/s ", "1/S", "1/sec", "abc", "1//s", "1/s/s", "18446744073709551616/s",
	} {
		got, err := parseRate(in)
		if err == nil {
			t.Errorf("parseRate(%q) = %v, want an error", in, got)
		} else if !strings.Contains(err.Error(), "N/s, N/m or N/h") {
			t.Errorf("parseRate(%q): %v, want an error saying the form", in, err)
		}
	}
	// Every N and unit reads as N per that unit.
	rng := rand.New(rand.NewPCG(4, 5))
	for range 1000 {
		n := 1 + rng.Int64N(maxRateCount)
		unit, per := []string{"s", "m", "h"}[n%3], []float64{1, 60, 3600}[n%3]
		if got, err := parseRate(fmt.Sprintf("%d/%s", n, unit)); err != nil || got != rate.Limit(float64(n)/per) {
			t.Fatalf("parseRate(%d/%s) = %v, %v; want %v", n, unit, got, err, float64(n)/per)
		}
	}
}

// Every configuration Provision cannot use is an error that names the field, never a panic.
func TestLimitProvisionErrors(t *testing.T) {
	for _, c := range []struct{ json, want string }{
		{`{}`, "no rate"},
		{`{"burst":5}`, "no rate"},
		{`{"rate":"1/s"}`, "rate 1/s needs a burst"},
		{`{"rate":"1/s","burst":1,"key":"{client_addr}"}`, "unrecognized placeholder {client_addr}"},
		{`{"rate":"1/s","burst":1,"key":"{http.request.header.X}-{ip}"}`, "unrecognized placeholder {ip}"},
		{`{"rate":"1/s","burst":-1}`, "burst -1"},
		{`{"rate":"0/s","burst":1}`, `rate "0/s"`},
		{`{"rate":"1/d","burst":1}`, `rate "1/d"`},
		{`{"rate":"1/s","burst":1,"rate_limit_fields":{"policy":"caf\u00e9"}}`, "printable ASCII"},
		{`{"rate":"1/s","burst":1,"rate_limit_fields":{"policy":"a\nb"}}`, "printable ASCII"},
		{`{"maintenance":{"until":"tomorrow"}}`, "RFC 3339"},
		{`{"maintenance":{"until":"2026-12-01 22:00:00"}}`, "RFC 3339"},
		{`{"maintenance":{"wait":-1}}`, "maintenance wait"},
		{`{"maintenance":{},"key":"{http.vars.client_ip}"}`, "need a rate and a burst"},
		{`{"maintenance":{},"legacy_rate_limit_fields":true}`, "need a rate and a burst"},
		{`{"maintenance":{},"burst":3}`, "no rate"},
		{`{"maintenance":{},"rate":"1/s"}`, "needs a burst"},
		{`{"maintenance":{},"maintenance_switch":"ops"}`, "maintenance and maintenance_switch: use one"},
		{`{"maintenance_switch":"ops","key":"{http.vars.client_ip}"}`, "no rate"},
		{`{"maintenance":{"until":"0001-01-01T00:00:00Z"}}`, "zero time"},
		{`{"maintenance":{"until":"0000-12-31T23:00:00-01:00","hold":true}}`, "zero time"},
	} {
		h := fromJSON[Limit](t, c.json)
		err := provisionErr(t, h)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Provision error %v, want one saying %q", c.json, err, c.want)
		}
	}
	for _, ok := range []string{
		`{"rate":"1/s","burst":1}`,
		`{"maintenance":{}}`,
		`{"rate":"1/s","burst":1,"maintenance":{"until":"2026-12-01T22:00:00+01:00","wait":"90s","http_date":true}}`,
		`{"rate":"5/m","burst":2,"key":"{http.request.header.X-Api-Key}","rate_limit_fields":{},"legacy_rate_limit_fields":true}`,
		`{"rate":"5/m","burst":2,"key":"{http.regexp.tenant.1}-{http.auth.user.id}-{http.vars.client_ip}-{env.HOME}"}`,
		`{"name":"api","rate":"1/h","burst":1,"maintenance":{"until":"2026-12-01T22:00:00Z","hold":true}}`,
	} {
		if err := provisionErr(t, fromJSON[Limit](t, ok)); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
}

func TestLimitCaddyfile(t *testing.T) {
	for _, c := range []struct{ src, json string }{
		{"retry_after_limit {\n rate 1/s\n burst 5\n}", `{"rate":"1/s","burst":5}`},
		{`retry_after_limit {
			name  api
			rate  12/m
			burst 3
			key   {http.request.header.X-Api-Key}
			rate_limit_fields api
			legacy_rate_limit_fields
			maintenance 2026-12-01T22:00:00Z {
				wait 2m
				http_date
				hold
			}
		}`, `{"name":"api","rate":"12/m","burst":3,"key":"{http.request.header.X-Api-Key}","rate_limit_fields":{"policy":"api"},` +
			`"legacy_rate_limit_fields":true,"maintenance":{"until":"2026-12-01T22:00:00Z","hold":true,"wait":120000000000,"http_date":true}}`},
		{"retry_after_limit {\n rate 1/s\n burst 1\n rate_limit_fields\n maintenance\n}", `{"rate":"1/s","burst":1,"rate_limit_fields":{},"maintenance":{}}`},
		{"retry_after_limit {\n maintenance {\n wait 30s\n }\n}", `{"maintenance":{"wait":30000000000}}`},
		{"retry_after_limit {\n maintenance_switch ops\n}", `{"maintenance_switch":"ops"}`},
	} {
		var h Limit
		if err := fromCaddyfile(c.src, &h); err != nil {
			t.Errorf("%s: %v", c.src, err)
			continue
		}
		if got := toJSON(h); got != c.json {
			t.Errorf("%s:\n got %s\nwant %s", c.src, got, c.json)
		}
	}
	for _, c := range []struct{ src, want string }{
		{"retry_after_limit 1/s", "no argument on its line"},
		{"retry_after_limit {\n rate\n}", "rate takes one value"},
		{"retry_after_limit {\n rate 1/s 2\n}", "rate takes one value"},
		{"retry_after_limit {\n key\n}", "key takes one value"},
		{"retry_after_limit {\n burst many\n}", `burst "many"`},
		{"retry_after_limit {\n burst 0\n}", `burst "0"`},
		{"retry_after_limit {\n burst\n}", "burst takes one value"},
		{"retry_after_limit {\n rate 1/s\n rate 2/s\n}", "rate given twice"},
		{"retry_after_limit {\n rat 1/s\n}", `unknown option "rat"`},
		{"retry_after_limit {\n legacy_rate_limit_fields yes\n}", "takes no value"},
		{"retry_after_limit {\n rate_limit_fields a b\n}", "at most one policy"},
		{"retry_after_limit {\n maintenance a b\n}", "at most one value"},
		{"retry_after_limit {\n maintenance {\n wait 0s\n }\n}", `wait "0s"`},
		{"retry_after_limit {\n maintenance {\n wait soon\n }\n}", `wait "soon"`},
		{"retry_after_limit {\n maintenance {\n wait\n }\n}", "wait takes one duration"},
		{"retry_after_limit {\n maintenance {\n wait 1m\n wait 2m\n }\n}", "wait given twice"},
		{"retry_after_limit {\n maintenance {\n http_date yes\n }\n}", "takes no value"},
		{"retry_after_limit {\n maintenance {\n hold yes\n }\n}", "takes no value"},
		{"retry_after_limit {\n rate 1/s\n}", "rate 1/s needs a burst, a whole number of at least 1, at Testfile:1"},
		{"retry_after_limit {\n burst 3\n}", "no rate"},
		{"retry_after_limit {\n rate 1/d\n burst 3\n}", `rate "1/d": want N/s, N/m or N/h`},
		{"retry_after_limit {\n rate 1/s\n burst 3\n\n key {client_addr}\n}", "unrecognized placeholder {client_addr}, at Testfile:5"},
		{"retry_after_limit {\n maintenance tomorrow\n}", `until "tomorrow"`},
		{"retry_after_limit {\n maintenance 0001-01-01T00:00:00Z\n}", "zero time"},
		{"retry_after_limit {\n rate 1/s\n burst 3\n rate_limit_fields caf\u00e9\n}", "printable ASCII"},
		{"retry_after_limit {\n maintenance {\n until 2026-12-01T22:00:00Z\n }\n}", `unknown maintenance option "until"`},
	} {
		var h Limit
		err := fromCaddyfile(c.src, &h)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want one saying %q", c.src, err, c.want)
		}
	}
}

// A CORS header set after the limiter, as an upstream behind reverse_proxy may set it, is
// reported once as a warning that says where to set it, not as a request that was not counted.
func TestLimitReportsCORSSetAfterIt(t *testing.T) {
	h := &Limit{Rate: "1/s", Burst: 100}
	provision(t, h)
	core, logs := observer.New(zap.DebugLevel)
	h.logger = zap.New(core)
	for range 3 {
		r := caddyRequest("192.0.2.1:1", new(caddyhttp.Server))
		r.Header.Set("Origin", "https://app.example")
		w := httptest.NewRecorder()
		if err := h.ServeHTTP(w, r, caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
			w.Header().Set("Access-Control-Allow-Origin", "*")
			return nil
		})); err != nil {
			t.Fatal(err)
		}
	}
	all := logs.All()
	if len(all) != 1 || all[0].Level != zap.WarnLevel || !strings.Contains(all[0].Message, "header directive") {
		t.Fatalf("logged %v, want one warning naming the header directive", all)
	}
}
