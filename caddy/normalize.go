package retryaftercaddy

import (
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/retryafter/retryafter/gateway"
)

func init() {
	caddy.RegisterModule(Normalize{})
	httpcaddyfile.RegisterHandlerDirective("retry_after_normalize", parseNormalize)
	// Before invoke: after the directives that wrap the response (encode, intercept,
	// templates), so that they see the repaired header, and before every directive that
	// dispatches (invoke, handle, route) or answers (respond, reverse_proxy, php_fastcgi,
	// file_server), so that one line at the top of a site covers them all.
	httpcaddyfile.RegisterDirectiveOrder("retry_after_normalize", httpcaddyfile.Before, "invoke")
}

// Normalize is the retry_after_normalize handler: it repairs the Retry-After of the responses
// that the handlers after it write, reverse_proxy's above all, with a [gateway.Normalizer]. Caddy's
// reverse_proxy passes an upstream's Retry-After through untouched and offers a module no hook
// into its response, so Normalize wraps the ResponseWriter and runs the Normalizer on the
// header just before the status line is written.
//
// A 429 or 503, and a redirect, gets Retry-After in delay-seconds and the gateway's Date; every
// other response passes untouched (see [gateway.Normalizer.ModifyResponse]). Each repair is
// logged at the debug level.
type Normalize struct {
	// Fallback is the Retry-After of a 429 or 503 whose own is unusable, rounded up to whole
	// seconds: above 0 and at most Max. If zero, the default is 5 seconds.
	Fallback caddy.Duration `json:"fallback,omitempty"`

	// Max is the longest Retry-After passed on, rounded down to whole seconds: at least 1
	// second. If zero, the default is 1 hour.
	Max caddy.Duration `json:"max,omitempty"`

	// FillMissing gives a 429 or 503 without Retry-After the Fallback.
	FillMissing bool `json:"fill_missing,omitempty"`

	// ExactDates reads an upstream's Retry-After date as the very instant it names, rather
	// than as the end of that second.
	ExactDates bool `json:"exact_dates,omitempty"`

	now    func() time.Time // the clock; nil means time.Now (tests set it)
	norm   *gateway.Normalizer
	logger *zap.Logger
}

// Defaults of Normalize, as gateway.Normalizer has them; Provision checks against them.
const (
	defaultFallback = 5 * time.Second
	defaultMax      = time.Hour
)

// CaddyModule returns the Caddy module information.
func (Normalize) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.retry_after_normalize",
		New: func() caddy.Module { return new(Normalize) },
	}
}

// Provision checks the configuration and builds the Normalizer. It returns an error, naming
// the field, for any value it cannot use.
func (h *Normalize) Provision(ctx caddy.Context) error {
	h.logger = ctx.Logger()
	fallback, maxWait, err := h.check()
	if err != nil {
		return err
	}
	h.norm = &gateway.Normalizer{
		Now:         h.now,
		Fallback:    fallback,
		Max:         maxWait,
		FillMissing: h.FillMissing,
		ExactDates:  h.ExactDates,
		OnRepair:    h.logRepair,
	}
	return nil
}

// logRepair logs one repaired Retry-After, so that operators can find the upstream at fault.
func (h *Normalize) logRepair(rp gateway.Repair) {
	if h.logger == nil {
		return
	}
	if ce := h.logger.Check(zap.DebugLevel, "retry_after_normalize: repaired the Retry-After of a response"); ce != nil {
		fields := []zap.Field{
			zap.Stringer("kind", rp.Kind),
			zap.Int("status", rp.Status),
			zap.Strings("upstream_retry_after", rp.UpstreamRetryAfter),
			zap.Strings("upstream_date", rp.UpstreamDate),
			zap.Duration("understood", rp.Understood),
			zap.Duration("client_retry_after", rp.ClientRetryAfter),
		}
		if rp.Leniency != 0 {
			fields = append(fields, zap.Stringer("leniency", rp.Leniency))
		}
		if rp.Request != nil {
			fields = append(fields, zap.String("uri", rp.Request.RequestURI))
		}
		ce.Write(fields...)
	}
}

// ServeHTTP passes the request to next with a ResponseWriter that repairs the header of the
// response before its status line is written.
func (h *Normalize) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	nw := &normalizeWriter{ResponseWriterWrapper: &caddyhttp.ResponseWriterWrapper{ResponseWriter: w}, norm: h.norm, req: r}
	return next.ServeHTTP(nw, r)
}

// normalizeWriter runs the Normalizer on the header when the final status is written.
type normalizeWriter struct {
	*caddyhttp.ResponseWriterWrapper
	norm    *gateway.Normalizer
	req     *http.Request
	written bool // the final status line has gone out
}

// WriteHeader repairs the header for a final status, then writes the status. An informational
// status (1xx) passes as it is: the final one follows it.
func (w *normalizeWriter) WriteHeader(code int) {
	if !w.written && code >= 200 {
		w.written = true
		if code == http.StatusTooManyRequests || code == http.StatusServiceUnavailable || (code >= 300 && code < 400) {
			resp := http.Response{StatusCode: code, Header: w.Header(), Request: w.req}
			_ = w.norm.ModifyResponse(&resp) // it always returns nil
		}
	}
	w.ResponseWriterWrapper.WriteHeader(code)
}

// Write writes body bytes; the first, without a WriteHeader before it, sends 200, which needs
// no repair.
func (w *normalizeWriter) Write(b []byte) (int, error) {
	w.written = true
	return w.ResponseWriterWrapper.Write(b)
}

// ReadFrom copies the body from r, like Write.
func (w *normalizeWriter) ReadFrom(r io.Reader) (int64, error) {
	w.written = true
	return w.ResponseWriterWrapper.ReadFrom(r)
}

// UnmarshalCaddyfile reads the retry_after_normalize directive:
//
//	retry_after_normalize [<matcher>] {
//	    fallback <duration>
//	    max      <duration>
//	    fill_missing
//	    exact_dates
//	}
func (h *Normalize) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // the directive's name
	file, line := d.File(), d.Line()
	if d.NextArg() {
		return d.Errf("retry_after_normalize takes no argument on its line, got %q: put its options in its block", d.Val())
	}
	seen := map[string]bool{}
	for d.NextBlock(0) {
		name := d.Val()
		if seen[name] {
			return d.Errf("retry_after_normalize: %s given twice", name)
		}
		seen[name] = true
		switch name {
		case "fallback", "max":
			var v string
			if !d.AllArgs(&v) {
				return d.Errf("retry_after_normalize: %s takes one duration", name)
			}
			dur, err := caddy.ParseDuration(v)
			if err != nil || dur <= 0 {
				return d.Errf("retry_after_normalize: %s %q: want a duration above 0, such as 5s", name, v)
			}
			if name == "fallback" {
				h.Fallback = caddy.Duration(dur)
			} else {
				h.Max = caddy.Duration(dur)
			}
			if name == "max" && dur < time.Second {
				return d.Errf("retry_after_normalize: max %v: want a duration of at least 1s", dur)
			}
		case "fill_missing", "exact_dates":
			if d.NextArg() {
				return d.Errf("retry_after_normalize: %s takes no value", name)
			}
			if name == "fill_missing" {
				h.FillMissing = true
			} else {
				h.ExactDates = true
			}
		default:
			return d.Errf("retry_after_normalize: unknown option %q (want fallback, max, fill_missing or exact_dates)", name)
		}
	}
	// What the options' own lines could not tell: a fallback longer than max.
	if _, _, err := h.check(); err != nil {
		return fmt.Errorf("%w, at %s:%d", err, file, line)
	}
	return nil
}

// check returns h's fallback and max, defaults applied, or an error that names the first value
// h cannot use, in one short sentence.
func (h *Normalize) check() (fallback, maxWait time.Duration, err error) {
	fallback, maxWait = time.Duration(h.Fallback), time.Duration(h.Max)
	if fallback < 0 {
		return 0, 0, fmt.Errorf("retry_after_normalize: fallback %v: want a duration above 0", fallback)
	}
	if maxWait != 0 && maxWait < time.Second {
		return 0, 0, fmt.Errorf("retry_after_normalize: max %v: want a duration of at least 1s", maxWait)
	}
	if fallback == 0 {
		fallback = defaultFallback
	}
	if maxWait == 0 {
		maxWait = defaultMax
	}
	if fallback > maxWait.Truncate(time.Second) {
		return 0, 0, fmt.Errorf("retry_after_normalize: fallback %v is longer than max %v", fallback, maxWait.Truncate(time.Second))
	}
	return fallback, maxWait, nil
}

// parseNormalize is the Caddyfile's setup function of retry_after_normalize.
func parseNormalize(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	n := new(Normalize)
	err := n.UnmarshalCaddyfile(h.Dispenser)
	return n, err
}

// Interface guards.
var (
	_ caddy.Provisioner           = (*Normalize)(nil)
	_ caddyhttp.MiddlewareHandler = (*Normalize)(nil)
	_ caddyfile.Unmarshaler       = (*Normalize)(nil)
)
