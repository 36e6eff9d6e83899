package redisstore

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/time/rate"
)

// oldestCharge returns the instant (Store.instant) of the oldest charge that s holds back or has
// on its way to Redis, and whether there is one.
func (s *Store) oldestCharge() (int64, bool) {
	q := s.deferred
	q.mu.Lock()
	defer q.mu.Unlock()
	oldest, found := int64(0), false
	see := func(at int64) {
		if !found || at < oldest {
			oldest, found = at, true
		}
	}
	for _, o := range q.m {
		see(o.at)
	}
	for _, f := range q.sending {
		see(f.at)
	}
	return oldest, found
}

// BenchmarkDeferredChargeAge charges a new key 10,000 times a second for a second with
// WithDeferredCharges(50ms) and a timeout of 1 s (so that a slow round trip on a loaded machine
// is not a lost one), on REDIS_ADDR, and samples every millisecond the age of the oldest
// charge that Redis has not answered yet (held back, or in a round trip). It reports the largest
// age seen (max-age-ms), the longest round trip of a flush (max-flush-ms) and of a PING beside
// it (max-rtt-ms), and, after a Flush, the keys whose charge is not in Redis (lost).
func BenchmarkDeferredChargeAge(b *testing.B) {
	const (
		delay   = 50 * time.Millisecond
		perSec  = 10000
		runtime = time.Second
	)
	client := newClient(b, sharedAddr(b))
	flushes := &timedPipelines{}
	client.AddHook(flushes)
	ctx := context.Background()
	var maxAge, maxRTT time.Duration
	lost := 0
	for b.Loop() {
		prefix := testPrefix(b)
		s := New(client, rate.Every(time.Second), 10, WithPrefix(prefix), WithDeferredCharges(delay), WithTimeout(time.Second))
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() { // the oldest charge's age
			for {
				select {
				case <-stop:
					return
				case <-time.After(time.Millisecond):
				}
				if at, ok := s.oldestCharge(); ok {
					maxAge = max(maxAge, time.Duration(s.instant(time.Now())-at))
				}
			}
		})
		wg.Go(func() { // the round trip, beside
			for {
				select {
				case <-stop:
					return
				case <-time.After(5 * time.Millisecond):
				}
				start := time.Now()
				client.Ping(ctx)
				maxRTT = max(maxRTT, time.Since(start))
			}
		})
		start := time.Now()
		n := 0
		for time.Since(start) < runtime {
			for due := int(time.Since(start) * perSec / time.Second); n < due; n++ {
				s.Charge(ctx, fmt.Sprint(n), 5, time.Now())
			}
			time.Sleep(time.Millisecond)
		}
		close(stop)
		wg.Wait()
		if err := s.Flush(ctx); err != nil {
			b.Fatal(err)
		}
		keys := make([]string, n)
		for i := range keys {
			keys[i] = prefix + fmt.Sprint(i)
		}
		for i := 0; i < n; i += 1000 {
			got, err := client.Exists(ctx, keys[i:min(i+1000, n)]...).Result()
			if err != nil {
				b.Fatal(err)
			}
			lost += min(i+1000, n) - i - int(got)
		}
	}
	b.ReportMetric(float64(maxAge)/float64(time.Millisecond), "max-age-ms")
	b.ReportMetric(float64(maxRTT)/float64(time.Millisecond), "max-rtt-ms")
	b.ReportMetric(float64(flushes.longest.Load())/float64(time.Millisecond), "max-flush-ms")
	b.ReportMetric(float64(lost), "lost")
}

// timedPipelines is a go-redis hook that keeps the longest pipeline's round trip.
type timedPipelines struct{ longest atomic.Int64 }

func (h *timedPipelines) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *timedPipelines) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (h *timedPipelines) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		start := time.Now()
		err := next(ctx, cmds)
		took := int64(time.Since(start))
		for old := h.longest.Load(); took > old && !h.longest.CompareAndSwap(old, took); old = h.longest.Load() {
		}
		return err
	}
}
