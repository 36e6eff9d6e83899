package redisstore

import (
	"time"

	"github.com/retryafter/retryafter"
	"github.com/retryafter/retryafter/edge"
)

// model is an exact model of a Redis holding the keys of several Stores: each key's theoretical
// arrival time in integer nanoseconds, as the scripts keep it, deciding at instants of whole
// microseconds, as the caller's clock reaches the scripts.
type model struct {
	tat map[string]time.Time
}

func newModel() *model { return &model{tat: map[string]time.Time{}} }

// modelLayer is one layer of a request as the model decides it: a key of Redis, its bucket,
// and the cost reserved in it.
type modelLayer struct {
	key      string
	interval time.Duration
	burst    int
	cost     int
}

// maxAhead is how far ahead of now a key's TAT may lie: a debt beyond it is forgiven (state.lua).
const maxAhead = 9e15 * time.Nanosecond

// ahead returns how far key's TAT lies ahead of t, in tats if given, else in the model.
func (m *model) ahead(tats map[string]time.Time, key string, t time.Time) time.Duration {
	tat, ok := tats[key]
	if !ok {
		tat = m.tat[key]
	}
	return max(0, tat.Sub(t))
}

// decide decides a request in layers at t, all or nothing: each layer reserves its cost after
// the layers before it, and if any overshoots its bucket nothing is spent. It returns the
// Decision the scripts report, the layers' merged by edge.Binding.
func (m *model) decide(layers []modelLayer, t time.Time) retryafter.Decision {
	tats := map[string]time.Time{}
	ds := make([]retryafter.Decision, len(layers))
	admitted := true
	for i, l := range layers {
		d := m.ahead(tats, l.key, t)
		horizon := time.Duration(l.burst) * l.interval
		ds[i].Limit = l.burst
		if l.cost > l.burst {
			ds[i].RetryAfter = 1<<63 - 1 // rate.InfDuration
			admitted = false
			continue
		}
		if over := d - horizon + time.Duration(l.cost)*l.interval; over <= 0 {
			ds[i].Allowed = true
		} else {
			ds[i].RetryAfter = (over + time.Microsecond - 1) / time.Microsecond * time.Microsecond
			admitted = false
		}
		tats[l.key] = t.Add(min(d+time.Duration(l.cost)*l.interval, maxAhead))
	}
	if admitted {
		for k, tat := range tats {
			m.tat[k] = tat
		}
	}
	for i, l := range layers {
		d := m.ahead(nil, l.key, t)
		horizon := time.Duration(l.burst) * l.interval
		if d < horizon {
			// The room for requests that spend in every layer on the key (a cost of 0 is a
			// layer charged afterwards, which spends nothing now).
			spenders := 0
			for _, o := range layers {
				if o.key == l.key && o.cost > 0 {
					spenders++
				}
			}
			ds[i].Remaining = int((horizon-d)/l.interval) / max(spenders, 1)
		}
		ds[i].Reset = (d + time.Microsecond - 1) / time.Microsecond * time.Microsecond
	}
	return edge.Binding(ds...)
}

// charge spends cost (or, negative, gives it back, never beyond a full bucket) in key at t,
// whether or not the bucket holds it.
func (m *model) charge(key string, interval time.Duration, cost int, t time.Time) {
	d := m.ahead(nil, key, t)
	if cost >= 0 {
		d = min(d+time.Duration(cost)*interval, maxAhead)
	} else {
		d = max(0, d-time.Duration(-cost)*interval)
	}
	m.tat[key] = t.Add(d)
}
