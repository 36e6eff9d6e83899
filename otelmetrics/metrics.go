package otelmetrics

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/metric"
	"golang.org/x/time/rate"

	"github.com/retryafter/retryafter"
	"github.com/retryafter/retryafter/edge"
	"github.com/retryafter/retryafter/internal/header"
)

// ScopeName is the name of the instrumentation scope of the meter that [New] takes from its
// MeterProvider.
const ScopeName = "github.com/retryafter/retryafter/otelmetrics"

// Metrics holds the instruments of one instrumentation: the hook that [Metrics.Option] gives
// the middleware, and the Limiters wrapped by [Metrics.Limiter]. Make it with [New]. One Metrics
// can serve several middlewares; it is safe for concurrent use.
type Metrics struct {
	near  float64 // WithNearLimit's fraction
	attrs attrCache

	decisions  metric.Int64Counter
	retryAfter metric.Int64Histogram
	nearLimit  metric.Int64Counter
	waited     metric.Float64Histogram

	duration      metric.Float64Histogram
	down          metric.Int64ObservableGauge
	localAnswers  metric.Int64ObservableCounter
	localFallback metric.Int64ObservableGauge

	since func(time.Time) time.Duration // time.Since; tests replace it

	mu      sync.Mutex
	watched []*watched // the wrapped Limiters that report a state, observed at each collection
	names   map[string]bool
}

// An Option configures [New].
type Option func(*config)

type config struct {
	near        float64
	maxPolicies int
	maxRoutes   int
}

// WithNearLimit sets the fraction of its quota below which an admitted request counts as near
// its limit in retryafter.near_limit.decisions: one whose Decision has Remaining < fraction ×
// Limit. The default is 0.1. A Decision with no Limit (a Limiter that does not track it) is never
// near. It panics unless 0 < fraction ≤ 1.
func WithNearLimit(fraction float64) Option {
	if !(fraction > 0 && fraction <= 1) {
		panic("otelmetrics: WithNearLimit outside (0, 1]")
	}
	return func(c *config) { c.near = fraction }
}

// WithMaxPolicies bounds the distinct policy names recorded: past n, the names not yet seen are
// recorded as "_OTHER". The default is 32. A name longer than 64 bytes or outside printable ASCII
// is always "_OTHER", and an unnamed policy is "default", as the RateLimit fields name it. It
// panics if n is below 1.
func WithMaxPolicies(n int) Option {
	if n < 1 {
		panic("otelmetrics: WithMaxPolicies below 1")
	}
	return func(c *config) { c.maxPolicies = n }
}

// WithMaxRoutes bounds the distinct route patterns, and gRPC methods ([Metrics.CallDecided]),
// recorded: past n, those not yet seen are recorded as "_OTHER". The default is 128. One longer
// than 256 bytes or not valid UTF-8 is always "_OTHER". It panics if n is below 1.
func WithMaxRoutes(n int) Option {
	if n < 1 {
		panic("otelmetrics: WithMaxRoutes below 1")
	}
	return func(c *config) { c.maxRoutes = n }
}

// Bucket boundaries: Retry-After in whole seconds, from a second to a day; a decision's latency
// from 50 µs (memory, a local Redis) to a store's timeout and beyond.
var (
	retryAfterBounds = []float64{1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 86400}
	waitedBounds     = []float64{0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}
	durationBounds   = []float64{0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1}
)

// New returns the Metrics of a meter of mp named [ScopeName], with its instruments made, or the
// error of mp that kept one from being made. It panics if mp or an option is nil.
func New(mp metric.MeterProvider, opts ...Option) (*Metrics, error) {
	if mp == nil {
		panic("otelmetrics: nil MeterProvider")
	}
	c := config{near: 0.1, maxPolicies: 32, maxRoutes: 128}
	for _, o := range opts {
		if o == nil {
			panic("otelmetrics: nil Option")
		}
		o(&c)
	}
	meter := mp.Meter(ScopeName)
	m := &Metrics{near: c.near, since: time.Since, names: map[string]bool{}}
	m.attrs.init(c.maxPolicies, c.maxRoutes)
	var errs [9]error
	m.decisions, errs[0] = meter.Int64Counter("retryafter.decisions",
		metric.WithUnit("{decision}"),
		metric.WithDescription("Requests and gRPC calls the rate limit handled, by what it did with them."))
	m.retryAfter, errs[1] = meter.Int64Histogram("retryafter.retry_after",
		metric.WithUnit("s"),
		metric.WithDescription("The wait each refusal told its client, in whole seconds: the Retry-After of a 429, a gRPC call's wait rounded up."),
		metric.WithExplicitBucketBoundaries(retryAfterBounds...))
	m.nearLimit, errs[2] = meter.Int64Counter("retryafter.near_limit.decisions",
		metric.WithUnit("{decision}"),
		metric.WithDescription("Admitted requests that left their key less than the near-limit fraction of its quota."))
	m.duration, errs[3] = meter.Float64Histogram("retryafter.limiter.duration",
		metric.WithUnit("s"),
		metric.WithDescription("How long a wrapped Limiter took to decide a request."),
		metric.WithExplicitBucketBoundaries(durationBounds...))
	m.down, errs[4] = meter.Int64ObservableGauge("retryafter.limiter.down",
		metric.WithUnit("{limiter}"),
		metric.WithDescription("1 while a wrapped Limiter knows its store to be down, else 0."))
	m.localAnswers, errs[5] = meter.Int64ObservableCounter("retryafter.limiter.local_answers",
		metric.WithUnit("{decision}"),
		metric.WithDescription("Decisions a wrapped Limiter answered from its local memory of refusals, without a round trip."))
	m.localFallback, errs[6] = meter.Int64ObservableGauge("retryafter.limiter.local_fallback",
		metric.WithUnit("{limiter}"),
		metric.WithDescription("1 while a wrapped Limiter decides locally in place of its store, else 0."))
	_, errs[7] = meter.RegisterCallback(m.observe, m.down, m.localAnswers, m.localFallback)
	m.waited, errs[8] = meter.Float64Histogram("retryafter.waited",
		metric.WithUnit("s"),
		metric.WithDescription("How long each request or call that waited for its place (retryafter.WithWait) waited before it was served."),
		metric.WithExplicitBucketBoundaries(waitedBounds...))
	if err := errors.Join(errs[:]...); err != nil {
		return nil, err
	}
	return m, nil
}

// Option returns the [retryafter.Option] that instruments a middleware: a
// [retryafter.WithDecisionHook] that records every request's outcome, the Retry-After of each
// 429, the admitted requests near their limit, and how long each request that waited for its
// place ([edge.Waited]) waited. Hooks add up, so the middleware's other
// hooks ([retryafter.WithLimitedHook], [retryafter.WithErrorHook], another decision hook) are
// called as well, each in the order given, whichever comes first.
func (m *Metrics) Option() retryafter.Option {
	return retryafter.WithDecisionHook(m.decided)
}

// decided records what the middleware did with r.
func (m *Metrics) decided(r *http.Request, o retryafter.Outcome, d retryafter.Decision) {
	m.record(r.Context(), attrKey{outcome: o, route: route(r.Pattern)}, d)
}

// CallDecided records what a gRPC server interceptor did with a call to fullMethod
// ("/package.Service/Method"), on the instruments the hook of [Metrics.Option] records a request
// on: it is a hook for grpclimit.WithDecisionHook, so that a Metrics counts a gRPC server's
// decisions without this module requiring gRPC.
//
//	grpclimit.UnaryServerInterceptor(limiter, grpclimit.WithDecisionHook(m.CallDecided))
//
// The method is recorded as rpc.method, "package.Service/Method", as OpenTelemetry's RPC
// conventions name it, where a request has http.route; methods and routes share the bound of
// [WithMaxRoutes]. A refused call's wait is recorded in retryafter.retry_after rounded up to the
// whole second, at least 1, though the call was told it to the millisecond; a call told no wait
// (one that can never be admitted) records none.
func (m *Metrics) CallDecided(ctx context.Context, fullMethod string, o retryafter.Outcome, d retryafter.Decision) {
	m.record(ctx, attrKey{outcome: o, route: strings.TrimPrefix(fullMethod, "/"), rpc: true}, d)
}

// record records a decision d with outcome k.outcome, under the route or method of k.
func (m *Metrics) record(ctx context.Context, k attrKey, d retryafter.Decision) {
	if decidedByPolicy(k.outcome) {
		if k.policy = d.Policy.Name; k.policy == "" {
			k.policy = "default"
		}
	}
	a := m.attrs.get(k)
	m.decisions.Add(ctx, 1, a.decision...)
	switch k.outcome {
	case edge.Refused:
		// The middleware sends no Retry-After for a wait of 0 or less, grpclimit a wait of a
		// millisecond; neither sends one that is never over.
		if (d.RetryAfter > 0 || k.rpc) && d.RetryAfter < rate.InfDuration {
			m.retryAfter.Record(ctx, header.DelaySeconds(d.RetryAfter), a.retryAfter...) // rounded up, at least 1
		}
	case edge.Admitted:
		if d.Limit > 0 && float64(d.Remaining) < m.near*float64(d.Limit) {
			m.nearLimit.Add(ctx, 1, a.quota...)
		}
	case edge.Waited:
		m.waited.Record(ctx, d.RetryAfter.Seconds(), a.retryAfter...)
	}
}

// decidedByPolicy reports whether a request of outcome o was decided by the limiter, whose
// Decision names the policy.
func decidedByPolicy(o retryafter.Outcome) bool {
	switch o {
	case edge.Admitted, edge.Refused, edge.DryRunRefused, edge.Waited, edge.DryRunWaited:
		return true
	}
	return false
}
