package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/redis/go-redis/v9"

	"github.com/retryafter/retryafter"
	"github.com/retryafter/retryafter/otelmetrics"
	"github.com/retryafter/retryafter/redisstore"
)

// redisstore.Store reports its down state as package otelmetrics reads it.
var (
	_ otelmetrics.DownReporter       = (*redisstore.Store)(nil)
	_ otelmetrics.LocalAnswerCounter = (*redisstore.Store)(nil)
	_ otelmetrics.FallbackReporter   = (*redisstore.Store)(nil)
)

// start serves the example's handler made of c on a loopback port and returns its address.
func start(t *testing.T, c config) string {
	t.Helper()
	h, shutdown, err := newHandler(c)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h) // 127.0.0.1:0
	t.Cleanup(func() {
		srv.Close()
		shutdown(context.Background())
	})
	return srv.URL
}

// get sends GET base+path and returns the status.
func get(t *testing.T, base, path string) int {
	t.Helper()
	resp, err := http.Get(base + path)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// scrape reads /metrics as Prometheus text.
func scrape(t *testing.T, base string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics: %d", resp.StatusCode)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return fams
}

// value returns the value of the sample of family name whose labels include want (a counter's
// or gauge's value, a histogram's count), and whether there is one.
func value(fams map[string]*dto.MetricFamily, name string, want map[string]string) (float64, bool) {
	f := fams[name]
	if f == nil {
		return 0, false
	}
next:
	for _, m := range f.GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if labels[k] != v {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.GetCounter().GetValue(), true
		case m.Gauge != nil:
			return m.GetGauge().GetValue(), true
		case m.Histogram != nil:
			return float64(m.GetHistogram().GetSampleCount()), true
		}
	}
	return 0, false
}

// wantValue fails the test unless the sample of name with labels has value v.
func wantValue(t *testing.T, fams map[string]*dto.MetricFamily, v float64, name string, labels map[string]string) {
	t.Helper()
	got, ok := value(fams, name, labels)
	if !ok || got != v {
		t.Fatalf("%s%v = %v (found %v), want %v; family: %v", name, labels, got, ok, v, fams[name])
	}
}

// noClient fails the test if a label of a retryafter_ family holds the client's address.
func noClient(t *testing.T, fams map[string]*dto.MetricFamily) {
	t.Helper()
	for name, f := range fams {
		if !strings.HasPrefix(name, "retryafter_") {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if strings.Contains(l.GetValue(), "127.0.0.1") {
					t.Fatalf("%s records the client: %s=%q", name, l.GetName(), l.GetValue())
				}
			}
		}
	}
}

// TestScrape serves the example in memory on a loopback port, sends the demo's requests, and
// finds each instrument of the middleware and of the wrapped limiter in the scrape.
func TestScrape(t *testing.T) {
	c := newConfig("")
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	c.opts = []retryafter.Option{retryafter.WithClock(func() time.Time { return now })}
	base := start(t, c)
	want := []int{200, 200, 200, 429, 200, 200}
	for i, p := range demoPaths {
		if got := get(t, base, p); got != want[i] {
			t.Fatalf("GET %s: %d, want %d", p, got, want[i])
		}
	}
	fams := scrape(t, base)
	items := map[string]string{"http_route": "/items/{id}", "retryafter_policy_name": "default"}
	with := func(m map[string]string, k, v string) map[string]string {
		out := map[string]string{k: v}
		for k, v := range m {
			out[k] = v
		}
		return out
	}
	wantValue(t, fams, 2, "retryafter_decisions_total", with(items, "retryafter_outcome", "admitted"))
	wantValue(t, fams, 1, "retryafter_decisions_total", map[string]string{"http_route": "/{$}", "retryafter_outcome": "admitted"})
	wantValue(t, fams, 1, "retryafter_decisions_total", with(items, "retryafter_outcome", "refused"))
	wantValue(t, fams, 1, "retryafter_decisions_total", map[string]string{"http_route": "/beta/{id}", "retryafter_outcome": "dry_run_refused"})
	wantValue(t, fams, 1, "retryafter_decisions_total", map[string]string{"http_route": "/healthz", "retryafter_outcome": "exempt"})
	wantValue(t, fams, 1, "retryafter_retry_after_seconds", items)
	if h := fams["retryafter_retry_after_seconds"].GetMetric()[0].GetHistogram(); h.GetSampleSum() != 1 {
		t.Fatalf("retry_after sum %v, want the 1 s sent", h.GetSampleSum())
	}
	wantValue(t, fams, 1, "retryafter_near_limit_decisions_total", map[string]string{"http_route": "/{$}"})
	wantValue(t, fams, 5, "retryafter_limiter_duration_seconds", map[string]string{"retryafter_limiter_name": "memory"})
	if _, limited := value(fams, "retryafter_decisions_total", map[string]string{"http_route": "/metrics"}); limited {
		t.Fatal("/metrics went through the limiter")
	}
	noClient(t, fams)
}

// TestScrapeRedis serves the example on a redis-server of its own, then kills it, and finds the
// store's down state and the requests that failed closed in the scrape. It skips when
// redis-server is missing, and fails then under CI=true.
func TestScrapeRedis(t *testing.T) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("redis-server is not installed (CI=true: a Redis is required): %v", err)
		}
		t.Skipf("redis-server is not installed: %v", err)
	}
	addr, stop := startRedis(t, bin)
	c := newConfig(addr)
	base := start(t, c)
	// A refusal the store remembers is answered while Redis is down too (429): the requests
	// after the outage below go to a second store that remembers none, so that they need Redis.
	forgetful := newConfig(addr, redisstore.WithRefusalMemory(0))
	forgetful.name = "redis2"
	base2 := start(t, forgetful)
	for _, p := range demoPaths {
		get(t, base, p)
	}
	fams := scrape(t, base)
	redisName := map[string]string{"retryafter_limiter_name": "redis"}
	wantValue(t, fams, 0, "retryafter_limiter_down", redisName)
	if n, _ := value(fams, "retryafter_decisions_total", map[string]string{"retryafter_outcome": "refused"}); n < 1 {
		t.Fatalf("no refusal among %d quick requests of a burst of 3", len(demoPaths))
	}
	wantValue(t, fams, 5, "retryafter_limiter_duration_seconds", redisName)
	// The optional states, once the store reports them.
	if _, ok := c.limiter.(otelmetrics.LocalAnswerCounter); ok {
		// Refusals after the first of a key are answered from its memory, without Redis.
		refused, _ := value(fams, "retryafter_decisions_total", map[string]string{"retryafter_outcome": "refused"})
		if local, found := value(fams, "retryafter_limiter_local_answers_total", redisName); !found || local > refused {
			t.Fatalf("local answers %v (found %v), refusals %v", local, found, refused)
		}
	}
	if _, ok := c.limiter.(otelmetrics.FallbackReporter); ok {
		wantValue(t, fams, 0, "retryafter_limiter_local_fallback", redisName)
	}

	stop()
	if got := get(t, base, "/items/9"); got != http.StatusTooManyRequests {
		t.Fatalf("with Redis down, a remembered refusal: %d, want 429", got)
	}
	// Three failures in a row are the evidence that takes Redis for down.
	for range 3 {
		if got := get(t, base2, "/items/9"); got != http.StatusServiceUnavailable {
			t.Fatalf("with Redis down: %d, want 503", got)
		}
	}
	fams = scrape(t, base2)
	wantValue(t, fams, 1, "retryafter_limiter_down", map[string]string{"retryafter_limiter_name": "redis2"})
	wantValue(t, fams, 3, "retryafter_decisions_total", map[string]string{"http_route": "/items/{id}", "retryafter_outcome": "failed_closed"})
	noClient(t, fams)
}

// startRedis starts a redis-server on a free loopback port and returns its address and a
// function that kills it, which the test's end also calls.
func startRedis(t *testing.T, bin string) (string, func()) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	l.Close()
	cmd := exec.Command(bin, "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--logfile", "")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			cmd.Process.Kill()
			cmd.Wait()
		}
	}
	t.Cleanup(stop)
	addr := net.JoinHostPort("127.0.0.1", port)
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	for deadline := time.Now().Add(20 * time.Second); ; {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return addr, stop
		}
		if time.Now().After(deadline) {
			t.Fatalf("redis-server on %s does not answer: %v", addr, err)
		}
		time.Sleep(10 * time.Millisecond) // polls a process starting, bounded by the deadline
	}
}
