// Package maintenance is the Traefik middleware plugin retryAfterMaintenance: it answers every
// request it is given with 503 Service Unavailable, a Retry-After that counts down to the
// announced end of the work, and a Date from the same clock reading, as
// retryafter.Maintenance does, by the same rule.
//
// Traefik interprets it with Yaegi, from source; its configuration comes from Traefik's dynamic
// configuration (see [Config]). Maintenance is on while a router uses the middleware: remove it
// from the router's middlewares to end it, and Traefik applies that at once.
package maintenance

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/retryafter/retryafter/internal/downtime"
	"github.com/retryafter/retryafter/internal/header"
)

// defaultWait is the Retry-After when the end is unknown, unless Config.Wait says otherwise.
const defaultWait = time.Minute

// Config is the configuration of a retryAfterMaintenance middleware, as Traefik decodes it from
// its dynamic configuration (YAML, TOML, labels).
type Config struct {
	// Until is the announced end of the work, an RFC 3339 instant such as
	// "2026-12-05T06:00:00Z". Retry-After counts down to it; once it has passed, while the
	// middleware is still in use, Retry-After is how late the work is so far, at least one
	// second and at most Wait. If empty, the end is unknown and Retry-After is Wait.
	Until string `json:"until,omitempty"`

	// Wait is the Retry-After when the end is unknown, and the longest one while the work
	// overruns its end, as a Go duration ("1m", "90s"). If empty, the default is 1 minute.
	Wait string `json:"wait,omitempty"`

	// HTTPDate states Retry-After as an HTTP-date (the end, rounded up to the next second),
	// rather than in delay-seconds, the default, which depends on nobody's clock.
	HTTPDate bool `json:"httpDate,omitempty"`
}

// CreateConfig returns the default configuration; Traefik calls it before decoding a
// middleware's options into it.
func CreateConfig() *Config {
	return &Config{}
}

// New returns the middleware, which answers every request itself and never calls next. It
// fails when Until is not an RFC 3339 instant or Wait not a duration above zero.
func New(_ context.Context, _ http.Handler, config *Config, _ string) (http.Handler, error) {
	h := &handler{wait: defaultWait, httpDate: config.HTTPDate}
	if config.Until != "" {
		until, err := time.Parse(time.RFC3339, config.Until)
		if err != nil {
			return nil, fmt.Errorf("retryAfterMaintenance: until %q: want an RFC 3339 instant, such as 2026-12-05T06:00:00Z", config.Until)
		}
		h.until = until
	}
	if config.Wait != "" {
		wait, err := time.ParseDuration(config.Wait)
		if err != nil || wait <= 0 {
			return nil, fmt.Errorf("retryAfterMaintenance: wait %q: want a duration above 0, such as 1m", config.Wait)
		}
		h.wait = wait
	}
	return h, nil
}

// handler is the middleware that New returns.
type handler struct {
	until    time.Time // zero: unknown
	wait     time.Duration
	httpDate bool
	now      func() time.Time // nil: time.Now (tests set it)
	date     header.DateCache
	end      header.DateCache
}

// ServeHTTP answers 503 with Date and Retry-After from one reading of the clock, and the body
// of [http.Error].
func (h *handler) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	now := time.Now()
	if h.now != nil {
		now = h.now()
	}
	end, left, _ := downtime.Answer(now, h.until, h.wait)
	hdr := w.Header()
	hdr[header.Date] = []string{h.date.Format(now)}
	if h.httpDate {
		hdr[header.RetryAfter] = []string{h.end.Format(header.RoundUpDate(end))}
	} else {
		hdr[header.RetryAfter] = []string{strconv.FormatInt(header.DelaySeconds(left), 10)}
	}
	http.Error(w, http.StatusText(http.StatusServiceUnavailable), http.StatusServiceUnavailable)
}
