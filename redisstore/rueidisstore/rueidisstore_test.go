package rueidisstore

import (
	// The tests start programs, through redistest: .ci/run reads this import to keep them out
	// of a 32-bit emulator, which crashes when Go's runtime forks.
	_ "os/exec"

	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"golang.org/x/time/rate"

	"github.com/retryafter/retryafter"
	"github.com/retryafter/retryafter/edge"
	"github.com/retryafter/retryafter/internal/testkit/redistest"
	"github.com/retryafter/retryafter/redisstore"
)

func TestMain(m *testing.M) { os.Exit(redistest.Main(m)) }

// startServer starts a redis-server of the test's own on a free loopback port, stopped when the
// test ends, and returns it and its address; it skips the test (fails it under CI=true) when
// redis-server is not installed.
func startServer(t *testing.T) (*redistest.Server, string) {
	t.Helper()
	srv := redistest.Start(t)
	return srv, srv.Addr()
}

// newClient returns a rueidis client of addrs, closed when the test ends.
func newClient(t *testing.T, addrs ...string) rueidis.Client {
	t.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: addrs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// decideAll sends n concurrent requests of cost 1 for key and returns how many were admitted.
func decideAll(t *testing.T, s *redisstore.Store, key string, n int) int {
	t.Helper()
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			d, err := s.Decide(context.Background(), key, 1, time.Time{})
			if err != nil {
				t.Error(err)
			} else if d.Allowed {
				admitted.Add(1)
			}
		})
	}
	wg.Wait()
	return int(admitted.Load())
}

// TestDecide checks the store over rueidis on a real server: 256 concurrent requests, which
// rueidis pipelines together, for a key with a burst of 100 admit exactly 100; the next is told
// to wait the hour a token takes, a peek is admitted with nothing left; and after SCRIPT FLUSH
// (a restarted server) the store sends the script again and goes on counting.
func TestDecide(t *testing.T) {
	_, addr := startServer(t)
	client := newClient(t, addr)
	s := New(client, rate.Every(time.Hour), 100, redisstore.WithPrefix("rueidisstore-test:"), redisstore.WithTimeout(10*time.Second))
	start := time.Now()
	if n := decideAll(t, s, "k", 256); n != 100 {
		t.Fatalf("%d of 256 admitted with a burst of 100", n)
	}
	ctx := context.Background()
	d, err := s.Decide(ctx, "k", 1, time.Time{})
	// The refusal may be answered from the memory of an earlier one, timed from when that was
	// sent: shorter than Redis's by up to its trip, under 256 pipelined requests.
	if took := time.Since(start); err != nil || d.Allowed || d.RetryAfter > time.Hour || d.RetryAfter < time.Hour-took-time.Second || d.Remaining != 0 {
		t.Fatalf("after the burst: %+v, %v, want refused for about an hour", d, err)
	}
	if d, err := s.Decide(ctx, "k", 0, time.Time{}); err != nil || !d.Allowed || d.Remaining != 0 || d.Limit != 100 {
		t.Fatalf("a peek: %+v, %v", d, err)
	}
	if err := client.Do(ctx, client.B().ScriptFlush().Build()).Error(); err != nil {
		t.Fatal(err)
	}
	if d, err := s.Decide(ctx, "other", 1, time.Time{}); err != nil || !d.Allowed || d.Remaining != 99 {
		t.Fatalf("after SCRIPT FLUSH: %+v, %v, want admitted with 99 left", d, err)
	}
	if d, err := s.Decide(ctx, "k", 1, time.Time{}); err != nil || d.Allowed {
		t.Fatalf("after SCRIPT FLUSH, the spent key: %+v, %v, want refused", d, err)
	}
}

// TestTimeout freezes the server (SIGSTOP): a decision fails with redisstore.ErrUnavailable
// within the store's timeout and a margin, three times (a few more on a loaded machine), and the
// next ones at once, the store knowing Redis is down; once the server runs again the store decides again within a probe interval.
func TestTimeout(t *testing.T) {
	const (
		timeout = 150 * time.Millisecond
		probe   = 200 * time.Millisecond
		margin  = time.Second // scheduling on a loaded machine
	)
	srv, addr := startServer(t)
	s := New(newClient(t, addr), 1e6, 1e6, redisstore.WithTimeout(timeout), redisstore.WithProbeInterval(probe))
	ctx := context.Background()
	if _, err := s.Decide(ctx, "k", 1, time.Time{}); err != nil {
		t.Fatal(err)
	}
	srv.Signal(syscall.SIGSTOP)
	// The store takes Redis for down after three timeouts in a row, seen on time: on a loaded
	// machine one seen late counts for nothing, so a few more may wait.
	for i := 0; ; i++ {
		start := time.Now()
		_, err := s.Decide(ctx, "k", 1, time.Time{})
		took := time.Since(start)
		if !errors.Is(err, redisstore.ErrUnavailable) || took > timeout+margin || i < 3 && took < timeout {
			srv.Signal(syscall.SIGCONT)
			t.Fatalf("frozen, decision %d: %v after %v, want ErrUnavailable after the %v timeout, within %v of it", i, err, took, timeout, margin)
		}
		if took < timeout/2 {
			break // at once: the store knows Redis is down
		}
		if i == 10 {
			srv.Signal(syscall.SIGCONT)
			t.Fatalf("frozen: %d decisions waited for the timeout, want the store to know Redis is down after 3", i+1)
		}
	}
	srv.Signal(syscall.SIGCONT)
	back := time.Now()
	for {
		if _, err := s.Decide(ctx, "k", 1, time.Time{}); err == nil {
			break
		}
		if time.Since(back) > probe+timeout+margin {
			t.Fatalf("still failing %v after the server runs again", time.Since(back))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestCluster runs 256 concurrent requests for each of 12 keys, over the three masters of a
// Redis Cluster (REDIS_CLUSTER_ADDRS, as .ci/run starts one, or one the tests start): each key
// admits exactly its burst.
func TestCluster(t *testing.T) {
	s := New(newClient(t, redistest.ClusterAddrs(t)...), rate.Every(time.Hour), 50,
		redisstore.WithPrefix(fmt.Sprintf("rueidisstore-test:%d:", time.Now().UnixNano())), redisstore.WithTimeout(10*time.Second))
	for k := range 12 {
		if n := decideAll(t, s, fmt.Sprint("client-", k), 256); n != 50 {
			t.Fatalf("key %d: %d of 256 admitted with a burst of 50", k, n)
		}
	}
}

func TestNewPanics(t *testing.T) {
	defer func() {
		if r, ok := recover().(string); !ok || !strings.HasPrefix(r, "rueidisstore: ") {
			t.Fatalf("recovered %v, want a panic starting with \"rueidisstore: \"", r)
		}
	}()
	New(nil, 1, 1)
}

// TestAll decides an All of Stores over rueidis on a real server, one script for the request,
// their prefixes carrying one hash tag (a rueidis client may be a cluster's, so the tag is what
// lets them combine): a limit per key, one shared by every key, and tokens charged afterwards.
// A refusal by one layer spends nothing in the others, each decision is one EVALSHA but the
// refusals that the group remembers, and a charge into debt refuses the key until it is repaid.
func TestAll(t *testing.T) {
	_, addr := startServer(t)
	client := newClient(t, addr)
	ctx := context.Background()
	opts := func(name string) []redisstore.Option {
		return []redisstore.Option{redisstore.WithPrefix("{rl}:" + name), redisstore.WithTimeout(10 * time.Second)}
	}
	perKey := New(client, rate.Every(time.Hour), 3, opts("key:")...)
	shared := New(client, rate.Every(time.Hour), 5, opts("all:")...)
	tokens := New(client, 1000, 100, opts("tokens:")...)
	if _, ok := perKey.Combine([]edge.Layer{{Limiter: perKey}, {Limiter: shared}, {Limiter: tokens, Deferred: true}}); !ok {
		t.Fatal("Stores over one rueidis client with one hash tag do not combine")
	}
	all := retryafter.All(perKey, retryafter.Shared(shared, "all"), retryafter.ChargedAfter(tokens))
	decide := func(key string) retryafter.Decision {
		t.Helper()
		d, err := all.Decide(ctx, key, 1, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	calls := evalshaCalls(t, client)
	for i := range 3 {
		if d := decide("a"); !d.Allowed {
			t.Fatalf("a's request %d: %+v", i, d)
		}
	}
	for range 5 {
		if d := decide("a"); d.Allowed || d.Limit != 3 || d.RetryAfter < 59*time.Minute {
			t.Fatalf("a's 4th request: %+v, want refused by the per-key limit for about an hour", d)
		}
	}
	for i := range 2 {
		if d := decide("b"); !d.Allowed {
			t.Fatalf("b's request %d: %+v: a's refusals spent the shared limit", i, d)
		}
	}
	if d := decide("c"); d.Allowed || d.Limit != 5 {
		t.Fatalf("c's request after 5 admitted: %+v, want refused by the shared limit", d)
	}
	// One per decision but the 4 refusals of a that repeat the first, which the group remembers.
	if n := evalshaCalls(t, client) - calls; n != 7 {
		t.Fatalf("%d EVALSHA for 11 decisions, 4 of them refusals remembered", n)
	}

	if err := tokens.Charge(ctx, "d", 300, time.Time{}); err != nil {
		t.Fatalf("Charge: %v", err)
	}
	if d, err := tokens.Decide(ctx, "d", 0, time.Time{}); err != nil || d.Allowed || d.RetryAfter > 200*time.Millisecond || d.RetryAfter < 100*time.Millisecond {
		t.Fatalf("after a charge of 300 tokens with 100 held, at 1000/s: %+v, %v, want refused for about 200ms", d, err)
	}
	if err := tokens.Charge(ctx, "d", -1000, time.Time{}); err != nil {
		t.Fatalf("Charge back: %v", err)
	}
	if d, err := tokens.Decide(ctx, "d", 100, time.Time{}); err != nil || !d.Allowed {
		t.Fatalf("given back: %+v, %v, want the whole burst admitted", d, err)
	}
}

// evalshaCalls returns how many EVALSHA the server of client has run.
func evalshaCalls(t *testing.T, client rueidis.Client) int64 {
	t.Helper()
	info, err := client.Do(context.Background(), client.B().Info().Section("commandstats").Build()).ToString()
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(info) {
		if rest, ok := strings.CutPrefix(line, "cmdstat_evalsha:calls="); ok {
			n, err := strconv.ParseInt(rest[:strings.IndexByte(rest, ',')], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	return 0
}

// TestPolicy checks that the decisions of a Store over rueidis name its rate and burst, alone
// and, for the layer that binds, in an All of Stores decided in one script.
func TestPolicy(t *testing.T) {
	_, addr := startServer(t)
	client := newClient(t, addr)
	ctx := context.Background()
	opts := func(name string) []redisstore.Option {
		return []redisstore.Option{redisstore.WithPrefix("{rl}:" + name), redisstore.WithTimeout(10 * time.Second)}
	}
	perKey := New(client, rate.Every(time.Hour), 2, opts("key:")...)
	shared := New(client, rate.Every(time.Minute), 3, opts("all:")...)
	pk := retryafter.Policy{Limit: rate.Every(time.Hour), Burst: 2}
	sh := retryafter.Policy{Limit: rate.Every(time.Minute), Burst: 3}
	if d, err := perKey.Decide(ctx, "solo", 1, time.Time{}); err != nil || d.Policy != pk {
		t.Fatalf("alone: %+v, %v, want Policy %+v", d, err, pk)
	}
	all := retryafter.All(perKey, retryafter.Shared(shared, "all"))
	for i, want := range []struct {
		key     string
		allowed bool
		policy  retryafter.Policy
	}{{"a", true, pk}, {"a", true, pk}, {"a", false, pk}, {"b", true, sh}} {
		d, err := all.Decide(ctx, want.key, 1, time.Time{})
		if err != nil || d.Allowed != want.allowed || d.Policy != want.policy {
			t.Fatalf("decision %d (%s): %+v, %v, want allowed %v with Policy %+v", i, want.key, d, err, want.allowed, want.policy)
		}
	}
}

// TestRefusalMemory checks that a Store over rueidis remembers refusals too, by default: once a
// key is refused, the next 100 requests within the wait are refused without a script call, each
// with a wait no longer than the first's.
func TestRefusalMemory(t *testing.T) {
	_, addr := startServer(t)
	client := newClient(t, addr)
	ctx := context.Background()
	s := New(client, rate.Every(time.Hour), 2, redisstore.WithPrefix("rueidisstore-test:"), redisstore.WithTimeout(10*time.Second))
	if n := decideAll(t, s, "k", 2); n != 2 {
		t.Fatalf("%d of the burst of 2 admitted", n)
	}
	first, err := s.Decide(ctx, "k", 1, time.Time{})
	if err != nil || first.Allowed {
		t.Fatalf("after the burst: %+v, %v", first, err)
	}
	calls := evalshaCalls(t, client)
	for i := range 100 {
		d, err := s.Decide(ctx, "k", 1, time.Time{})
		if err != nil || d.Allowed || d.RetryAfter > first.RetryAfter || d.RetryAfter < first.RetryAfter-time.Minute {
			t.Fatalf("refusal %d: %+v, %v, want refused for about as long as the first (%v)", i, d, err, first.RetryAfter)
		}
	}
	if n := evalshaCalls(t, client) - calls; n != 0 {
		t.Fatalf("%d script calls for 100 refusals remembered, want 0", n)
	}
}

// TestKeyState puts another program's hash under the store's prefix and decides its key more
// times in a row than take Redis for down: each fails with ErrKeyState, not ErrUnavailable, and
// another key is decided as usual.
func TestKeyState(t *testing.T) {
	client := newClient(t, redistest.Addr(t))
	prefix := fmt.Sprintf("rueidisstore-test:keystate:%d:", time.Now().UnixNano())
	ctx := context.Background()
	if err := client.Do(ctx, client.B().Hset().Key(prefix+"hash").FieldValue().FieldValue("f", "v").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	s := New(client, rate.Every(time.Second), 5, redisstore.WithPrefix(prefix), redisstore.WithTimeout(10*time.Second))
	for i := range 6 {
		if _, err := s.Decide(ctx, "hash", 1, time.Now()); !errors.Is(err, redisstore.ErrKeyState) || errors.Is(err, redisstore.ErrUnavailable) {
			t.Fatalf("decision %d of another program's hash: %v, want ErrKeyState", i, err)
		}
	}
	if d, err := s.Decide(ctx, "k", 1, time.Now()); err != nil || !d.Allowed {
		t.Fatalf("another key: %+v, %v", d, err)
	}
}
