// Package normalize is the Traefik middleware plugin retryAfterNormalize: a
// [gateway.Normalizer] in front of a service, so that whatever Retry-After the service sends on a
// 429, a 503 or a redirect, the client gets delay-seconds it can obey (at least 1 on a 429 or
// 503) and Traefik's Date from the same clock reading.
//
// Traefik interprets it with Yaegi, from source; its configuration comes from Traefik's dynamic
// configuration (see [Config]). Each repair is written to Traefik's log at debug level.
package normalize

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/retryafter/retryafter/gateway"
)

// Config is the configuration of a retryAfterNormalize middleware, as Traefik decodes it from
// its dynamic configuration (YAML, TOML, labels): the options of [gateway.Normalizer].
type Config struct {
	// Fallback is the Retry-After sent on a 429 or 503 whose own is unusable, as a Go duration
	// ("5s", "1m30s"). If empty, the default is 5 seconds.
	Fallback string `json:"fallback,omitempty"`

	// Max is the longest Retry-After passed on, as a Go duration of at least one second; a
	// longer one is clamped to it. If empty, the default is 1 hour.
	Max string `json:"max,omitempty"`

	// FillMissing gives a 429 or 503 without Retry-After, whose rate-limit reset fields say
	// nothing usable either, the Fallback. If false, the default, it passes untouched.
	FillMissing bool `json:"fillMissing,omitempty"`

	// ExactDates reads an upstream's Retry-After date as the very instant it names, rather than
	// as the end of that second. Set it for upstreams that round their dates up.
	ExactDates bool `json:"exactDates,omitempty"`
}

// CreateConfig returns the default configuration; Traefik calls it before decoding a
// middleware's options into it.
func CreateConfig() *Config {
	return &Config{}
}

// New returns next behind a Normalizer configured by config. name is the middleware's name in
// Traefik's configuration, which the log lines of repairs carry. It fails when a duration does
// not parse, is not above zero, when Max is under one second, or when Fallback is longer than
// Max.
func New(_ context.Context, next http.Handler, config *Config, name string) (http.Handler, error) {
	fallback, err := duration("fallback", config.Fallback)
	if err != nil {
		return nil, err
	}
	maxWait, err := duration("max", config.Max)
	if err != nil {
		return nil, err
	}
	if maxWait != 0 && maxWait < time.Second {
		return nil, fmt.Errorf("retryAfterNormalize: max %q: want at least 1s", config.Max)
	}
	if fallback != 0 && maxWait != 0 && fallback > maxWait.Truncate(time.Second) {
		return nil, fmt.Errorf("retryAfterNormalize: fallback %q is longer than max %q", config.Fallback, config.Max)
	}
	if fallback != 0 && maxWait == 0 && fallback > time.Hour {
		return nil, fmt.Errorf("retryAfterNormalize: fallback %q is longer than the default max, 1h", config.Fallback)
	}
	h := &handler{next: next, name: name}
	h.norm = gateway.Normalizer{
		Fallback:    fallback,
		Max:         maxWait,
		FillMissing: config.FillMissing,
		ExactDates:  config.ExactDates,
		OnRepair:    h.logRepair,
	}
	return h, nil
}

// duration parses the option name's value v: 0 when v is empty, an error unless it is a Go
// duration above zero.
func duration(name, v string) (time.Duration, error) {
	if v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("retryAfterNormalize: %s %q: want a duration above 0, such as 5s", name, v)
	}
	return d, nil
}

// handler is the middleware that New returns.
type handler struct {
	next http.Handler
	name string
	norm gateway.Normalizer
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.next.ServeHTTP(&responseWriter{ResponseWriter: w, norm: &h.norm, req: r}, r)
}

// logRepair writes one line about rp to Traefik's log at debug level, where Traefik puts what a
// plugin prints with fmt.Print.
func (h *handler) logRepair(rp gateway.Repair) {
	var b strings.Builder
	fmt.Fprintf(&b, "retryAfterNormalize %s: repaired the Retry-After of a response: kind=%s status=%d upstream_retry_after=%q upstream_date=%q understood=%s client_retry_after=%s",
		h.name, rp.Kind, rp.Status, rp.UpstreamRetryAfter, rp.UpstreamDate, rp.Understood, rp.ClientRetryAfter)
	if rp.Leniency != 0 {
		fmt.Fprintf(&b, " leniency=%s", rp.Leniency)
	}
	if rp.Request != nil {
		fmt.Fprintf(&b, " uri=%q", rp.Request.RequestURI)
	}
	b.WriteByte('\n')
	fmt.Print(b.String())
}

// responseWriter hands the header of the final response to the Normalizer before it is written.
type responseWriter struct {
	http.ResponseWriter
	norm    *gateway.Normalizer
	req     *http.Request
	written bool // the final status line has gone out
}

func (w *responseWriter) WriteHeader(code int) {
	if !w.written && code >= http.StatusOK {
		w.written = true
		resp := http.Response{StatusCode: code, Header: w.Header(), Request: w.req}
		_ = w.norm.ModifyResponse(&resp) // it always returns nil
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *responseWriter) Write(b []byte) (int, error) {
	if !w.written {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(b)
}
