package retryaftercaddy

import (
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"
	"golang.org/x/time/rate"

	"github.com/retryafter/retryafter"
)

func init() {
	caddy.RegisterModule(Limit{})
	httpcaddyfile.RegisterHandlerDirective("retry_after_limit", parseLimit)
	// Before basic_auth: a request is counted before any work is done for it, the guesses of a
	// password included, and the refusal is written before encode or templates wrap the writer.
	httpcaddyfile.RegisterDirectiveOrder("retry_after_limit", httpcaddyfile.Before, "basic_auth")
}

// Limit is the retry_after_limit handler: it limits requests per key with a
// [retryafter.TokenBucket] and answers a request over its limit with 429 Too Many Requests, a
// Retry-After in delay-seconds rounded up from the bucket's own wait, and a Date from the same
// clock reading. With Maintenance set it answers 503 Service Unavailable instead, before the
// limiter counts the request.
//
// Rate and Burst are required, unless Maintenance is set, in which case both may be left out
// together to have no limiter at all. The buckets live in memory and start afresh when the
// configuration is loaded again.
type Limit struct {
	// Rate is how fast a key's bucket refills, as "N/s", "N/m" or "N/h": N requests a second,
	// a minute or an hour, with N a whole number from 1 to 1,000,000,000.
	Rate string `json:"rate,omitempty"`

	// Burst is how many requests a key may make at once, from a full bucket: at least 1.
	Burst int `json:"burst,omitempty"`

	// Key is what a request is counted against, with placeholders replaced: the Caddyfile's
	// {client_ip} is {http.vars.client_ip}, a header is {http.request.header.X-Api-Key}. A
	// request whose key comes out empty, or that names an unknown placeholder, is answered 500
	// and logged. If empty, the default is the client address that Caddy found (after its
	// trusted_proxies), keyed as [retryafter.ClientIP] keys it: an IPv4 client by its address,
	// an IPv6 client by its /64 (where {client_ip} in a Key is the whole address).
	Key string `json:"key,omitempty"`

	// RateLimitFields, if not nil, sends the RateLimit and RateLimit-Policy fields on every
	// response the limiter decides (see [retryafter.WithRateLimitFields]).
	RateLimitFields *RateLimitFields `json:"rate_limit_fields,omitempty"`

	// LegacyRateLimitFields also sends X-RateLimit-Limit, X-RateLimit-Remaining and
	// X-RateLimit-Reset, in delay-seconds (see [retryafter.WithLegacyRateLimitFields]).
	LegacyRateLimitFields bool `json:"legacy_rate_limit_fields,omitempty"`

	// Maintenance, if not nil, turns maintenance on: every request is answered 503 with a
	// Retry-After counting down to its end (see [retryafter.Maintenance]). Load a configuration
	// without it to turn maintenance off.
	Maintenance *Maintenance `json:"maintenance,omitempty"`

	now        func() time.Time // the clock; nil means time.Now (tests set it)
	limit      *retryafter.Middleware
	maint      *retryafter.Maintenance
	logger     *zap.Logger
	warnLeftXF *sync.Once // set by Provision
}

// RateLimitFields configures the RateLimit and RateLimit-Policy fields.
type RateLimitFields struct {
	// Policy is the policy name the fields carry: printable ASCII. If empty, the default is
	// "default".
	Policy string `json:"policy,omitempty"`
}

// Maintenance configures the 503 answer of a maintenance window.
type Maintenance struct {
	// Until is the announced end of the work, in RFC 3339 ("2026-12-01T22:00:00Z"). If empty,
	// the end is unknown and Retry-After is Wait. A time already past means the work overruns
	// its announced end: Retry-After is then how late it is, from 1 second up to Wait.
	Until string `json:"until,omitempty"`

	// Wait is the Retry-After when the end is unknown, and the longest one during an overrun.
	// If zero, the default is 1 minute.
	Wait caddy.Duration `json:"wait,omitempty"`

	// HTTPDate states Retry-After as an HTTP-date rather than in delay-seconds.
	HTTPDate bool `json:"http_date,omitempty"`
}

// CaddyModule returns the Caddy module information.
func (Limit) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.retry_after_limit",
		New: func() caddy.Module { return new(Limit) },
	}
}

// maxRateCount is the largest N of a rate "N/s": far above what one Caddy serves, it turns a
// slip of the keyboard into an error rather than a limit that never refuses.
const maxRateCount = 1_000_000_000

// Provision checks the configuration and builds the limiter and the maintenance switch. It
// returns an error, naming the field, for any value it cannot use.
func (h *Limit) Provision(ctx caddy.Context) (err error) {
	h.logger = ctx.Logger()
	h.warnLeftXF = new(sync.Once)
	defer func() {
		// Every value is checked below before it reaches a constructor that would panic; this
		// keeps a panic the checks missed from taking down the configuration load.
		if p := recover(); p != nil {
			err = fmt.Errorf("retry_after_limit: %v", p)
		}
	}()
	if h.Maintenance != nil {
		m, err := h.Maintenance.build()
		if err != nil {
			return err
		}
		m.Now = h.now
		h.maint = m
	}
	if h.Rate == "" && h.Burst == 0 && h.Maintenance != nil {
		if h.Key != "" || h.RateLimitFields != nil || h.LegacyRateLimitFields {
			return fmt.Errorf("retry_after_limit: key and the rate-limit fields need a rate and a burst")
		}
		return nil
	}
	limit, err := parseRate(h.Rate)
	if err != nil {
		return err
	}
	if h.Burst < 1 {
		return fmt.Errorf("retry_after_limit: burst %d: want a whole number of at least 1", h.Burst)
	}
	opts := []retryafter.Option{
		retryafter.WithErrorHook(h.logError),
		retryafter.WithKeyFunc(h.clientIPKey),
	}
	if h.Key != "" {
		opts[1] = retryafter.WithKeyFunc(h.placeholderKey)
	}
	if h.now != nil {
		opts = append(opts, retryafter.WithClock(h.now))
	}
	if f := h.RateLimitFields; f != nil {
		for i := 0; i < len(f.Policy); i++ {
			if f.Policy[i] < 0x20 || f.Policy[i] > 0x7e {
				return fmt.Errorf("retry_after_limit: rate_limit_fields policy %q: want printable ASCII", f.Policy)
			}
		}
		opts = append(opts, retryafter.WithRateLimitFields(f.Policy))
	}
	if h.LegacyRateLimitFields {
		opts = append(opts, retryafter.WithLegacyRateLimitFields(true))
	}
	h.limit = retryafter.NewMiddleware(retryafter.NewTokenBucket(limit, h.Burst), opts...)
	return nil
}

// build returns the maintenance switch m describes, turned on.
func (m *Maintenance) build() (*retryafter.Maintenance, error) {
	var until time.Time
	if m.Until != "" {
		t, err := time.Parse(time.RFC3339, m.Until)
		if err != nil {
			return nil, fmt.Errorf("retry_after_limit: maintenance until %q: want an RFC 3339 time such as 2026-12-01T22:00:00Z", m.Until)
		}
		until = t
	}
	if m.Wait < 0 {
		return nil, fmt.Errorf("retry_after_limit: maintenance wait %v: want a duration above 0", time.Duration(m.Wait))
	}
	mt := &retryafter.Maintenance{HTTPDate: m.HTTPDate, Wait: time.Duration(m.Wait)}
	mt.Start(until)
	return mt, nil
}

// parseRate reads "N/s", "N/m" or "N/h" as a rate per second.
func parseRate(s string) (rate.Limit, error) {
	count, unit, ok := strings.Cut(s, "/")
	n, err := strconv.ParseUint(count, 10, 64)
	var per float64
	switch unit {
	case "s":
		per = 1
	case "m":
		per = 60
	case "h":
		per = 3600
	}
	if s == "" {
		return 0, fmt.Errorf("retry_after_limit: no rate: want N/s, N/m or N/h")
	}
	if !ok || err != nil || per == 0 || n < 1 || n > maxRateCount {
		return 0, fmt.Errorf("retry_after_limit: rate %q: want N/s, N/m or N/h, with N a whole number from 1 to %d", s, maxRateCount)
	}
	return rate.Limit(float64(n) / per), nil
}

// ServeHTTP answers 503 while maintenance is on, 429 when the request's key is over its limit,
// and otherwise passes the request to next.
func (h *Limit) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	var err error
	var handler http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		err = next.ServeHTTP(w, r)
	})
	if h.limit != nil {
		handler = h.limit.Handler(handler)
	}
	if h.maint != nil {
		handler = h.maint.Handler(handler)
	}
	handler.ServeHTTP(w, r)
	return err
}

// placeholderKey is the key function of a configured Key.
func (h *Limit) placeholderKey(r *http.Request) (string, error) {
	repl, ok := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer)
	if !ok {
		return "", fmt.Errorf("retry_after_limit: the request has no replacer")
	}
	key, err := repl.ReplaceOrErr(h.Key, false, true)
	if err != nil {
		return "", fmt.Errorf("retry_after_limit: key %q: %v", h.Key, err)
	}
	if key == "" {
		return "", fmt.Errorf("retry_after_limit: key %q is empty for this request", h.Key)
	}
	if strings.Contains(h.Key, caddyhttp.ClientIPVarKey) {
		h.warnLeftmost(r)
	}
	return key, nil
}

// clientIPKey is the default key function: Caddy's client_ip, keyed as retryafter.ClientIP keys
// an address. Caddy's server keeps its trusted proxies to itself, so the walk of
// X-Forwarded-For is Caddy's.
func (h *Limit) clientIPKey(r *http.Request) (string, error) {
	s, _ := caddyhttp.GetVar(r.Context(), caddyhttp.ClientIPVarKey).(string)
	a, err := netip.ParseAddr(s)
	if err != nil {
		return "", fmt.Errorf("%w (Caddy's client_ip is %q)", retryafter.ErrNoClientIP, s)
	}
	h.warnLeftmost(r)
	return addrKey(a), nil
}

// addrKey formats a as retryafter.ClientIP does: an IPv4 address as itself, an IPv6 address as
// its /64, an IPv4-mapped IPv6 address as the IPv4 address, without a zone.
func addrKey(a netip.Addr) string {
	a = a.Unmap().WithZone("")
	if a.Is4() {
		return a.String()
	}
	p, _ := a.Prefix(64)
	return p.String()
}

// warnLeftmost logs once that the client address is the left-most of the client IP headers,
// which the client writes, when the request came from a trusted proxy of a server that is not
// in trusted_proxies_strict mode.
func (h *Limit) warnLeftmost(r *http.Request) {
	trusted, _ := caddyhttp.GetVar(r.Context(), caddyhttp.TrustedProxyVarKey).(bool)
	if !trusted {
		return
	}
	srv, _ := r.Context().Value(caddyhttp.ServerCtxKey).(*caddyhttp.Server)
	if srv == nil || srv.TrustedProxiesStrict > 0 {
		return
	}
	h.warnLeftXF.Do(func() {
		if h.logger != nil {
			h.logger.Warn("retry_after_limit: the client address is the left-most X-Forwarded-For entry, which a client can choose to get a fresh key; set trusted_proxies_strict in the server's options")
		}
	})
}

// logError logs an error of the key function or the limiter, which the client never sees, and
// the root package's report of CORS headers set after the limiter.
func (h *Limit) logError(r *http.Request, err error) {
	if h.logger == nil {
		return
	}
	if errors.Is(err, retryafter.ErrCORSMountOrder) {
		h.logger.Warn("retry_after_limit: a handler after it (reverse_proxy's upstream, say) set Access-Control-Allow-Origin, "+
			"so its 429s and 503s go without it and browsers hide them from the page: set the CORS headers with the header directive, which runs before it",
			zap.String("uri", r.RequestURI), zap.String("origin", r.Header.Get("Origin")))
		return
	}
	h.logger.Error("retry_after_limit: request not counted", zap.Error(err), zap.String("uri", r.RequestURI))
}

// UnmarshalCaddyfile reads the retry_after_limit directive:
//
//	retry_after_limit [<matcher>] {
//	    rate  <N/s|N/m|N/h>
//	    burst <n>
//	    key   <placeholder>
//	    rate_limit_fields [<policy>]
//	    legacy_rate_limit_fields
//	    maintenance [<until>] {
//	        wait <duration>
//	        http_date
//	    }
//	}
func (h *Limit) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // the directive's name
	if d.NextArg() {
		return d.Errf("retry_after_limit takes no argument on its line, got %q: put rate and burst in its block", d.Val())
	}
	seen := map[string]bool{}
	for d.NextBlock(0) {
		name := d.Val()
		if seen[name] {
			return d.Errf("retry_after_limit: %s given twice", name)
		}
		seen[name] = true
		switch name {
		case "rate", "key":
			var v string
			if !d.AllArgs(&v) {
				return d.Errf("retry_after_limit: %s takes one value", name)
			}
			if name == "rate" {
				h.Rate = v
			} else {
				h.Key = v
			}
		case "burst":
			var v string
			if !d.AllArgs(&v) {
				return d.Errf("retry_after_limit: burst takes one value")
			}
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				return d.Errf("retry_after_limit: burst %q: want a whole number of at least 1", v)
			}
			h.Burst = n
		case "rate_limit_fields":
			f := new(RateLimitFields)
			args := d.RemainingArgs()
			if len(args) > 1 {
				return d.Errf("retry_after_limit: rate_limit_fields takes at most one policy name")
			}
			if len(args) == 1 {
				f.Policy = args[0]
			}
			h.RateLimitFields = f
		case "legacy_rate_limit_fields":
			if d.NextArg() {
				return d.Errf("retry_after_limit: legacy_rate_limit_fields takes no value")
			}
			h.LegacyRateLimitFields = true
		case "maintenance":
			m, err := unmarshalMaintenance(d)
			if err != nil {
				return err
			}
			h.Maintenance = m
		default:
			return d.Errf("retry_after_limit: unknown option %q (want rate, burst, key, rate_limit_fields, legacy_rate_limit_fields or maintenance)", name)
		}
	}
	return nil
}

// unmarshalMaintenance reads the maintenance option of retry_after_limit.
func unmarshalMaintenance(d *caddyfile.Dispenser) (*Maintenance, error) {
	m := new(Maintenance)
	args := d.RemainingArgs()
	if len(args) > 1 {
		return nil, d.Errf("retry_after_limit: maintenance takes at most one value, the end in RFC 3339")
	}
	if len(args) == 1 {
		m.Until = args[0]
	}
	seen := map[string]bool{}
	for d.NextBlock(1) {
		name := d.Val()
		if seen[name] {
			return nil, d.Errf("retry_after_limit: maintenance %s given twice", name)
		}
		seen[name] = true
		switch name {
		case "wait":
			var v string
			if !d.AllArgs(&v) {
				return nil, d.Errf("retry_after_limit: maintenance wait takes one duration")
			}
			w, err := caddy.ParseDuration(v)
			if err != nil || w <= 0 {
				return nil, d.Errf("retry_after_limit: maintenance wait %q: want a duration above 0, such as 1m", v)
			}
			m.Wait = caddy.Duration(w)
		case "http_date":
			if d.NextArg() {
				return nil, d.Errf("retry_after_limit: maintenance http_date takes no value")
			}
			m.HTTPDate = true
		default:
			return nil, d.Errf("retry_after_limit: unknown maintenance option %q (want wait or http_date)", name)
		}
	}
	return m, nil
}

// parseLimit is the Caddyfile's setup function of retry_after_limit.
func parseLimit(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	l := new(Limit)
	err := l.UnmarshalCaddyfile(h.Dispenser)
	return l, err
}

// Interface guards.
var (
	_ caddy.Provisioner           = (*Limit)(nil)
	_ caddyhttp.MiddlewareHandler = (*Limit)(nil)
	_ caddyfile.Unmarshaler       = (*Limit)(nil)
)
