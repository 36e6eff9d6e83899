package otelmetrics

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/retryafter/retryafter"
	"github.com/retryafter/retryafter/edge"
)

// A DownReporter is a Limiter that knows when its store is down: Down returns the error that
// showed it while the store is known to be down, and nil while it answers. redisstore.Store is
// one. [Metrics.Limiter] observes it as retryafter.limiter.down.
type DownReporter interface {
	Down() error
}

// A LocalAnswerCounter is a Limiter that answers some decisions from a local memory of
// refusals, without a round trip to its store: LocalAnswers returns how many it has answered so,
// since it was made, and never decreases. [Metrics.Limiter] observes it as
// retryafter.limiter.local_answers.
type LocalAnswerCounter interface {
	LocalAnswers() uint64
}

// A FallbackReporter is a Limiter that can decide locally in place of its store (redisstore's
// WithLocalFallback, during an outage): FallingBack reports whether it does now.
// [Metrics.Limiter] observes it as retryafter.limiter.local_fallback.
type FallbackReporter interface {
	FallingBack() bool
}

// Limiter returns a Limiter that decides as l does and records, under name, how long each of its
// decisions takes in retryafter.limiter.duration (with error.type "timeout", "canceled" or
// "_OTHER" when it fails), and, at each collection, the state of l that it reports through
// [DownReporter], [LocalAnswerCounter] and [FallbackReporter], whichever l implements.
//
// The Limiter it returns is a [retryafter.Charger] when l is one, promises places as l does
// ([edge.Reserver], for [retryafter.WithWait]), and combines in an
// [retryafter.All] as l does with the other wrapped Limiters next to it (timed then as one
// decision, under the first one's name): wrap every Limiter of an All or none, and list those
// of one store together. Wrap the stores, not what All, Shared, ChargedAfter or Peek make of
// them, whose layers the middleware must see: Limiter panics when given one, or any other
// [edge.Composite]. It also panics if
// l is nil, or name is empty, longer than 64 bytes, outside printable ASCII, or given before.
func (m *Metrics) Limiter(name string, l retryafter.Limiter) retryafter.Limiter {
	if l == nil {
		panic("otelmetrics: Limiter of a nil Limiter")
	}
	if name == "" || !validPolicy(name) {
		panic("otelmetrics: Limiter name empty, longer than 64 bytes or outside printable ASCII")
	}
	if _, ok := l.(edge.Composite); ok {
		panic("otelmetrics: Limiter of an All, Shared, ChargedAfter, Peek or other Composite: wrap the Limiters inside it")
	}
	set := attribute.NewSet(limiterKey.String(name))
	w := &watched{set: metric.WithAttributeSet(set)}
	w.down, _ = l.(DownReporter)
	w.local, _ = l.(LocalAnswerCounter)
	w.fallback, _ = l.(FallbackReporter)

	m.mu.Lock()
	defer m.mu.Unlock()
	if m.names[name] {
		panic(fmt.Sprintf("otelmetrics: Limiter name %q given twice", name))
	}
	m.names[name] = true
	if w.down != nil || w.local != nil || w.fallback != nil {
		m.watched = append(m.watched, w)
	}
	return newTimed(m, l, set).as(true)
}

// watched is a wrapped Limiter that reports a state, and the attributes of its name.
type watched struct {
	set      metric.MeasurementOption
	down     DownReporter
	local    LocalAnswerCounter
	fallback FallbackReporter
}

// observe reports the state of every watched Limiter.
func (m *Metrics) observe(_ context.Context, o metric.Observer) error {
	m.mu.Lock()
	ws := m.watched
	m.mu.Unlock()
	for _, w := range ws {
		if w.down != nil {
			o.ObserveInt64(m.down, b2i(w.down.Down() != nil), w.set)
		}
		if w.local != nil {
			o.ObserveInt64(m.localAnswers, int64(min(w.local.LocalAnswers(), 1<<63-1)), w.set)
		}
		if w.fallback != nil {
			o.ObserveInt64(m.localFallback, b2i(w.fallback.FallingBack()), w.set)
		}
	}
	return nil
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// timed is the Limiter that Metrics.Limiter returns for a Limiter that is neither a Charger
// nor an [edge.Reserver], and what the others embed.
type timed struct {
	m *Metrics
	l retryafter.Limiter

	ok, timeout, canceled, other []metric.RecordOption // by the error, if any
}

func newTimed(m *Metrics, l retryafter.Limiter, set attribute.Set) *timed {
	opts := func(errType string) []metric.RecordOption {
		s := set
		if errType != "" {
			kvs := append(set.ToSlice(), errorKey.String(errType))
			s = attribute.NewSet(kvs...)
		}
		return []metric.RecordOption{metric.WithAttributeSet(s)}
	}
	return &timed{m: m, l: l, ok: opts(""), timeout: opts("timeout"), canceled: opts("canceled"), other: opts(Other)}
}

// Decide implements [retryafter.Limiter]: l's decision, timed.
func (t *timed) Decide(ctx context.Context, key string, cost int, now time.Time) (retryafter.Decision, error) {
	start := time.Now()
	d, err := t.l.Decide(ctx, key, cost, now)
	t.record(ctx, start, err)
	return d, err
}

// as returns t as the Limiter to hand out: one that promises places when l does
// ([edge.Reserver]), and, with charger, that is a [retryafter.Charger] when l is one, so that
// the wrapper claims no more than l can do, nor less.
func (t *timed) as(charger bool) retryafter.Limiter {
	c, charges := t.l.(retryafter.Charger)
	r, reserves := t.l.(edge.Reserver)
	charges = charges && charger
	switch {
	case charges && reserves:
		return &timedChargerReserver{timedReserver{t, r}, c}
	case charges:
		return &timedCharger{t, c}
	case reserves:
		return &timedReserver{t, r}
	}
	return t
}

// timedOf returns t, through any wrapper that embeds it: the Limiters a Metrics handed out.
func (t *timed) timedOf() *timed { return t }

// record records how long a decision that began at start took, by its error.
func (t *timed) record(ctx context.Context, start time.Time, err error) {
	elapsed := t.m.since(start)
	opts := t.ok
	switch {
	case err == nil:
	case errors.Is(err, context.DeadlineExceeded):
		opts = t.timeout
	case errors.Is(err, context.Canceled):
		opts = t.canceled
	default:
		opts = t.other
	}
	t.m.duration.Record(ctx, elapsed.Seconds(), opts...)
}

// Combine implements [edge.Combiner]: the Limiters wrapped in layers, combined as l
// combines them, timed as one under the first one's name; ok is false when l does not combine,
// or a layer is not wrapped by a Metrics.
func (t *timed) Combine(layers []edge.Layer) (retryafter.Limiter, bool) {
	c, ok := t.l.(edge.Combiner)
	if !ok {
		return nil, false
	}
	inner := make([]edge.Layer, len(layers))
	for i, lay := range layers {
		w, ok := lay.Limiter.(interface{ timedOf() *timed })
		if !ok {
			return nil, false
		}
		lay.Limiter = w.timedOf().l
		inner[i] = lay
	}
	l, ok := c.Combine(inner)
	if !ok {
		return nil, false
	}
	return (&timed{m: t.m, l: l, ok: t.ok, timeout: t.timeout, canceled: t.canceled, other: t.other}).as(false), true
}

// timedCharger is the Limiter that Metrics.Limiter returns for a Charger.
type timedCharger struct {
	*timed
	c retryafter.Charger
}

// Charge implements [retryafter.Charger]: l's own Charge.
func (t *timedCharger) Charge(ctx context.Context, key string, cost int, now time.Time) error {
	return t.c.Charge(ctx, key, cost, now)
}

// timedReserver is the Limiter that Metrics.Limiter returns for an [edge.Reserver].
type timedReserver struct {
	*timed
	r edge.Reserver
}

// Reserve implements [edge.Reserver]: l's Reserve, timed.
func (t *timedReserver) Reserve(ctx context.Context, key string, cost int, now time.Time, maxWait time.Duration) (retryafter.Decision, error) {
	start := time.Now()
	d, err := t.r.Reserve(ctx, key, cost, now, maxWait)
	t.record(ctx, start, err)
	return d, err
}

// Release implements [edge.Reserver]: l's own Release.
func (t *timedReserver) Release(ctx context.Context, key string, cost int, now time.Time) error {
	return t.r.Release(ctx, key, cost, now)
}

// timedChargerReserver is the Limiter that Metrics.Limiter returns for a Charger that is an
// [edge.Reserver].
type timedChargerReserver struct {
	timedReserver
	c retryafter.Charger
}

// Charge implements [retryafter.Charger]: l's own Charge.
func (t *timedChargerReserver) Charge(ctx context.Context, key string, cost int, now time.Time) error {
	return t.c.Charge(ctx, key, cost, now)
}
