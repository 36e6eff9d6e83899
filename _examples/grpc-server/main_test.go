package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"golang.org/x/time/rate"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/retryafter/retryafter"
	"github.com/retryafter/retryafter/edge"
	"github.com/retryafter/retryafter/grpclimit"
	"github.com/retryafter/retryafter/httpratestore"
	"github.com/retryafter/retryafter/internal/testkit/redistest"
	"github.com/retryafter/retryafter/otelmetrics"
)

func TestMain(m *testing.M) { os.Exit(redistest.Main(m)) }

// TestClients: of calls made at once beyond the burst, a client with no retry policy sees
// refusals, and one whose retry policy obeys the pushback gets every call through.
func TestClients(t *testing.T) {
	const policy = `{"methodConfig": [{"name": [{"service": "grpc.health.v1.Health"}],
	  "retryPolicy": {"maxAttempts": 5, "initialBackoff": "0.001s", "maxBackoff": "0.001s",
	  "backoffMultiplier": 1, "retryableStatusCodes": ["RESOURCE_EXHAUSTED"]}}]}`
	for _, c := range []struct {
		name    string
		opt     grpc.DialOption
		every   time.Duration // a token per every
		refused bool
	}{
		{"no retries", grpc.WithDisableRetry(), time.Hour, true},
		{"retry policy", grpc.WithDefaultServiceConfig(policy), 50 * time.Millisecond, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			client := dial(t, start(t, newLimiter("", rate.Every(c.every), 2)), c.opt)
			var mu sync.Mutex
			refused := 0
			var wg sync.WaitGroup
			for range 4 {
				wg.Go(func() {
					_, err := client.Check(t.Context(), &healthpb.HealthCheckRequest{})
					mu.Lock()
					defer mu.Unlock()
					if status.Code(err) == codes.ResourceExhausted {
						refused++
					} else if err != nil {
						t.Error(err)
					}
				})
			}
			wg.Wait()
			if (refused > 0) != c.refused {
				t.Fatalf("%d of 4 calls refused", refused)
			}
		})
	}
}

// A store is a Limiter of another module that the example's server is tested with: one call
// per every, at most one at once.
type store struct {
	name string
	new  func(t *testing.T, every time.Duration) retryafter.Limiter
}

var stores = []store{
	{"memory", func(_ *testing.T, every time.Duration) retryafter.Limiter {
		return newLimiter("", rate.Every(every), 1)
	}},
	{"redisstore", func(t *testing.T, every time.Duration) retryafter.Limiter {
		return newLimiter(redistest.Addr(t), rate.Every(every), 1)
	}},
	{"httpratestore", func(_ *testing.T, every time.Duration) retryafter.Limiter { return httpratestore.New(1, every, nil) }},
}

// start serves newServer(l, opts...) on a loopback port until t ends and returns its address.
func start(t *testing.T, l retryafter.Limiter, opts ...grpclimit.Option) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := newServer(l, opts...)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return lis.Addr().String()
}

// dial returns a health client of the server at addr, closed when t ends.
func dial(t *testing.T, addr string, opt grpc.DialOption) healthpb.HealthClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, opt, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return healthpb.NewHealthClient(conn)
}

// An answer is what a client saw of a call: its code, the milliseconds of its RetryInfo (-1
// without one) and its pushback trailer.
type answer struct {
	code     codes.Code
	ms       int64
	pushback []string
}

// check calls Health.Check, which costs 1, and returns what came back.
func check(ctx context.Context, c healthpb.HealthClient) answer {
	var trailer metadata.MD
	_, err := c.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Trailer(&trailer))
	return read(err, trailer)
}

// list calls Health.List, which listCost makes cost more than the tests' limits ever admit, and
// returns what came back.
func list(ctx context.Context, c healthpb.HealthClient) answer {
	var trailer metadata.MD
	_, err := c.List(ctx, &healthpb.HealthListRequest{}, grpc.Trailer(&trailer))
	return read(err, trailer)
}

// read returns what a client saw of a call that ended with err and trailer.
func read(err error, trailer metadata.MD) answer {
	a := answer{code: status.Code(err), ms: -1, pushback: trailer.Get(grpclimit.PushbackKey)}
	for _, d := range status.Convert(err).Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			w := ri.GetRetryDelay().AsDuration()
			a.ms = w.Milliseconds()
			if w%time.Millisecond != 0 {
				a.ms = -2 // not whole milliseconds
			}
		}
	}
	return a
}

// listCost costs Health.List 3, more than the tests' bursts, and any other call 1.
func listCost(_ context.Context, method string) int {
	if method == healthpb.Health_List_FullMethodName {
		return 3
	}
	return 1
}

// outcomes records what the interceptor did with each call, in order.
type outcomes struct {
	mu   sync.Mutex
	list []retryafter.Outcome
}

func (o *outcomes) hook(_ context.Context, _ string, out retryafter.Outcome, _ retryafter.Decision) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.list = append(o.list, out)
}

// since returns the outcomes recorded from the n-th on.
func (o *outcomes) since(n int) []retryafter.Outcome {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.list[n:])
}

// TestStores runs the example's server on the Limiters of redisstore (on a real Redis) and
// httpratestore, on the real clock, since a Redis store decides at Redis's: a refused call's
// RetryInfo and pushback agree, are no shorter than the wait the store itself reports right
// after, and no longer than that plus the time between the two and a millisecond; a grpc-go
// client whose retry policy backs off for a millisecond is admitted on its first retry, after
// the pushback; and a call above what the limit ever admits is told -1, which the same client
// obeys by not retrying.
func TestStores(t *testing.T) {
	const every = 300 * time.Millisecond
	const policy = `{"methodConfig": [{"name": [{"service": "grpc.health.v1.Health"}],
	  "retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.001s", "maxBackoff": "0.001s",
	  "backoffMultiplier": 1, "retryableStatusCodes": ["RESOURCE_EXHAUSTED"]}}]}`
	for _, s := range stores {
		t.Run(s.name, func(t *testing.T) {
			l := s.new(t, every)
			key := fmt.Sprintf("%s-%d", t.Name(), time.Now().UnixNano()) // apart from other runs on a shared Redis
			var seen outcomes
			addr := start(t, l, grpclimit.WithKeyFunc(func(context.Context, string) (string, error) { return key, nil }),
				grpclimit.WithCost(listCost), grpclimit.WithDecisionHook(seen.hook))
			once, retrying := dial(t, addr, grpc.WithDisableRetry()), dial(t, addr, grpc.WithDefaultServiceConfig(policy))

			begin, a := time.Now(), check(t.Context(), once)
			for a.code == codes.OK { // the first call, or a slow machine's, whose wait was over
				begin, a = time.Now(), check(t.Context(), once)
			}
			d, err := l.Decide(t.Context(), key, 1, time.Now()) // a refusal costs nothing: the wait left
			if err != nil {
				t.Fatal(err)
			}
			took := time.Since(begin) // at most the time between the two decisions
			told := time.Duration(a.ms) * time.Millisecond
			if a.code != codes.ResourceExhausted || a.ms < 1 || len(a.pushback) != 1 || a.pushback[0] != strconv.FormatInt(a.ms, 10) {
				t.Fatalf("refused call: %v, RetryInfo %d ms, pushback %q; want RESOURCE_EXHAUSTED and the same milliseconds", a.code, a.ms, a.pushback)
			}
			if d.Allowed || told < d.RetryAfter || told > d.RetryAfter+took+time.Millisecond {
				t.Fatalf("told %v; the store then said %v (allowed %v), within %v", told, d.RetryAfter, d.Allowed, took)
			}

			n := len(seen.since(0))
			if a := check(t.Context(), retrying); a.code != codes.OK {
				t.Fatalf("call with a retry policy: %v", a.code)
			}
			got := seen.since(n)
			want := []retryafter.Outcome{edge.Refused, edge.Admitted}
			if len(got) == 1 && got[0] == edge.Admitted {
				t.Logf("the wait was over before the call with a retry policy: nothing to retry") // a slow machine
			} else if !slices.Equal(got, want) {
				t.Fatalf("call with a retry policy: the server saw %v, want %v", got, want)
			}

			n = len(seen.since(0))
			if a := list(t.Context(), retrying); a.code != codes.ResourceExhausted || a.ms != -1 || len(a.pushback) != 1 || a.pushback[0] != "-1" {
				t.Fatalf("call above the burst: %v, RetryInfo %d ms, pushback %q; want RESOURCE_EXHAUSTED, none and -1", a.code, a.ms, a.pushback)
			}
			if got := seen.since(n); !slices.Equal(got, []retryafter.Outcome{edge.Refused}) {
				t.Fatalf("call above the burst: the server saw %v, want one refusal, not retried", got)
			}
		})
	}
}

// TestGRPCMetrics counts the decisions of the example's server with otelmetrics, through
// grpclimit's decision hook, as a real grpc-go client calls it: on the instruments of the HTTP
// middleware, under the method, with the wait the refused call was told, rounded up to the
// second, and never the client's address.
func TestGRPCMetrics(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { mp.Shutdown(context.Background()) })
	m, err := otelmetrics.New(mp)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	l := m.Limiter("memory", newLimiter("", rate.Every(7*time.Second/3), 2))
	addr := start(t, l, grpclimit.WithDecisionHook(m.CallDecided), grpclimit.WithCost(listCost),
		grpclimit.WithClock(func() time.Time { return t0 }),
		grpclimit.WithExempt(func(_ context.Context, method string) bool { return method == healthpb.Health_Watch_FullMethodName }))
	client := dial(t, addr, grpc.WithDisableRetry())
	for range 3 { // admitted twice, then refused with a wait
		check(t.Context(), client)
	}
	list(t.Context(), client)             // refused for ever
	told := check(t.Context(), client).ms // refused again: a wait of 2.333333333 s, told 2334 ms
	ctx, cancel := context.WithCancel(t.Context())
	watch, err := client.Watch(ctx, &healthpb.HealthCheckRequest{}) // a stream, exempt
	if err != nil {
		t.Fatal(err)
	}
	if _, err := watch.Recv(); err != nil {
		t.Fatal(err)
	}
	cancel()

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(t.Context(), &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, metric := range sm.Metrics {
			switch d := metric.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					got[metric.Name+" "+p.Attributes.Encoded(attribute.DefaultEncoder())] += p.Value
				}
			case metricdata.Histogram[int64]:
				for _, p := range d.DataPoints {
					got[metric.Name+" "+p.Attributes.Encoded(attribute.DefaultEncoder())+" count"] += int64(p.Count)
					got[metric.Name+" "+p.Attributes.Encoded(attribute.DefaultEncoder())+" sum"] += p.Sum
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					got[metric.Name+" "+p.Attributes.Encoded(attribute.DefaultEncoder())+" count"] += int64(p.Count)
				}
			}
		}
	}
	method := "grpc.health.v1.Health/Check"
	want := map[string]int64{
		"retryafter.decisions retryafter.outcome=admitted,retryafter.policy.name=default,rpc.method=" + method:                 2,
		"retryafter.decisions retryafter.outcome=refused,retryafter.policy.name=default,rpc.method=" + method:                  2,
		"retryafter.decisions retryafter.outcome=refused,retryafter.policy.name=default,rpc.method=grpc.health.v1.Health/List": 1,
		"retryafter.decisions retryafter.outcome=exempt,rpc.method=grpc.health.v1.Health/Watch":                                1,
		"retryafter.near_limit.decisions retryafter.policy.name=default,rpc.method=" + method:                                  1,
		"retryafter.retry_after retryafter.policy.name=default,rpc.method=" + method + " count":                                2,
		"retryafter.retry_after retryafter.policy.name=default,rpc.method=" + method + " sum":                                  2 * (told + 999) / 1000,
		"retryafter.limiter.duration retryafter.limiter.name=memory count":                                                     5,
	}
	if told != 2334 || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("told %d ms; recorded:\n%v\nwant:\n%v", told, got, want)
	}
}

// TestExactWait runs the example's server on the Limiters that decide at the instant they are
// given, httpratestore's and the one in memory, on an injected clock: over many limits, windows
// and instants, a refused call's RetryInfo is the wait rounded up to the millisecond, so that a
// call made exactly that much later is admitted, and one a millisecond earlier is not.
func TestExactWait(t *testing.T) {
	for _, c := range []struct {
		name string
		new  func(limit int, window time.Duration) retryafter.Limiter
	}{
		{"memory", func(limit int, window time.Duration) retryafter.Limiter {
			return newLimiter("", rate.Limit(float64(limit)/window.Seconds()), limit)
		}},
		{"httpratestore", func(limit int, window time.Duration) retryafter.Limiter {
			return httpratestore.New(limit, window, nil)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, 2))
			for i := range 40 {
				limit := 1 + rng.IntN(5)
				window := time.Duration(1+rng.Int64N(20_000)) * time.Millisecond / 7 // off the millisecond
				var now atomic.Int64
				now.Store(time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC).Add(time.Duration(rng.Int64N(int64(time.Hour)))).UnixNano())
				addr := start(t, c.new(limit, window), grpclimit.WithClock(func() time.Time { return time.Unix(0, now.Load()) }))
				client := dial(t, addr, grpc.WithDisableRetry())
				for range limit { // spent at instants spread over a window
					now.Add(rng.Int64N(int64(window) / int64(limit)))
					check(t.Context(), client)
				}
				a := check(t.Context(), client)
				for a.code == codes.OK { // a sliding window may have let one more in
					a = check(t.Context(), client)
				}
				if a.code != codes.ResourceExhausted || a.ms < 1 || len(a.pushback) != 1 || a.pushback[0] != strconv.FormatInt(a.ms, 10) {
					t.Fatalf("case %d (%d per %v): %v, RetryInfo %d ms, pushback %q", i, limit, window, a.code, a.ms, a.pushback)
				}
				now.Add(int64(time.Duration(a.ms-1) * time.Millisecond))
				if early := check(t.Context(), client); early.code != codes.ResourceExhausted {
					t.Fatalf("case %d (%d per %v): a call %d ms later, a millisecond early: %v", i, limit, window, a.ms-1, early.code)
				}
				now.Add(int64(time.Millisecond))
				if late := check(t.Context(), client); late.code != codes.OK {
					t.Fatalf("case %d (%d per %v): a call %d ms later, as told: %v", i, limit, window, a.ms, late.code)
				}
			}
		})
	}
}

// TestRedisDown runs the example's server on a Redis that does not answer: a call ends with
// UNAVAILABLE and a wait of one second, as RetryInfo and pushback, and the client is not told
// why.
func TestRedisDown(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close() // nothing answers there now
	var logged atomic.Int64
	client := dial(t, start(t, newLimiter(addr, rate.Every(time.Second), 5),
		grpclimit.WithErrorHook(func(context.Context, string, error) { logged.Add(1) })), grpc.WithDisableRetry())
	var trailer metadata.MD
	_, err = client.Check(t.Context(), &healthpb.HealthCheckRequest{}, grpc.Trailer(&trailer))
	a := read(err, trailer)
	if a.code != codes.Unavailable || a.ms != 1000 || len(a.pushback) != 1 || a.pushback[0] != "1000" {
		t.Fatalf("%v, RetryInfo %d ms, pushback %q; want UNAVAILABLE and 1000 ms", a.code, a.ms, a.pushback)
	}
	if n := logged.Load(); n != 1 {
		t.Fatalf("the error hook saw %d errors, want 1", n)
	}
	if msg := status.Convert(err).Message(); strings.Contains(msg, addr) || strings.Contains(msg, "refused") {
		t.Fatalf("the client is told %q", msg)
	}
}
