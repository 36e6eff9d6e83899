package otelmetrics

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"golang.org/x/time/rate"

	"github.com/retryafter/retryafter"
	"github.com/retryafter/retryafter/edge"
)

var ok = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})

// decisions returns the attributes of a retryafter.decisions point.
func decisions(o retryafter.Outcome, policy, route string) []attribute.KeyValue {
	kvs := []attribute.KeyValue{outcomeKey.String(o.String())}
	if policy != "" {
		kvs = append(kvs, policyKey.String(policy))
	}
	if route != "" {
		kvs = append(kvs, routeKey.String(route))
	}
	return kvs
}

// quota returns the attributes of a retryafter.retry_after or near_limit point.
func quota(policy, route string) []attribute.KeyValue {
	return []attribute.KeyValue{policyKey.String(policy), routeKey.String(route)}
}

// want checks that the point of name with kvs has the value (a sum or gauge) or the count (a
// histogram) n; for n = 0, that there is no such point or it is 0.
func want(t *testing.T, s snapshot, n int64, name string, kvs ...attribute.KeyValue) {
	t.Helper()
	p, found := s.at(name, kvs...)
	got := p.value
	switch s[name].Data.(type) {
	case metricdata.Histogram[int64], metricdata.Histogram[float64]:
		got = int64(p.count)
	}
	if (found || n != 0) && got != n {
		t.Fatalf("%s%v = %d (found %v), want %d; all: %v", name, kvs, got, found, n, s.points(name))
	}
}

// TestEveryInstrumentChanges walks one middleware through every outcome and checks, after each
// request, that exactly the instruments it concerns changed, and by how much.
func TestEveryInstrumentChanges(t *testing.T) {
	rd := newReader(t, WithNearLimit(0.5))
	m := rd.m
	now := t0
	store := &fakeStore{l: retryafter.NewTokenBucket(rate.Every(10*time.Second), 4)}
	lim := m.Limiter("redis", store)
	mw := retryafter.NewMiddleware(lim, m.Option(),
		retryafter.WithClock(func() time.Time { return now }),
		retryafter.WithExempt(func(r *http.Request) bool { return r.URL.Path == "/health" }))
	dry := retryafter.NewMiddleware(lim, m.Option(), retryafter.WithDryRun(true),
		retryafter.WithClock(func() time.Time { return now }))
	open := retryafter.NewMiddleware(lim, m.Option(), retryafter.WithFailOpen(true),
		retryafter.WithClock(func() time.Time { return now }))
	h, hDry, hOpen := mw.Handler(ok), dry.Handler(ok), open.Handler(ok)
	const route = "/items/{id}"
	item := func() *http.Request { return request("/items/7", "GET "+route) }
	latency := []attribute.KeyValue{limiterKey.String("redis")}
	failed := []attribute.KeyValue{limiterKey.String("redis"), errorKey.String(Other)}

	// Admitted, 4 tokens to 3: not near the limit of 0.5 × 4.
	serve(h, item())
	s := rd.collect()
	want(t, s, 1, "retryafter.decisions", decisions(edge.Admitted, "default", route)...)
	want(t, s, 0, "retryafter.near_limit.decisions", quota("default", route)...)
	want(t, s, 1, "retryafter.limiter.duration", latency...)
	if p, _ := s.at("retryafter.limiter.duration", latency...); p.sum != 0.003 {
		t.Fatalf("latency sum %v, want the 3 ms of the stopwatch", p.sum)
	}
	want(t, s, 0, "retryafter.retry_after", quota("default", route)...)

	// Admitted to 2 left: not below 2. To 1 and 0: near, twice.
	serve(h, item())
	want(t, rd.collect(), 0, "retryafter.near_limit.decisions", quota("default", route)...)
	serve(h, item())
	serve(h, item())
	s = rd.collect()
	want(t, s, 4, "retryafter.decisions", decisions(edge.Admitted, "default", route)...)
	want(t, s, 2, "retryafter.near_limit.decisions", quota("default", route)...)
	want(t, s, 4, "retryafter.limiter.duration", latency...)

	// Refused, 2.5 s later: 7.5 s to wait, Retry-After: 8, recorded as sent.
	now = now.Add(2500 * time.Millisecond)
	w := serve(h, item())
	if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") != "8" {
		t.Fatalf("refusal: %d, Retry-After %q", w.Code, w.Header().Get("Retry-After"))
	}
	s = rd.collect()
	want(t, s, 1, "retryafter.decisions", decisions(edge.Refused, "default", route)...)
	want(t, s, 1, "retryafter.retry_after", quota("default", route)...)
	if p, _ := s.at("retryafter.retry_after", quota("default", route)...); p.sum != 8 {
		t.Fatalf("retry_after sum %v, want the 8 s sent", p.sum)
	}
	want(t, s, 2, "retryafter.near_limit.decisions", quota("default", route)...)
	want(t, s, 5, "retryafter.limiter.duration", latency...)

	// Dry run: passed on, counted as such; no Retry-After sent, none recorded.
	if w := serve(hDry, item()); w.Code != http.StatusOK {
		t.Fatalf("dry run: %d", w.Code)
	}
	s = rd.collect()
	want(t, s, 1, "retryafter.decisions", decisions(edge.DryRunRefused, "default", route)...)
	want(t, s, 1, "retryafter.retry_after", quota("default", route)...)
	want(t, s, 1, "retryafter.decisions", decisions(edge.Refused, "default", route)...)

	// Exempt: no policy, the limiter not asked.
	serve(h, request("/health", "GET /health"))
	s = rd.collect()
	want(t, s, 1, "retryafter.decisions", decisions(edge.Exempt, "", "/health")...)
	want(t, s, 6, "retryafter.limiter.duration", latency...)

	// The store fails: closed (503), then open (admitted).
	store.err = errors.New("connection refused")
	if w := serve(h, item()); w.Code != http.StatusServiceUnavailable {
		t.Fatalf("failing closed: %d", w.Code)
	}
	if w := serve(hOpen, item()); w.Code != http.StatusOK {
		t.Fatalf("failing open: %d", w.Code)
	}
	s = rd.collect()
	want(t, s, 1, "retryafter.decisions", decisions(edge.FailedClosed, "", route)...)
	want(t, s, 1, "retryafter.decisions", decisions(edge.FailedOpen, "", route)...)
	want(t, s, 2, "retryafter.limiter.duration", failed...)
	want(t, s, 6, "retryafter.limiter.duration", latency...)

	// The store's own state, read at each collection.
	name := limiterKey.String("redis")
	want(t, s, 0, "retryafter.limiter.down", name)
	want(t, s, 0, "retryafter.limiter.local_answers", name)
	want(t, s, 0, "retryafter.limiter.local_fallback", name)
	store.down, store.local, store.fallback = errors.New("redisstore: unavailable"), 17, true
	s = rd.collect()
	want(t, s, 1, "retryafter.limiter.down", name)
	want(t, s, 17, "retryafter.limiter.local_answers", name)
	want(t, s, 1, "retryafter.limiter.local_fallback", name)
	store.down, store.local, store.fallback = nil, 20, false
	s = rd.collect()
	want(t, s, 0, "retryafter.limiter.down", name)
	want(t, s, 20, "retryafter.limiter.local_answers", name)
	want(t, s, 0, "retryafter.limiter.local_fallback", name)
	if _, found := s.at("retryafter.limiter.down", name); !found {
		t.Fatal("retryafter.limiter.down: no point for an up store; want 0")
	}
}

// TestRetryAfterAsSent checks, over many waits, that the Retry-After recorded is the one the
// 429 carries, read back with the strict parser (a Limiter's refusal with no wait, 0 or less,
// is sent and recorded as 1 s), and that a refusal with no Retry-After (a request that can
// never be admitted) records none.
func TestRetryAfterAsSent(t *testing.T) {
	rd := newReader(t)
	var wait time.Duration
	refuse := limiterFunc(func() retryafter.Decision {
		return retryafter.Decision{RetryAfter: wait, Policy: retryafter.Policy{Name: "p"}}
	})
	h := retryafter.NewMiddleware(refuse, rd.m.Option(), retryafter.WithClock(func() time.Time { return t0 })).Handler(ok)
	var total float64
	var count uint64
	for i := range 500 {
		wait = time.Duration(i*i*i) * 997 * time.Microsecond // 0 to about 2 minutes, off the second
		if i == 1 {
			wait = -time.Second
		}
		w := serve(h, request("/", "/"))
		sent, valid := retryafter.ParseRetryAfter(w.Header(), t0)
		if wait <= 0 && sent != time.Second {
			t.Fatalf("wait %v: Retry-After %q, want 1", wait, w.Header().Get("Retry-After"))
		}
		if !valid {
			t.Fatalf("wait %v: Retry-After %q", wait, w.Header().Get("Retry-After"))
		}
		total += sent.Seconds()
		count++
		p, _ := rd.collect().at("retryafter.retry_after", quota("p", "/")...)
		if p.count != count || p.sum != total {
			t.Fatalf("wait %v sent %v: histogram count %d sum %v, want %d and %v", wait, sent, p.count, p.sum, count, total)
		}
	}
	for _, wait = range []time.Duration{rate.InfDuration} {
		w := serve(h, request("/", "/"))
		if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") != "" {
			t.Fatalf("wait %v: %d, Retry-After %q", wait, w.Code, w.Header().Get("Retry-After"))
		}
	}
	s := rd.collect()
	if p, _ := s.at("retryafter.retry_after", quota("p", "/")...); p.count != count {
		t.Fatalf("a 429 with no Retry-After was recorded: count %d, want %d", p.count, count)
	}
	want(t, s, int64(count)+1, "retryafter.decisions", decisions(edge.Refused, "p", "/")...)
}

// limiterFunc is a Limiter that refuses every request with the Decision it returns.
type limiterFunc func() retryafter.Decision

func (f limiterFunc) Decide(_ context.Context, _ string, _ int, _ time.Time) (retryafter.Decision, error) {
	return f(), nil
}

// TestHooksCompose checks that a user's hooks and the metrics all see a refusal, whichever is
// given first: hooks add up.
func TestHooksCompose(t *testing.T) {
	for _, metricsFirst := range []bool{true, false} {
		t.Run(fmt.Sprint("metricsFirst=", metricsFirst), func(t *testing.T) {
			rd := newReader(t)
			var limited, decided []string
			userLimited := retryafter.WithLimitedHook(func(r *http.Request, key string, d retryafter.Decision) {
				limited = append(limited, key)
			})
			userDecided := retryafter.WithDecisionHook(func(r *http.Request, o retryafter.Outcome, d retryafter.Decision) {
				decided = append(decided, o.String())
			})
			opts := []retryafter.Option{userLimited, userDecided, rd.m.Option()}
			if metricsFirst {
				opts = []retryafter.Option{rd.m.Option(), userLimited, userDecided}
			}
			h := retryafter.Limit(rate.Every(time.Hour), 1, append(opts, retryafter.WithClock(func() time.Time { return t0 }))...)(ok)
			serve(h, request("/", "GET /"))
			serve(h, request("/", "GET /"))
			if len(limited) != 1 || limited[0] != "192.0.2.1" {
				t.Fatalf("WithLimitedHook saw %v, want the one refusal", limited)
			}
			if fmt.Sprint(decided) != "[admitted refused]" {
				t.Fatalf("the user's WithDecisionHook saw %v", decided)
			}
			s := rd.collect()
			want(t, s, 1, "retryafter.decisions", decisions(edge.Refused, "default", "/")...)
			want(t, s, 1, "retryafter.decisions", decisions(edge.Admitted, "default", "/")...)
			want(t, s, 1, "retryafter.retry_after", quota("default", "/")...)
		})
	}
}

// TestRoute checks the http.route of patterns: the method left out, as OpenTelemetry's HTTP
// conventions have it, and no attribute when no route matched.
func TestRoute(t *testing.T) {
	for pattern, want := range map[string]string{
		"":                     "",
		"/":                    "/",
		"GET /items/{id}":      "/items/{id}",
		"POST\t /x":            "/x",
		"example.com/a/{b...}": "example.com/a/{b...}",
		"GET example.com/{$}":  "example.com/{$}",
	} {
		if got := route(pattern); got != want {
			t.Errorf("route(%q) = %q, want %q", pattern, got, want)
		}
	}
}

// TestAttributesBounded floods the middleware with distinct keys, client addresses, policy
// names and route patterns, some unfit to record, and checks that the attribute sets recorded
// stay within the bounds, that the names past them are folded into "_OTHER", and that no
// key or address is ever recorded.
func TestAttributesBounded(t *testing.T) {
	const maxPolicies, maxRoutes, n = 3, 5, 3000
	rd := newReader(t, WithMaxPolicies(maxPolicies), WithMaxRoutes(maxRoutes))
	// Each key its own policy, named after it: the worst a WithPolicyFunc can do.
	tb := retryafter.NewTokenBucket(rate.Every(time.Hour), 1, retryafter.WithPolicyFunc(func(key string) retryafter.Policy {
		return retryafter.Policy{Name: "plan-" + key}
	}))
	key := func(r *http.Request) (string, error) { return r.Header.Get("X-Key"), nil }
	h := retryafter.LimitWith(rd.m.Limiter("mem", tb), rd.m.Option(), retryafter.WithKeyFunc(key),
		retryafter.WithClock(func() time.Time { return t0 }))(ok)
	for i := range n {
		k := "k" + strconv.Itoa(i)
		if i%7 == 0 {
			k = "bad\x00name" + k // a policy name unfit to record
		}
		pattern := "GET /r" + strconv.Itoa(i) + "/{id}"
		if i%11 == 0 {
			pattern = "GET /\xff" + strconv.Itoa(i) // not UTF-8
		}
		for range 2 { // admitted, then refused
			r := request("/r/1", pattern)
			r.RemoteAddr = "198.51.100." + strconv.Itoa(i%250) + ":" + strconv.Itoa(1000+i)
			r.Header.Set("X-Key", k)
			serve(h, r)
		}
	}
	s := rd.collect()
	policies, routes := map[string]bool{}, map[string]bool{}
	for _, name := range []string{"retryafter.decisions", "retryafter.retry_after", "retryafter.near_limit.decisions"} {
		for _, set := range sets(s, name) {
			for _, kv := range set.ToSlice() {
				v := kv.Value.AsString()
				switch kv.Key {
				case policyKey:
					policies[v] = true
				case routeKey:
					routes[v] = true
				case outcomeKey:
				default:
					t.Fatalf("%s: attribute %s", name, kv.Key)
				}
				if strings.HasPrefix(v, "k") || strings.Contains(v, "198.51.100.") || strings.Contains(v, "192.0.2.") {
					t.Fatalf("%s records a key or an address: %s=%q", name, kv.Key, v)
				}
			}
		}
	}
	var total int64
	for _, p := range s.points("retryafter.decisions") {
		total += p.value
	}
	if total != 2*n {
		t.Fatalf("%d decisions recorded, want %d", total, 2*n)
	}
	if len(policies) != maxPolicies+1 || !policies[Other] {
		t.Fatalf("policy names %v: want %d and %q", policies, maxPolicies, Other)
	}
	if len(routes) != maxRoutes+1 || !routes[Other] {
		t.Fatalf("routes %v: want %d and %q", routes, maxRoutes, Other)
	}
	for p := range policies {
		if strings.Contains(p, "\x00") {
			t.Fatalf("unfit policy name recorded: %q", p)
		}
	}
	if got, most := len(rd.m.attrs.byKey), 6*(maxPolicies+2)*(maxRoutes+2); got > most {
		t.Fatalf("the attribute cache holds %d sets, past its bound of %d", got, most)
	}
}

// sets returns the attribute sets of the points of name.
func sets(s snapshot, name string) []attribute.Set {
	var out []attribute.Set
	switch d := s[name].Data.(type) {
	case metricdata.Sum[int64]:
		for _, p := range d.DataPoints {
			out = append(out, p.Attributes)
		}
	case metricdata.Histogram[int64]:
		for _, p := range d.DataPoints {
			out = append(out, p.Attributes)
		}
	}
	return out
}

// TestConcurrent records from several goroutines, on new and known policies and routes, while
// the metrics are collected and Limiters wrapped, and checks that every decision is counted
// once (run with -race).
func TestConcurrent(t *testing.T) {
	const workers, each = 4, 400
	rd := newReader(t, WithMaxPolicies(8), WithMaxRoutes(8))
	tb := retryafter.NewTokenBucket(rate.Limit(1000), 1000, retryafter.WithPolicyFunc(func(key string) retryafter.Policy {
		return retryafter.Policy{Name: "p" + key[len(key)-1:]}
	}))
	h := retryafter.LimitWith(rd.m.Limiter("mem", tb), rd.m.Option(), retryafter.WithClock(func() time.Time { return t0 }))(ok)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				r := request("/", "GET /r"+strconv.Itoa(i%13))
				r.RemoteAddr = "192.0.2." + strconv.Itoa(w*10+i%10) + ":1"
				serve(h, r)
			}
		})
	}
	wg.Go(func() {
		for i := range 20 {
			rd.m.Limiter("extra"+strconv.Itoa(i), &fakeStore{l: tb})
			rd.collect()
		}
	})
	wg.Wait()
	var total int64
	for _, p := range rd.collect().points("retryafter.decisions") {
		total += p.value
	}
	if total != workers*each {
		t.Fatalf("%d decisions recorded, want %d", total, workers*each)
	}
}

// call returns the attributes of a gRPC call's point: with the outcome o, those of a
// retryafter.decisions point, without it (o = 0), those of a retry_after or near_limit one.
func call(o retryafter.Outcome, policy, method string) []attribute.KeyValue {
	var kvs []attribute.KeyValue
	if o != 0 {
		kvs = append(kvs, outcomeKey.String(o.String()))
	}
	if policy != "" {
		kvs = append(kvs, policyKey.String(policy))
	}
	return append(kvs, methodKey.String(method))
}

// TestCallDecided walks the hook of grpclimit through every outcome and checks that each is
// counted as the middleware counts a request, under rpc.method (the full method without its
// leading slash) in place of http.route, and the policy only when the limiter was asked.
func TestCallDecided(t *testing.T) {
	rd := newReader(t, WithNearLimit(0.5))
	ctx := context.Background()
	const full, method = "/grpc.testing.TestService/EmptyCall", "grpc.testing.TestService/EmptyCall"
	pro := retryafter.Policy{Name: "pro"}
	rd.m.CallDecided(ctx, full, edge.Admitted, retryafter.Decision{Allowed: true, Limit: 10, Remaining: 9, Policy: pro})
	rd.m.CallDecided(ctx, full, edge.Admitted, retryafter.Decision{Allowed: true, Limit: 10, Remaining: 4, Policy: pro})
	rd.m.CallDecided(ctx, full, edge.Refused, retryafter.Decision{RetryAfter: 1500 * time.Millisecond, Policy: pro})
	rd.m.CallDecided(ctx, full, edge.DryRunRefused, retryafter.Decision{RetryAfter: time.Second})
	for _, o := range []retryafter.Outcome{edge.Exempt, edge.FailedOpen, edge.FailedClosed} {
		rd.m.CallDecided(ctx, full, o, retryafter.Decision{})
	}
	s := rd.collect()
	want(t, s, 2, "retryafter.decisions", call(edge.Admitted, "pro", method)...)
	want(t, s, 1, "retryafter.decisions", call(edge.Refused, "pro", method)...)
	want(t, s, 1, "retryafter.decisions", call(edge.DryRunRefused, "default", method)...)
	for _, o := range []retryafter.Outcome{edge.Exempt, edge.FailedOpen, edge.FailedClosed} {
		want(t, s, 1, "retryafter.decisions", call(o, "", method)...)
	}
	want(t, s, 1, "retryafter.near_limit.decisions", call(0, "pro", method)...)
	if p, _ := s.at("retryafter.retry_after", call(0, "pro", method)...); p.count != 1 || p.sum != 2 {
		t.Fatalf("retry_after of a 1.5 s wait: count %d, sum %v; want 1 and 2", p.count, p.sum)
	}
	for _, name := range []string{"retryafter.decisions", "retryafter.retry_after", "retryafter.near_limit.decisions"} {
		for _, set := range sets(s, name) {
			if _, ok := set.Value(routeKey); ok {
				t.Fatalf("%s: a gRPC call recorded with http.route: %v", name, set.Encoded(attribute.DefaultEncoder()))
			}
		}
	}
}

// TestCallDecidedRetryAfter checks, over many waits, that the wait recorded for a refused call
// is the one it was told, in milliseconds, rounded up to the whole second, and that a call told
// no wait, because it can never be admitted, records none.
func TestCallDecidedRetryAfter(t *testing.T) {
	rd := newReader(t)
	ctx := context.Background()
	var total float64
	var count uint64
	for i := range 500 {
		wait := time.Duration(i*i*i)*997*time.Microsecond - time.Millisecond // -1 ms to about 2 minutes
		rd.m.CallDecided(ctx, "/s/M", edge.Refused, retryafter.Decision{RetryAfter: wait})
		told := max(time.Millisecond, (wait+time.Millisecond-1)/time.Millisecond*time.Millisecond) // as grpclimit: up, at least 1 ms
		secs := told / time.Second
		if told%time.Second != 0 {
			secs++
		}
		total += float64(secs)
		count++
		p, _ := rd.collect().at("retryafter.retry_after", call(0, "default", "s/M")...)
		if p.count != count || p.sum != total {
			t.Fatalf("wait %v told %v: count %d sum %v, want %d and %v", wait, told, p.count, p.sum, count, total)
		}
	}
	rd.m.CallDecided(ctx, "/s/M", edge.Refused, retryafter.Decision{RetryAfter: rate.InfDuration})
	s := rd.collect()
	if p, _ := s.at("retryafter.retry_after", call(0, "default", "s/M")...); p.count != count {
		t.Fatalf("a call told no wait was recorded: count %d, want %d", p.count, count)
	}
	want(t, s, int64(count)+1, "retryafter.decisions", call(edge.Refused, "default", "s/M")...)
}

// TestCallDecidedBounded records calls to many methods, some unfit, beside requests to many
// routes, and checks that methods and routes share the bound of WithMaxRoutes, past which they
// are "_OTHER".
func TestCallDecidedBounded(t *testing.T) {
	const maxRoutes = 4
	rd := newReader(t, WithMaxRoutes(maxRoutes))
	h := retryafter.Limit(rate.Inf, 1, rd.m.Option())(ok)
	ctx := context.Background()
	for i := range 50 {
		serve(h, request("/", "GET /r"+strconv.Itoa(i)))
		m := "/pkg.S/M" + strconv.Itoa(i)
		if i%3 == 0 {
			m = "/pkg.S/\xff" + strconv.Itoa(i) // not UTF-8
		}
		rd.m.CallDecided(ctx, m, edge.Admitted, retryafter.Decision{Allowed: true})
	}
	names := map[string]bool{}
	var total int64
	s := rd.collect()
	for _, set := range sets(s, "retryafter.decisions") {
		for _, k := range []attribute.Key{routeKey, methodKey} {
			if v, ok := set.Value(k); ok {
				names[v.AsString()] = true
			}
		}
	}
	for _, p := range s.points("retryafter.decisions") {
		total += p.value
	}
	if total != 100 {
		t.Fatalf("%d decisions recorded, want 100", total)
	}
	if len(names) != maxRoutes+1 || !names[Other] {
		t.Fatalf("routes and methods recorded: %v; want %d and %q", names, maxRoutes, Other)
	}
}
