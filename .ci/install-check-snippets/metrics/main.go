// otelmetrics/README.md's first snippet, as a user builds it.
package main

import (
	"log"
	"net/http"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/retryafter/retryafter"
	"github.com/retryafter/retryafter/otelmetrics"
)

func main() {
	meterProvider := sdkmetric.NewMeterProvider()
	store := retryafter.NewTokenBucket(10, 20)
	mux := http.NewServeMux()
	items := http.NotFoundHandler()
	// snippet from otelmetrics/README.md
	m, err := otelmetrics.New(meterProvider) // an SDK MeterProvider, with the exporter of your choice
	if err != nil {
		log.Fatal(err)
	}
	limit := retryafter.LimitWith(m.Limiter("redis", store), m.Option())
	mux.Handle("GET /items/{id}", limit(items)) // limited inside the mux: the route is known
	// end of snippet
	log.Fatal(http.ListenAndServe("127.0.0.1:8080", mux))
}
