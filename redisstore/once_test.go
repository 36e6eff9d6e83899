package redisstore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/time/rate"
)

// TestScriptRunsOnce resets the client's connection after Redis ran a script and before its
// reply reached the client, as CLIENT KILL, a load balancer or a failover does, through each
// path that could send the script again: a decision's own call, a charge's, a flush's
// pipeline, and a Cluster client's. go-redis retries a command after EOF
// by default; a script that ran twice would have spent the cost twice. Each key must show, to
// another store, exactly the one spending.
func TestScriptRunsOnce(t *testing.T) {
	const burst = 20
	ctx := context.Background()
	limit := rate.Every(time.Hour) // nothing refills during the test
	addr := sharedAddr(t)
	prefix := testPrefix(t)
	direct := newClient(t, addr)
	// Clients as the README builds them: go-redis's default retries on.
	one := func(t *testing.T) (*proxy, redis.Scripter) {
		p := startProxy(t, addr)
		return p, redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true})
	}
	cases := []struct {
		name  string
		dial  func(t *testing.T) (arm func(string), client, direct redis.Scripter)
		do    func(s *Store, key string) error
		want  int // tokens left
		spent int // before the reset
	}{
		{"decide", single(one, direct), func(s *Store, key string) error {
			_, err := s.Decide(ctx, key, 5, time.Now())
			return err
		}, burst - 5, 0},
		{"charge", single(one, direct), func(s *Store, key string) error { return s.Charge(ctx, key, 5, time.Now()) }, burst - 5, 0},
		{"give back", single(one, direct), func(s *Store, key string) error {
			return s.Charge(ctx, key, -10, time.Now())
		}, burst - 5, 15},
		{"flush", single(one, direct), func(s *Store, key string) error {
			held := New(s.client, limit, burst, WithPrefix(prefix), WithDeferredCharges(time.Hour))
			if err := held.Charge(ctx, key, 5, time.Now()); err != nil {
				return err
			}
			err := held.Flush(ctx)
			return errors.Join(err, held.Flush(ctx)) // nothing left to send
		}, burst - 5, 0},
		{"cluster", func(t *testing.T) (func(string), redis.Scripter, redis.Scripter) {
			ps := &proxies{t: t}
			addrs := clusterAddrs(t)
			c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true, Dialer: ps.dial})
			t.Cleanup(func() { c.Close() })
			err := c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
				return errors.Join(decideScript.Load(ctx, m).Err(), chargeScript.Load(ctx, m).Err())
			})
			if err != nil {
				t.Fatal(err)
			}
			return ps.resetAfter, c, newClusterClient(t, addrs)
		}, func(s *Store, key string) error {
			_, err := s.Decide(ctx, key, 5, time.Now())
			return err
		}, burst - 5, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			arm, client, direct := c.dial(t)
			s := New(client, limit, burst, WithPrefix(prefix), WithTimeout(2*time.Second))
			key := "once-" + c.name
			warm := "warm-" + key // loads the scripts, and the cluster's slot map
			if _, err := s.Decide(ctx, warm, 1, time.Now()); err != nil {
				t.Fatal(err)
			}
			if err := s.Charge(ctx, warm, 1, time.Now()); err != nil {
				t.Fatal(err)
			}
			if c.spent > 0 {
				if _, err := s.Decide(ctx, key, c.spent, time.Now()); err != nil {
					t.Fatal(err)
				}
			}
			arm(prefix + key)
			err := c.do(s, key)
			t.Logf("error after the reset: %v", err)
			d, err := New(direct, limit, burst, WithPrefix(prefix)).Decide(ctx, key, 0, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			if got := d.Remaining; got != c.want {
				t.Fatalf("%d tokens left, want %d: the script ran more than once", got, c.want)
			}
		})
	}
}

// single returns the arming function and client of a proxy made by one, and a client of the
// server behind it.
func single(one func(t *testing.T) (*proxy, redis.Scripter), direct redis.Scripter) func(t *testing.T) (func(string), redis.Scripter, redis.Scripter) {
	return func(t *testing.T) (func(string), redis.Scripter, redis.Scripter) {
		p, c := one(t)
		t.Cleanup(func() { c.(*redis.Client).Close() })
		return p.resetAfter, c, direct
	}
}

// TestScriptRunsOnceShared is TestScriptRunsOnce for a decision sent in a shared round trip: it
// queues behind a round trip held in flight, goes out in the pipeline that follows, and the
// proxy resets the connection after forwarding it.
func TestScriptRunsOnceShared(t *testing.T) {
	const burst = 20
	ctx := context.Background()
	limit := rate.Every(time.Hour)
	prefix := testPrefix(t)
	p := startProxy(t, sharedAddr(t))
	c := newClient(t, p.Addr())
	h := &stallKey{key: prefix + "stall", held: make(chan struct{}), release: make(chan struct{})}
	c.AddHook(h)
	s := New(c, limit, burst, WithPrefix(prefix), WithTimeout(2*time.Second), WithRefusalMemory(0))
	for range 3 { // the script loaded, and a round trip's time seen
		decide(t, s, "warm", 0, time.Time{})
	}
	go s.Decide(ctx, "stall", 1, time.Time{})
	<-h.held
	p.resetAfter(prefix + "k")
	queued := make(chan error, 1)
	go func() {
		_, err := s.Decide(ctx, "k", 5, time.Time{})
		queued <- err
	}()
	for q := &s.batch.one; ; time.Sleep(time.Millisecond) { // queued behind the held round trip
		q.mu.Lock()
		n := len(q.waiting)
		q.mu.Unlock()
		if n == 1 {
			break
		}
	}
	close(h.release)
	t.Logf("the shared decision after the reset: %v", <-queued)
	d := decide(t, New(newClient(t, sharedAddr(t)), limit, burst, WithPrefix(prefix)), "k", 0, time.Time{})
	if d.Remaining != burst-5 {
		t.Fatalf("%d tokens left, want %d: the script ran more than once", d.Remaining, burst-5)
	}
}
