package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/retryafter/retryafter/internal/testkit/redistest"
)

func TestMain(m *testing.M) { os.Exit(redistest.Main(m)) }

// clientValue is the descriptor's value of the tests' client, which no metric may carry: new
// each run, so that a Redis shared with earlier runs (REDIS_ADDR) holds no state of it.
var clientValue = "client-" + strconv.FormatInt(time.Now().UnixNano(), 36)

const oneAnHour = "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 2}\n"

// started is a running command.
type started struct {
	client rlsv3.RateLimitServiceClient
	health healthpb.HealthClient
	http   string
	stop   func() error
	hup    chan os.Signal
}

// start runs the command with args (and -grpc, -http on loopback) until the test ends.
func start(t *testing.T, env map[string]string, args ...string) *started {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	addrs := make(chan [2]string, 1)
	done := make(chan error, 1)
	hup := make(chan os.Signal, 1)
	args = append([]string{"-grpc", "127.0.0.1:0", "-http", "127.0.0.1:0"}, args...)
	go func() {
		done <- run(ctx, args, func(k string) string { return env[k] }, hup, io.Discard, func(g, h string) { addrs <- [2]string{g, h} })
	}()
	var a [2]string
	select {
	case a = <-addrs:
	case err := <-done:
		cancel()
		t.Fatalf("the command ended: %v", err)
	}
	conn, err := grpc.NewClient(a[0], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	stop := func() error { cancel(); return <-done }
	t.Cleanup(func() { conn.Close(); cancel() })
	return &started{rlsv3.NewRateLimitServiceClient(conn), healthpb.NewHealthClient(conn), "http://" + a[1], stop, hup}
}

// ask asks for one request of k=v.
func (s *started) ask(t *testing.T) *rlsv3.RateLimitResponse {
	t.Helper()
	resp, err := s.client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "d",
		Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "k", Value: clientValue}}}}})
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// code is the overall code of a request of k=v.
func (s *started) code(t *testing.T) rlsv3.RateLimitResponse_Code { return s.ask(t).GetOverallCode() }

// wait is the duration_until_reset of a request of k=v, which must be refused.
func (s *started) wait(t *testing.T) time.Duration {
	t.Helper()
	resp := s.ask(t)
	if resp.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("admitted: %v", resp)
	}
	return resp.GetStatuses()[0].GetDurationUntilReset().AsDuration()
}

// get returns the body of a GET of url, which must answer 200.
func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	return string(b)
}

// writeConfig writes yaml as dir/config.yaml.
func writeConfig(t *testing.T, dir, yaml string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, "config.yaml"), []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestCommand: envoyproxy/ratelimit's environment variables, the limits, /healthcheck, the gRPC
// health, a reload on SIGHUP that keeps the clients' state, and a drain.
func TestCommand(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "rl", "config")
	os.MkdirAll(dir, 0o700)
	writeConfig(t, dir, oneAnHour)
	s := start(t, map[string]string{"RUNTIME_ROOT": root, "RUNTIME_SUBDIRECTORY": "rl"}, "-watch", "0")
	testCommand(t, s, dir, func() { s.hup <- syscall.SIGHUP })
}

// TestCommandRedis: the same, with the limits in a real redis-server, and the directory
// watched instead of SIGHUP.
func TestCommandRedis(t *testing.T) {
	dir := t.TempDir()
	writeConfig(t, dir, oneAnHour)
	s := start(t, nil, "-config", dir, "-watch", "20ms", "-redis", "redis://"+redistest.Addr(t)+"/0")
	testCommand(t, s, dir, func() {}) // the change of the file is seen
}

// TestCommandRedisCluster: the same, on a real Redis Cluster.
func TestCommandRedisCluster(t *testing.T) {
	dir := t.TempDir()
	writeConfig(t, dir, oneAnHour)
	s := start(t, nil, "-config", dir, "-watch", "20ms", "-redis-cluster", strings.Join(redistest.ClusterAddrs(t), ","))
	testCommand(t, s, dir, func() {})
}

// testCommand checks s, serving the configuration in dir, which reload makes it read again.
func testCommand(t *testing.T, s *started, dir string, reload func()) {
	get(t, s.http+"/healthcheck")
	h, err := s.health.Check(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil || h.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health: %v %v", h, err)
	}
	for i, want := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT} {
		if got := s.code(t); got != want {
			t.Fatalf("request %d: %v, want %v", i+1, got, want)
		}
	}
	// A limit of 3 an hour: the client keeps its state (no tokens), and now waits 20 minutes
	// for the next, not 30.
	if d := s.wait(t); d <= 29*time.Minute || d > 30*time.Minute {
		t.Fatalf("at 2 an hour, a wait of %v", d)
	}
	writeConfig(t, dir, strings.Replace(oneAnHour, "requests_per_unit: 2", "requests_per_unit: 3", 1))
	reload()
	deadline := time.Now().Add(10 * time.Second)
	for s.wait(t) > 20*time.Minute {
		if time.Now().After(deadline) {
			t.Fatal("the reload did not take, or the client's state was lost")
		}
		time.Sleep(10 * time.Millisecond)
	}
	body := get(t, s.http+"/metrics")
	for _, want := range []string{"retryafter_decisions", `rpc_method="ratelimit/d"`, `retryafter_outcome="refused"`, "retryafter_limiter_duration"} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s:\n%s", want, body)
		}
	}
	if strings.Contains(body, clientValue) {
		t.Errorf("/metrics carries a descriptor's value")
	}
	if err := s.stop(); err != nil {
		t.Fatalf("drain: %v", err)
	}
}

// TestNestedConfig: the files of the configuration's subdirectories are read and watched, and
// with RUNTIME_IGNOREDOTFILES its dot files are skipped, as envoyproxy/ratelimit's runtime
// loader does; without it a dot directory repeating a domain is refused.
func TestNestedConfig(t *testing.T) {
	dir := t.TempDir()
	sub, old := filepath.Join(dir, "team"), filepath.Join(dir, ".old")
	for _, d := range []string{sub, old} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
		writeConfig(t, d, oneAnHour)
	}
	args := []string{"-config", dir, "-grpc", "127.0.0.1:0", "-http", "127.0.0.1:0"}
	err := run(context.Background(), args, func(string) string { return "" }, nil, io.Discard, nil)
	if err == nil || !strings.Contains(err.Error(), "duplicate domain 'd'") {
		t.Fatalf("a dot directory read: %v", err)
	}
	s := start(t, map[string]string{"RUNTIME_IGNOREDOTFILES": "true"}, "-config", dir, "-watch", "20ms")
	testCommand(t, s, sub, func() {}) // the change of the nested file is seen
}

// TestLimitHeaders: LIMIT_RESPONSE_HEADERS_ENABLED adds RateLimit-Limit, RateLimit-Remaining
// and RateLimit-Reset, as envoyproxy/ratelimit does, under the names LIMIT_LIMIT_HEADER,
// LIMIT_REMAINING_HEADER and LIMIT_RESET_HEADER give when set; nothing else.
func TestLimitHeaders(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want []string
	}{
		{map[string]string{"LIMIT_RESPONSE_HEADERS_ENABLED": "true"}, []string{"RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset"}},
		{map[string]string{"LIMIT_RESPONSE_HEADERS_ENABLED": "1", "LIMIT_LIMIT_HEADER": "X-Quota", "LIMIT_REMAINING_HEADER": "X-Quota-Left", "LIMIT_RESET_HEADER": "X-Quota-Reset"},
			[]string{"X-Quota", "X-Quota-Left", "X-Quota-Reset"}},
		{map[string]string{"LIMIT_LIMIT_HEADER": "X-Quota"}, nil},
	} {
		dir := t.TempDir()
		writeConfig(t, dir, oneAnHour)
		s := start(t, tc.env, "-config", dir, "-watch", "0")
		var got []string
		for _, h := range s.ask(t).GetResponseHeadersToAdd() {
			got = append(got, h.GetKey()+": "+h.GetValue())
		}
		var want []string
		for i, name := range tc.want {
			want = append(want, name+": "+[]string{"2", "1", "1800"}[i])
		}
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("%v: headers %q, want %q", tc.env, got, want)
		}
	}
}

// TestFlags: what is refused before serving.
func TestFlags(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"-config", "x", "-redis", "redis://a", "-redis-cluster", "a,b"},
		{"-bogus"},
	} {
		if _, err := parse(args, func(string) string { return "" }, io.Discard); err == nil {
			t.Errorf("%v: accepted", args)
		}
	}
	for _, name := range []string{"RUNTIME_IGNOREDOTFILES", "LIMIT_RESPONSE_HEADERS_ENABLED"} {
		if _, err := parse([]string{"-config", "x"}, func(k string) string {
			return map[string]string{name: "maybe"}[k]
		}, io.Discard); err == nil {
			t.Errorf("%s=maybe: accepted", name)
		}
	}
	o, err := parse(nil, func(k string) string {
		return map[string]string{"RUNTIME_ROOT": "/r", "RUNTIME_SUBDIRECTORY": "s", "GRPC_PORT": "9", "PORT": "8", "REDIS_URL": "redis://h", "RUNTIME_IGNOREDOTFILES": "1"}[k]
	}, io.Discard)
	if err != nil || o.config != "/r/s/config" || o.grpc != ":9" || o.http != ":8" || o.redisURL != "redis://h" || !o.ignoreDots {
		t.Errorf("from the environment: %+v %v", o, err)
	}
}

// TestRefusedFloodRedis: a flood of refused requests costs Redis at most 0.015 commands a
// request while the wait is known (redisstore's refusal memory), on a redis-server of the
// test's own so that nothing else counts.
func TestRefusedFloodRedis(t *testing.T) {
	srv := redistest.Start(t)
	dir := t.TempDir()
	writeConfig(t, dir, oneAnHour)
	s := start(t, nil, "-config", dir, "-watch", "0", "-redis", "redis://"+srv.Addr()+"/0")
	for range 2 {
		s.code(t)
	}
	s.wait(t)
	commands := func() int {
		out, err := redistest.Do(srv.Addr(), "INFO", "stats")
		if err != nil {
			t.Fatal(err)
		}
		_, v, _ := strings.Cut(out, "total_commands_processed:")
		n, _ := strconv.Atoi(strings.Fields(v)[0])
		return n
	}
	const flood = 1000
	before := commands()
	for range flood {
		if s.code(t) != rlsv3.RateLimitResponse_OVER_LIMIT {
			t.Fatal("admitted in the flood")
		}
	}
	if n := commands() - before - 1; n > flood*15/1000 {
		t.Errorf("%d refused requests cost Redis %d commands, more than 0.015 a request", flood, n)
	}
}

// TestDrain: on SIGTERM (the context's end) the health turns NOT_SERVING, seen by a watcher,
// before the command stops, and it then exits cleanly.
func TestDrain(t *testing.T) {
	dir := t.TempDir()
	writeConfig(t, dir, oneAnHour)
	s := start(t, nil, "-config", dir, "-watch", "0", "-drain", "200ms")
	w, err := s.health.Watch(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if h, err := w.Recv(); err != nil || h.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("before: %v %v", h, err)
	}
	stopped := make(chan error, 1)
	go func() { stopped <- s.stop() }()
	if h, err := w.Recv(); err != nil || h.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("draining: %v %v, want NOT_SERVING", h, err)
	}
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
}
