// Package maintenance is the Traefik middleware plugin retryAfterMaintenance: until the
// announced end of the work it answers every request with 503 Service Unavailable, a
// Retry-After that counts down to that end, and a Date from the same clock reading, by the rule
// of retryafter.Maintenance; from the end on, it passes requests to the service, so that a
// client that waits as told is let in.
//
// Traefik interprets it with Yaegi, from source; its configuration comes from Traefik's dynamic
// configuration (see [Config]), which Traefik reloads as it changes: to end the work early or
// late, remove the middleware from the router or change Until.
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
	// "2026-12-05T06:00:00Z". Retry-After counts down to it, and from it on requests pass to
	// the service. If empty, the end is unknown: every request is answered 503 with Retry-After
	// Wait, until the middleware is removed. The zero time (0001-01-01T00:00:00Z) is refused:
	// it is not a way to say "no end".
	Until string `json:"until,omitempty"`

	// Wait is the Retry-After when the end is unknown, as a Go duration ("1m", "90s"). If
	// empty, the default is 1 minute.
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

// New returns the middleware, which passes requests to next from Until on. It fails when Until
// is not an RFC 3339 instant or is the zero time, or Wait not a duration above zero.
func New(_ context.Context, next http.Handler, config *Config, _ string) (http.Handler, error) {
	h := &handler{next: next, wait: defaultWait, httpDate: config.HTTPDate}
	if config.Until != "" {
		until, err := time.Parse(time.RFC3339, config.Until)
		if err != nil {
			return nil, fmt.Errorf("retryAfterMaintenance: until %q: want an RFC 3339 instant, such as 2026-12-05T06:00:00Z", config.Until)
		}
		if until.IsZero() {
			return nil, fmt.Errorf("retryAfterMaintenance: until %q is the zero time: leave until out for maintenance with no end", config.Until)
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
	next     http.Handler
	until    time.Time // zero: unknown
	wait     time.Duration
	httpDate bool
	now      func() time.Time // nil: time.Now (tests set it)
	date     header.DateCache
	end      header.DateCache
}

// ServeHTTP answers 503 with Date and Retry-After from one reading of the clock, and the body
// of [http.Error]; from Until on, it calls next.
func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	now := time.Now()
	if h.now != nil {
		now = h.now()
	}
	if !h.until.IsZero() && !now.Before(h.until) {
		h.next.ServeHTTP(w, r)
		return
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
