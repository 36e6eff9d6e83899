package otelmetrics

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/retryafter/retryafter"
)

var t0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

// reader is a manual reader with the Metrics it reads.
type reader struct {
	t *testing.T
	r *sdkmetric.ManualReader
	m *Metrics
}

// newReader returns a Metrics on an SDK MeterProvider read by hand, whose decisions take a
// fixed 3 ms by its stopwatch.
func newReader(t *testing.T, opts ...Option) *reader {
	t.Helper()
	r := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	m, err := New(mp, opts...)
	if err != nil {
		t.Fatal(err)
	}
	m.since = func(time.Time) time.Duration { return 3 * time.Millisecond }
	return &reader{t: t, r: r, m: m}
}

// collect returns every data point read now, by instrument name.
func (r *reader) collect() snapshot {
	r.t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.r.Collect(context.Background(), &rm); err != nil {
		r.t.Fatal(err)
	}
	s := snapshot{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != ScopeName {
			r.t.Fatalf("scope %q", sm.Scope.Name)
		}
		for _, m := range sm.Metrics {
			s[m.Name] = m
		}
	}
	return s
}

// A snapshot is what one collection read, by instrument name.
type snapshot map[string]metricdata.Metrics

// point is one data point's value: a sum's or gauge's value, or a histogram's count and sum.
type point struct {
	value int64
	count uint64
	sum   float64
}

// points returns the data points of name by their attribute set, encoded.
func (s snapshot) points(name string) map[string]point {
	ps := map[string]point{}
	switch d := s[name].Data.(type) {
	case metricdata.Sum[int64]:
		for _, p := range d.DataPoints {
			ps[p.Attributes.Encoded(attribute.DefaultEncoder())] = point{value: p.Value}
		}
	case metricdata.Gauge[int64]:
		for _, p := range d.DataPoints {
			ps[p.Attributes.Encoded(attribute.DefaultEncoder())] = point{value: p.Value}
		}
	case metricdata.Histogram[int64]:
		for _, p := range d.DataPoints {
			ps[p.Attributes.Encoded(attribute.DefaultEncoder())] = point{count: p.Count, sum: float64(p.Sum)}
		}
	case metricdata.Histogram[float64]:
		for _, p := range d.DataPoints {
			ps[p.Attributes.Encoded(attribute.DefaultEncoder())] = point{count: p.Count, sum: p.Sum}
		}
	}
	return ps
}

// at returns the point of name with the attributes kvs, and whether there is one.
func (s snapshot) at(name string, kvs ...attribute.KeyValue) (point, bool) {
	set := attribute.NewSet(kvs...)
	p, ok := s.points(name)[set.Encoded(attribute.DefaultEncoder())]
	return p, ok
}

// request returns a GET of path from client 192.0.2.1 that the mux matched with pattern.
func request(path, pattern string) *http.Request {
	r := httptest.NewRequest(http.MethodGet, path, nil)
	r.RemoteAddr = "192.0.2.1:1234"
	r.Pattern = pattern
	return r
}

// serve sends r through h and returns the response.
func serve(h http.Handler, r *http.Request) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// fakeStore is a Limiter with the states a Redis store reports, set by the test: a test double
// for the interfaces of this package, deciding through the Limiter l, or failing with err.
type fakeStore struct {
	l        retryafter.Limiter
	err      error
	down     error
	local    uint64
	fallback bool
}

func (f *fakeStore) Decide(ctx context.Context, key string, cost int, now time.Time) (retryafter.Decision, error) {
	if f.err != nil {
		return retryafter.Decision{}, f.err
	}
	return f.l.Decide(ctx, key, cost, now)
}

func (f *fakeStore) Down() error          { return f.down }
func (f *fakeStore) LocalAnswers() uint64 { return f.local }
func (f *fakeStore) FallingBack() bool    { return f.fallback }
