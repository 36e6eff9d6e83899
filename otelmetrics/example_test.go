package otelmetrics_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"golang.org/x/time/rate"

	"github.com/retryafter/retryafter"
	"github.com/retryafter/retryafter/otelmetrics"
)

// ExampleMetrics_Option instruments a middleware beside a hook of the program's own: hooks add
// up, so both see the refusal.
func ExampleMetrics_Option() {
	reader := sdkmetric.NewManualReader()
	m, err := otelmetrics.New(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
	if err != nil {
		panic(err)
	}
	clock := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	limit := retryafter.Limit(rate.Every(time.Second), 2, m.Option(),
		retryafter.WithClock(func() time.Time { return clock }),
		retryafter.WithLimitedHook(func(r *http.Request, key string, d retryafter.Decision) {
			fmt.Println("refused", r.Pattern, "for", d.RetryAfter.Round(time.Millisecond))
		}))
	mux := http.NewServeMux()
	mux.Handle("GET /items/{id}", limit(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})))
	for range 3 {
		mux.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/items/1", nil))
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		panic(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, metric := range sm.Metrics {
			if metric.Name != "retryafter.decisions" {
				continue
			}
			for _, p := range metric.Data.(metricdata.Sum[int64]).DataPoints {
				outcome, _ := p.Attributes.Value("retryafter.outcome")
				route, _ := p.Attributes.Value("http.route")
				fmt.Println(metric.Name, outcome.AsString(), route.AsString(), p.Value)
			}
		}
	}
	// Unordered output:
	// refused GET /items/{id} for 1s
	// retryafter.decisions admitted /items/{id} 2
	// retryafter.decisions refused /items/{id} 1
}
