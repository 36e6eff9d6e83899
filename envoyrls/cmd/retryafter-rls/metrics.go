package main

import (
	"context"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/retryafter/retryafter"
	"github.com/retryafter/retryafter/envoyrls"
	"github.com/retryafter/retryafter/otelmetrics"
)

// metrics are the command's instruments, exported as Prometheus text.
type metrics struct {
	m        *otelmetrics.Metrics
	handler  http.Handler
	provider *sdkmetric.MeterProvider
}

// newMetrics makes the instruments of package otelmetrics, read by OpenTelemetry's Prometheus
// exporter into a registry of their own.
func newMetrics() (*metrics, error) {
	reg := prometheus.NewRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		return nil, err
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp))
	m, err := otelmetrics.New(mp)
	if err != nil {
		return nil, err
	}
	return &metrics{m: m, handler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), provider: mp}, nil
}

// limiter wraps what f makes, to record the store's latency and state under name.
func (x *metrics) limiter(name string, f envoyrls.LimiterFunc) envoyrls.LimiterFunc {
	return func(policy func(string) retryafter.Policy) retryafter.Limiter {
		return x.m.Limiter(name, f(policy))
	}
}

// decided records one rule's decision: its outcome and wait under the rule's policy name, with
// the domain in rpc.method ("ratelimit/DOMAIN"). Both come from the configuration, never from a
// descriptor's value, so they are bounded.
func (x *metrics) decided(r envoyrls.Report) {
	x.m.CallDecided(context.Background(), "/ratelimit/"+r.Domain, r.Outcome, r.Decision)
}
