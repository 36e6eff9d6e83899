package otelmetrics

import (
	"context"
	"net"
	"net/http"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"golang.org/x/time/rate"

	"github.com/retryafter/retryafter"
	"github.com/retryafter/retryafter/edge"
)

// The cost of the allowed path, with the module off and on, on the SDK's own aggregation:
//
//	go test -run '^$' -bench Allowed -benchmem
//
// The figures are in README.md.

// hostKey is RemoteAddr without its port, allocation-free.
func hostKey(r *http.Request) (string, error) {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	return host, err
}

// discard is a ResponseWriter that keeps nothing, its header emptied before each request.
type discard struct{ h http.Header }

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(p []byte) (int, error) { return len(p), nil }
func (d *discard) WriteHeader(int)             {}

func BenchmarkAllowed(b *testing.B) {
	bucket := func() *retryafter.TokenBucket { return retryafter.NewTokenBucket(rate.Limit(100), 1<<30) }
	newMetrics := func(b *testing.B) *Metrics {
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
		b.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
		m, err := New(mp)
		if err != nil {
			b.Fatal(err)
		}
		return m
	}
	b.Run("off", func(b *testing.B) {
		run(b, retryafter.LimitWith(bucket(), retryafter.WithKeyFunc(hostKey))(ok))
	})
	b.Run("on", func(b *testing.B) {
		m := newMetrics(b)
		run(b, retryafter.LimitWith(bucket(), m.Option(), retryafter.WithKeyFunc(hostKey))(ok))
	})
	b.Run("on+limiter", func(b *testing.B) {
		m := newMetrics(b)
		run(b, retryafter.LimitWith(m.Limiter("mem", bucket()), m.Option(), retryafter.WithKeyFunc(hostKey))(ok))
	})
}

// run serves one client's request, matched by a route, b.N times through h.
func run(b *testing.B, h http.Handler) {
	r := request("/items/7", "GET /items/{id}")
	w := &discard{h: http.Header{}}
	b.ReportAllocs()
	for b.Loop() {
		clear(w.h)
		h.ServeHTTP(w, r)
	}
}

// BenchmarkCallDecided records an admitted gRPC call, as grpclimit's decision hook does: the
// cost that m.CallDecided adds to each call.
func BenchmarkCallDecided(b *testing.B) {
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	b.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	m, err := New(mp)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	d := retryafter.Decision{Allowed: true, Limit: 100, Remaining: 99}
	b.ReportAllocs()
	for b.Loop() {
		m.CallDecided(ctx, "/grpc.testing.TestService/EmptyCall", edge.Admitted, d)
	}
}
