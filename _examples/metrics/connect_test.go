package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"connectrpc.com/connect"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"golang.org/x/time/rate"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/retryafter/retryafter"
	"github.com/retryafter/retryafter/connectlimit"
	"github.com/retryafter/retryafter/otelmetrics"
)

// TestConnectMetrics: a Connect server's decisions are recorded by otelmetrics' CallDecided,
// under the procedure, on the instruments of the HTTP middleware.
func TestConnectMetrics(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { mp.Shutdown(context.Background()) })
	m, err := otelmetrics.New(mp)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	const procedure = "/greet.v1.GreetService/Greet"
	limit := connectlimit.NewInterceptor(m.Limiter("memory", retryafter.NewTokenBucket(rate.Every(time.Minute), 2)),
		connectlimit.WithClock(func() time.Time { return t0 }),
		connectlimit.WithDecisionHook(func(c connectlimit.Call, o retryafter.Outcome, d retryafter.Decision) {
			m.CallDecided(c.Context, c.Spec.Procedure, o, d)
		}))
	srv := httptest.NewServer(connect.NewUnaryHandler(procedure,
		func(_ context.Context, r *connect.Request[wrapperspb.StringValue]) (*connect.Response[wrapperspb.StringValue], error) {
			return connect.NewResponse(r.Msg), nil
		}, connect.WithInterceptors(limit)))
	defer srv.Close()
	client := connect.NewClient[wrapperspb.StringValue, wrapperspb.StringValue](http.DefaultClient, srv.URL+procedure)
	for range 3 { // admitted twice, then refused
		client.CallUnary(t.Context(), connect.NewRequest(wrapperspb.String("x")))
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(t.Context(), &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, metric := range sm.Metrics {
			if d, ok := metric.Data.(metricdata.Sum[int64]); ok && metric.Name == "retryafter.decisions" {
				for _, p := range d.DataPoints {
					got[p.Attributes.Encoded(attribute.DefaultEncoder())] += p.Value
				}
			}
		}
	}
	want := map[string]int64{
		"retryafter.outcome=admitted,retryafter.policy.name=default,rpc.method=greet.v1.GreetService/Greet": 2,
		"retryafter.outcome=refused,retryafter.policy.name=default,rpc.method=greet.v1.GreetService/Greet":  1,
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("retryafter.decisions{%s} = %d, want %d; all: %v", k, got[k], v, got)
		}
	}
}
