package redisstore

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/time/rate"

	"github.com/retryafter/retryafter"
	"github.com/retryafter/retryafter/internal/testkit"
)

// outages is a redis.Scripter that passes scripts to a real Redis until it is told that Redis
// is down, and from then refuses them as a client does when nothing listens on the port.
type outages struct {
	redis.Scripter
	down atomic.Bool
}

func (o *outages) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	if o.down.Load() {
		return redis.NewCmdResult(nil, syscall.ECONNREFUSED)
	}
	return o.Scripter.Eval(ctx, script, keys, args...)
}

func (o *outages) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	if o.down.Load() {
		return redis.NewCmdResult(nil, syscall.ECONNREFUSED)
	}
	return o.Scripter.EvalSha(ctx, sha, keys, args...)
}

// TestOutageModes runs a fleet of 3 replicas sharing a limit of 10/s with bursts of 6, on an
// injected clock, with one client sending each replica a request every 10 ms (300/s, 30 times
// the limit): 5 s with Redis up, then a 10 s outage, then 5 s with Redis back. It measures, per
// mode of the outage, what the fleet admitted during the outage and its over-admission over the
// whole run, admitted − (burst + limit × elapsed), and checks each mode's bound: failing closed
// admits nothing while Redis is down, failing open admits everything, and the local fallback
// at most max(burst, replicas) + limit × 10 s, each replica within its share. Once Redis is back
// it decides again, from the state it kept. Run with -v for the figures.
func TestOutageModes(t *testing.T) {
	const (
		replicas = 3
		limit    = 10
		burst    = 6
		tick     = 10 * time.Millisecond
		before   = 5 * time.Second
		outage   = 10 * time.Second
		after    = 5 * time.Second
	)
	client := newClient(t, sharedAddr(t))
	for _, mode := range []string{"fail closed", "fail open", "local fallback"} {
		t.Run(mode, func(t *testing.T) {
			clock := testkit.NewClock(t0)
			prefix := testPrefix(t)
			var stores []*Store
			var fleet []http.Handler
			var down []*outages
			for range replicas {
				o := &outages{Scripter: keptKeys{client}}
				opts := []Option{WithPrefix(prefix), WithTimeout(testTimeout), withCallerClock(), WithProbeInterval(time.Hour)}
				var mw []retryafter.Option
				switch mode {
				case "fail open":
					mw = append(mw, retryafter.WithFailOpen(true))
				case "local fallback":
					opts = append(opts, WithLocalFallback(replicas))
				}
				s := New(o, limit, burst, opts...)
				stores = append(stores, s)
				down = append(down, o)
				fleet = append(fleet, retryafter.LimitWith(s, append(mw, retryafter.WithClock(clock.Now))...)(okHandler))
			}
			// run sends requests for d and returns how many each replica admitted.
			run := func(d time.Duration) (admitted [replicas]int) {
				for end := clock.Now().Add(d); clock.Now().Before(end); clock.Advance(tick) {
					for i, h := range fleet {
						w := get(h, "192.0.2.1:1")
						switch w.Code {
						case http.StatusOK:
							admitted[i]++
						case http.StatusTooManyRequests:
							wantRefusal(t, w, clock.Now())
						case http.StatusServiceUnavailable:
							if mode != "fail closed" || w.Header().Get("Retry-After") != "1" {
								t.Fatalf("%s: 503 with Retry-After %q", mode, w.Header().Get("Retry-After"))
							}
						default:
							t.Fatalf("%s: status %d", mode, w.Code)
						}
					}
				}
				return admitted
			}
			sum := func(a [replicas]int) int { return a[0] + a[1] + a[2] }

			up1 := sum(run(before))
			for i, o := range down {
				o.down.Store(true)
				for range downAfter {
					if _, err := stores[i].Decide(context.Background(), "probe", 0, clock.Now()); mode != "local fallback" && !errors.Is(err, ErrUnavailable) {
						t.Fatalf("Redis down: %v", err)
					}
				}
				if err := stores[i].Down(); !errors.Is(err, ErrUnavailable) {
					t.Fatalf("Down() while Redis is down: %v", err)
				}
			}
			during := run(outage)
			for _, o := range down {
				o.down.Store(false)
			}
			for _, s := range stores {
				s.health.ok() // Redis is back; TestFailFast checks the probe that would find out
			}
			up2 := sum(run(after))

			total := up1 + sum(during) + up2
			elapsed := before + outage + after
			over := total - (burst + int(limit*elapsed.Seconds()))
			overDuring := sum(during) - int(limit*outage.Seconds())
			t.Logf("%s: admitted %d before, %d during the %v outage (%v per replica; limit × outage = %d), %d after; over-admission over %v: %+d, during the outage: %+d",
				mode, up1, sum(during), outage, during, int(limit*outage.Seconds()), up2, elapsed, over, overDuring)

			// Redis decides exactly before the outage: at 30 times the limit, the burst and then
			// one request per 100 ms, the last request 10 ms before the end.
			if want := burst + int(limit*(before-tick).Seconds()); up1 != want {
				t.Errorf("before the outage: %d admitted, want %d", up1, want)
			}
			switch mode {
			case "fail closed":
				if sum(during) != 0 {
					t.Errorf("%d admitted during the outage, want 0", sum(during))
				}
			case "fail open":
				if want := replicas * int(outage/tick); sum(during) != want {
					t.Errorf("%d admitted during the outage, want all %d", sum(during), want)
				}
			case "local fallback":
				share := max(1, burst/replicas) + int(float64(limit)/replicas*outage.Seconds())
				for i, n := range during {
					if n > share || n < share-1 {
						t.Errorf("replica %d admitted %d during the outage, want its share, %d", i, n, share)
					}
				}
				if bound := max(burst, replicas) + int(limit*outage.Seconds()); sum(during) > bound {
					t.Errorf("%d admitted during the outage, more than max(burst, replicas) + limit × outage = %d", sum(during), bound)
				}
			}
			if want := int(limit * after.Seconds()); up2 < want-1 || up2 > want+burst {
				t.Errorf("after the outage: %d admitted, want about %d", up2, want)
			}
		})
	}
}

// TestLocalFallbackRetryAfter checks that what a replica decides locally carries the exact wait
// of its share: a client refused while Redis is down, that waits exactly that long, is admitted
// by the same replica, and a microsecond less is not enough.
func TestLocalFallbackRetryAfter(t *testing.T) {
	s := New(&fakeRedis{answer: refusesConnections}, rate.Every(time.Second), 4, WithLocalFallback(2), withCallerClock())
	now := t0
	for i := range 2 {
		if d, err := s.Decide(context.Background(), "k", 1, now); err != nil || !d.Allowed || d.Limit != 2 {
			t.Fatalf("request %d of the local share's burst of 2: %+v, %v", i, d, err)
		}
	}
	// The in-memory bucket's wait, like its admissions, allows a microsecond of slack.
	d, err := s.Decide(context.Background(), "k", 1, now)
	if err != nil || d.Allowed || d.RetryAfter > 2*time.Second || d.RetryAfter < 2*time.Second-time.Microsecond {
		t.Fatalf("over the share: %+v, %v, want refused for 2 s (half of 1/s)", d, err)
	}
	if d, _ := s.Decide(context.Background(), "k", 1, now.Add(d.RetryAfter-time.Microsecond)); d.Allowed {
		t.Fatalf("a microsecond early: admitted")
	}
	if d, _ := s.Decide(context.Background(), "k", 1, now.Add(d.RetryAfter)); !d.Allowed {
		t.Fatalf("after the wait: %+v", d)
	}
	if err := s.Down(); !errors.Is(err, ErrUnavailable) || !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("Down() = %v", err)
	}
	for name, fn := range map[string]func(){"zero replicas": func() { WithLocalFallback(0) }} {
		func() {
			defer func() {
				if r := fmt.Sprint(recover()); r[:12] != "redisstore: " {
					t.Fatalf("%s: recovered %q", name, r)
				}
			}()
			fn()
		}()
	}
}

// TestLocalFallbackRealOutage kills a real redis-server under a store with a local fallback for
// 2 replicas: while it is down, decisions come at once from the local share (a burst of 2 of 4,
// no error, Store.Down reporting the outage); once it runs again (empty: it kept nothing), the
// first probe after it is back makes Redis decide again, with the whole burst.
func TestLocalFallbackRealOutage(t *testing.T) {
	const (
		timeout = 150 * time.Millisecond
		probe   = 200 * time.Millisecond
		margin  = time.Second // scheduling on a loaded machine
	)
	srv := startServer(t)
	s := New(newClient(t, srv.Addr()), rate.Every(time.Hour), 4, WithPrefix(testPrefix(t)),
		WithTimeout(timeout), WithProbeInterval(probe), WithLocalFallback(2))
	ctx := context.Background()
	for range 4 {
		if d, err := s.Decide(ctx, "k", 1, time.Now()); err != nil || !d.Allowed || d.Limit != 4 {
			t.Fatalf("Redis up: %+v, %v", d, err)
		}
	}
	srv.Stop(syscall.SIGKILL)
	now := time.Now()
	for i := range 3 {
		start := time.Now()
		d, err := s.Decide(ctx, "k", 1, now)
		if took := time.Since(start); err != nil || d.Limit != 2 || d.Allowed != (i < 2) || took > timeout+margin {
			t.Fatalf("Redis down, request %d: %+v, %v after %v, want the local share's answer", i, d, err, took)
		}
		if i == 2 && (d.RetryAfter > 2*time.Hour || d.RetryAfter < 2*time.Hour-time.Microsecond) {
			t.Fatalf("refused locally with RetryAfter %v, want the share's 2 h", d.RetryAfter)
		}
	}
	// Three failures in a row take Redis for down; on a loaded machine a timeout seen late
	// counts for nothing, so a few more peeks of another key may be needed.
	for i := 0; s.Down() == nil && i < 10; i++ {
		s.Decide(ctx, "other", 0, now)
	}
	if err := s.Down(); !errors.Is(err, ErrUnavailable) || !s.FallingBack() {
		t.Fatalf("Down() while Redis is down: %v, FallingBack %v", err, s.FallingBack())
	}
	srv.Restart()
	back := time.Now()
	for {
		d, err := s.Decide(ctx, "k", 1, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if d.Limit == 4 {
			if !d.Allowed || d.Remaining != 3 {
				t.Fatalf("Redis back, empty: %+v, want admitted with 3 of 4 left", d)
			}
			break
		}
		if time.Since(back) > probe+timeout+margin {
			t.Fatalf("still deciding locally %v after Redis is back", time.Since(back))
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("Redis decided again %v after it was back", time.Since(back))
	if s.FallingBack() {
		t.Fatal("FallingBack with Redis back")
	}
	if err := s.Down(); err != nil {
		t.Fatalf("Down() after recovery: %v", err)
	}
}
