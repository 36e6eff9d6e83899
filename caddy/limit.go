package retryaftercaddy

import (
	"errors"
	"fmt"
	"net/http"
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
// Rate and Burst are required, unless Maintenance or MaintenanceSwitch is set, in which case
// both may be left out together to have no limiter at all. The buckets live in memory and are kept across
// configuration loads while a limit of the same identity (see Name) is in the configuration.
type Limit struct {
	// Name is the limit's identity: handlers of one name count against the same buckets, in
	// one configuration and across loads, and a new Rate or Burst applies from the load on to
	// the tokens each key holds (a key keeps its tokens, at most the new Burst, and refills at
	// the new Rate). If empty, the identity is the Rate, Burst and Key together: an unchanged
	// limit keeps its buckets across loads, a changed one starts afresh, and unnamed limits of
	// the same definition share their buckets. A limit of the Caddyfile without a name is
	// named "{key} #n", by its place among the Caddyfile's limits of the same key.
	Name string `json:"name,omitempty"`

	// Rate is how fast a key's bucket refills, as "N/s", "N/m" or "N/h": N requests a second,
	// a minute or an hour, with N a whole number from 1 to 1,000,000,000.
	Rate string `json:"rate,omitempty"`

	// Burst is how many requests a key may make at once, from a full bucket: at least 1.
	Burst int `json:"burst,omitempty"`

	// Key is what a request is counted against, with placeholders replaced: the Caddyfile's
	// {client_ip} is {http.vars.client_ip}, a header is {http.request.header.X-Api-Key}. A
	// placeholder Caddy does not know fails the load (the outputs of a map handler
	// included). A placeholder without a value for a
	// request is empty, and a key that comes out empty is one key of its own, shared by every
	// such request; the first is logged as a warning. If empty, the default is the client address that Caddy found (after its
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
	// Retry-After counting down to its end (see [retryafter.Maintenance]), until that end, or
	// until a configuration without it is loaded.
	Maintenance *Maintenance `json:"maintenance,omitempty"`

	// MaintenanceSwitch names a maintenance switch that Caddy's admin API turns on and off
	// without a reload (see [MaintenanceAdmin]): off at first, it keeps its state across loads
	// while a handler of that name is in the configuration, and handlers of one name share it.
	// It cannot be used with Maintenance.
	MaintenanceSwitch string `json:"maintenance_switch,omitempty"`

	now          func() time.Time // the clock; nil means time.Now (tests set it)
	limit        *retryafter.Middleware
	shared       *sharedBucket      // the buckets, in the pool buckets
	policy       *retryafter.Policy // what Rate and Burst say
	poolKey      string             // the identity shared is held by in buckets; "" when none
	maint        *maintenanceSwitch // nil without maintenance
	switchKey    string             // the name maint is held by in switches; "" when none
	logger       *zap.Logger
	warnLeftXF   *sync.Once // set by Provision
	warnEmptyKey *sync.Once // set by Provision
}

// RateLimitFields configures the RateLimit and RateLimit-Policy fields.
type RateLimitFields struct {
	// Policy is the policy name the fields carry: printable ASCII. If empty, the default is
	// "default".
	Policy string `json:"policy,omitempty"`
}

// Maintenance configures the 503 answer of a maintenance window.
type Maintenance struct {
	// Until is the end of the work, in RFC 3339 ("2026-12-01T22:00:00Z"): Retry-After counts
	// down to it, and maintenance ends at it by itself, unless Hold is set. If empty, the end
	// is unknown, Retry-After is Wait, and maintenance lasts until a configuration without it
	// is loaded. The zero time (0001-01-01T00:00:00Z) is refused: it is not a way to say
	// "no end".
	Until string `json:"until,omitempty"`

	// Hold keeps maintenance on after Until has passed, until a configuration without it is
	// loaded: the work overruns its announced end, and Retry-After is how late it is, from 1
	// second up to Wait (see [retryafter.Maintenance]).
	Hold bool `json:"hold,omitempty"`

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
	h.warnLeftXF, h.warnEmptyKey = new(sync.Once), new(sync.Once)
	defer func() {
		// Every value is checked below before it reaches a constructor that would panic; this
		// keeps a panic the checks missed from taking down the configuration load.
		if p := recover(); p != nil {
			err = fmt.Errorf("retry_after_limit: %v", p)
		}
	}()
	limit, err := h.check()
	if err != nil {
		return err
	}
	if h.Maintenance != nil {
		h.maint = h.Maintenance.build()
		h.maint.m.Now = h.now
		h.warnPastUntil()
	}
	if h.MaintenanceSwitch != "" {
		if err := h.shareSwitch(); err != nil {
			return err
		}
	}
	if h.Rate == "" {
		return nil // maintenance alone
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
		opts = append(opts, retryafter.WithRateLimitFields(f.Policy))
	}
	if h.LegacyRateLimitFields {
		opts = append(opts, retryafter.WithLegacyRateLimitFields(true))
	}
	if err := h.shareBuckets(limit); err != nil {
		return err
	}
	h.limit = retryafter.NewMiddleware(h.shared.bucket, opts...)
	return nil
}

// check returns h's rate per second, or an error that says, in one short sentence, the first
// value h cannot use or what it is missing. The rate is 0 for maintenance alone.
func (h *Limit) check() (rate.Limit, error) {
	if err := h.checkMaintenance(); err != nil {
		return 0, err
	}
	if h.maintenanceAlone() {
		return 0, nil
	}
	return h.checkLimiter()
}

// checkMaintenance returns an error for a maintenance window h cannot use: given with
// maintenance_switch, with an until or wait out of range, or with a key or rate-limit fields but
// no rate and burst. It returns nil without Maintenance.
func (h *Limit) checkMaintenance() error {
	m := h.Maintenance
	if m == nil {
		return nil
	}
	if h.MaintenanceSwitch != "" {
		return fmt.Errorf("retry_after_limit: maintenance and maintenance_switch: use one")
	}
	if _, err := parseUntil(m.Until); err != nil {
		return err
	}
	if m.Wait < 0 {
		return fmt.Errorf("retry_after_limit: maintenance wait %v: want a duration above 0", time.Duration(m.Wait))
	}
	if h.Rate == "" && h.Burst == 0 && h.needsLimiter() {
		return fmt.Errorf("retry_after_limit: key and the rate-limit fields need a rate and a burst")
	}
	return nil
}

// needsLimiter reports whether h sets an option that only a limiter uses: a key or a
// rate-limit field.
func (h *Limit) needsLimiter() bool {
	return h.Key != "" || h.RateLimitFields != nil || h.LegacyRateLimitFields
}

// maintenanceAlone reports whether h is a maintenance window or switch with no limiter: no
// rate, no burst, and no option that only a limiter uses.
func (h *Limit) maintenanceAlone() bool {
	hasMaintenance := h.Maintenance != nil || h.MaintenanceSwitch != ""
	return hasMaintenance && h.Rate == "" && h.Burst == 0 && !h.needsLimiter()
}

// checkLimiter returns the rate per second of h's limiter, or an error for the first of its
// rate, burst, key and policy name that it cannot use.
func (h *Limit) checkLimiter() (rate.Limit, error) {
	limit, err := parseRate(h.Rate)
	if err != nil {
		return 0, err
	}
	if h.Burst == 0 {
		return 0, fmt.Errorf("retry_after_limit: rate %s needs a burst, a whole number of at least 1", h.Rate)
	}
	if h.Burst < 1 {
		return 0, fmt.Errorf("retry_after_limit: burst %d: want a whole number of at least 1", h.Burst)
	}
	if err := checkKey(h.Key); err != nil {
		return 0, err
	}
	if f := h.RateLimitFields; f != nil {
		if err := checkPolicyName(f.Policy); err != nil {
			return 0, err
		}
	}
	return limit, nil
}

// checkPolicyName returns an error if name is not printable ASCII.
func checkPolicyName(name string) error {
	for i := 0; i < len(name); i++ {
		if name[i] < 0x20 || name[i] > 0x7e {
			return fmt.Errorf("retry_after_limit: rate_limit_fields policy %q: want printable ASCII", name)
		}
	}
	return nil
}

// clock returns the handler's clock.
func (h *Limit) clock() func() time.Time {
	if h.now != nil {
		return h.now
	}
	return time.Now
}

// warnPastUntil logs, at load, a maintenance window whose until has passed: over already, or,
// with Hold, overrunning.
func (h *Limit) warnPastUntil() {
	until, _ := h.maint.m.Until()
	if until.IsZero() || h.clock()().Before(until) || h.logger == nil {
		return
	}
	if h.Maintenance.Hold {
		h.logger.Warn("retry_after_limit: maintenance until has passed and hold is set: every request is answered 503 until a configuration without it is loaded",
			zap.String("until", h.Maintenance.Until))
		return
	}
	h.logger.Warn("retry_after_limit: maintenance until has passed: the window is over, and requests pass", zap.String("until", h.Maintenance.Until))
}

// parseUntil reads the until of a maintenance window: the zero time when s is empty. It
// refuses the zero time written out (0001-01-01T00:00:00Z), which would mean no end where every
// other past until means an end that has passed.
func parseUntil(s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("retry_after_limit: maintenance until %q: want an RFC 3339 time such as 2026-12-01T22:00:00Z", s)
	}
	if t.IsZero() {
		return time.Time{}, fmt.Errorf("retry_after_limit: maintenance until %q is the zero time: leave until out for maintenance with no end", s)
	}
	return t, nil
}

// build returns the maintenance window m describes, turned on; m has been checked.
func (m *Maintenance) build() *maintenanceSwitch {
	until, _ := parseUntil(m.Until)
	s := new(maintenanceSwitch)
	s.m.HTTPDate, s.m.Wait = m.HTTPDate, time.Duration(m.Wait)
	s.set(&switchValue{until: until, hold: m.Hold})
	return s
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
		h.shared.use(h.policy)
		handler = h.limit.Handler(handler)
	}
	if h.maint != nil && !h.maint.over(h.clock()()) {
		handler = h.maint.m.Handler(handler)
	}
	handler.ServeHTTP(w, r)
	return err
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
//	    name  <name>
//	    rate  <N/s|N/m|N/h>
//	    burst <n>
//	    key   <placeholder>
//	    rate_limit_fields [<policy>]
//	    legacy_rate_limit_fields
//	    maintenance [<until>] {
//	        wait <duration>
//	        http_date
//	        hold
//	    }
//	    maintenance_switch <name>
//	}
func (h *Limit) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // the directive's name
	file, line := d.File(), d.Line()
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
		if err := h.unmarshalOption(d, name); err != nil {
			return err
		}
	}
	// What the options' own lines could not tell: a value missing, or given without another.
	if _, err := h.check(); err != nil {
		return fmt.Errorf("%w, at %s:%d", err, file, line)
	}
	return nil
}

// unmarshalOption reads the option name of the retry_after_limit directive, and checks its
// value, so that a mistake is reported at its line.
func (h *Limit) unmarshalOption(d *caddyfile.Dispenser, name string) error {
	read := limitOption(name)
	if read == nil {
		return d.Errf("retry_after_limit: unknown option %q (want name, rate, burst, key, rate_limit_fields, legacy_rate_limit_fields, maintenance or maintenance_switch)", name)
	}
	return read(h, d)
}

// limitOption returns the function that reads the line of the retry_after_limit directive's
// option name into a Limit, or nil for an unknown option.
func limitOption(name string) func(*Limit, *caddyfile.Dispenser) error {
	switch name {
	case "name":
		return func(h *Limit, d *caddyfile.Dispenser) error { return readOneValue(d, "name", nil, &h.Name) }
	case "rate":
		return func(h *Limit, d *caddyfile.Dispenser) error { return readOneValue(d, "rate", checkRate, &h.Rate) }
	case "key":
		return func(h *Limit, d *caddyfile.Dispenser) error { return readOneValue(d, "key", checkKey, &h.Key) }
	case "maintenance_switch":
		return func(h *Limit, d *caddyfile.Dispenser) error {
			return readOneValue(d, "maintenance_switch", nil, &h.MaintenanceSwitch)
		}
	case "burst":
		return (*Limit).unmarshalBurst
	case "rate_limit_fields":
		return (*Limit).unmarshalRateLimitFields
	case "legacy_rate_limit_fields":
		return (*Limit).unmarshalLegacyRateLimitFields
	case "maintenance":
		return (*Limit).unmarshalMaintenanceOption
	}
	return nil
}

// readOneValue reads the one value of the option name into dst, if check, when not nil, accepts
// it.
func readOneValue(d *caddyfile.Dispenser, name string, check func(string) error, dst *string) error {
	var v string
	if !d.AllArgs(&v) {
		return d.Errf("retry_after_limit: %s takes one value", name)
	}
	if check != nil {
		if err := check(v); err != nil {
			return d.WrapErr(err)
		}
	}
	*dst = v
	return nil
}

// checkRate returns an error if s is not a rate that parseRate reads.
func checkRate(s string) error {
	_, err := parseRate(s)
	return err
}

// unmarshalBurst reads the burst option: one whole number of at least 1.
func (h *Limit) unmarshalBurst(d *caddyfile.Dispenser) error {
	var v string
	if err := readOneValue(d, "burst", nil, &v); err != nil {
		return err
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return d.Errf("retry_after_limit: burst %q: want a whole number of at least 1", v)
	}
	h.Burst = n
	return nil
}

// unmarshalRateLimitFields reads the rate_limit_fields option: at most one policy name, in
// printable ASCII.
func (h *Limit) unmarshalRateLimitFields(d *caddyfile.Dispenser) error {
	f := new(RateLimitFields)
	args := d.RemainingArgs()
	if len(args) > 1 {
		return d.Errf("retry_after_limit: rate_limit_fields takes at most one policy name")
	}
	if len(args) == 1 {
		f.Policy = args[0]
	}
	if err := checkPolicyName(f.Policy); err != nil {
		return d.WrapErr(err)
	}
	h.RateLimitFields = f
	return nil
}

// unmarshalLegacyRateLimitFields reads the legacy_rate_limit_fields option, which takes no
// value.
func (h *Limit) unmarshalLegacyRateLimitFields(d *caddyfile.Dispenser) error {
	if d.NextArg() {
		return d.Errf("retry_after_limit: legacy_rate_limit_fields takes no value")
	}
	h.LegacyRateLimitFields = true
	return nil
}

// unmarshalMaintenanceOption reads the maintenance option and its block.
func (h *Limit) unmarshalMaintenanceOption(d *caddyfile.Dispenser) error {
	m, err := unmarshalMaintenance(d)
	if err != nil {
		return err
	}
	h.Maintenance = m
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
		if _, err := parseUntil(args[0]); err != nil {
			return nil, d.WrapErr(err)
		}
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
		case "http_date", "hold":
			if d.NextArg() {
				return nil, d.Errf("retry_after_limit: maintenance %s takes no value", name)
			}
			if name == "hold" {
				m.Hold = true
			} else {
				m.HTTPDate = true
			}
		default:
			return nil, d.Errf("retry_after_limit: unknown maintenance option %q (want wait, http_date or hold)", name)
		}
	}
	return m, nil
}

// parseLimit is the Caddyfile's setup function of retry_after_limit. A limit without a name
// gets one from its key and its place among the Caddyfile's limits of that key, "{key} #n", so
// that each directive keeps its own buckets across reloads (two sites that import one snippet
// included), as long as the limits of its key before it stay in place.
func parseLimit(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	l := new(Limit)
	if err := l.UnmarshalCaddyfile(h.Dispenser); err != nil {
		return nil, err
	}
	if l.Name == "" && l.Rate != "" {
		key := l.Key
		if key == "" {
			key = "{client address}"
		}
		if h.IsNamedRoute() {
			key = "route " + key
		}
		seen, _ := h.State["retry_after_limit"].(map[string]int)
		if seen == nil {
			seen = map[string]int{}
			h.State["retry_after_limit"] = seen
		}
		seen[key]++
		l.Name = fmt.Sprintf("%s #%d", key, seen[key])
	}
	return l, nil
}

// Interface guards.
var (
	_ caddy.Provisioner           = (*Limit)(nil)
	_ caddy.CleanerUpper          = (*Limit)(nil)
	_ caddyhttp.MiddlewareHandler = (*Limit)(nil)
	_ caddyfile.Unmarshaler       = (*Limit)(nil)
)
