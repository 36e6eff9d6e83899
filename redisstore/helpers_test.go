package redisstore

import (
	// The tests start programs, through redistest: .ci/run reads this import to keep them out
	// of a 32-bit emulator, which crashes when Go's runtime forks.
	_ "os/exec"

	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/retryafter/retryafter"
	"github.com/retryafter/retryafter/internal/testkit"
	"github.com/retryafter/retryafter/internal/testkit/redistest"
)

// t0 is the instant the injected clocks start at.
var t0 = testkit.T0

func TestMain(m *testing.M) { os.Exit(redistest.Main(m)) }

// sharedAddr returns the address of the Redis the tests share: REDIS_ADDR, or one that the
// test binary starts (see package redistest).
func sharedAddr(t testing.TB) string {
	t.Helper()
	return redistest.Addr(t)
}

// newClient returns a client of the Redis at addr that honours context deadlines, closed when
// the test ends.
func newClient(t testing.TB, addr string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	return c
}

// keepFor is how long, by Redis's own clock, a store on an injected clock keeps each key.
const keepFor = 10 * time.Minute

// withInjectedClock is withCallerClock for the tests whose injected clock is not Redis's:
// every key is also kept for keepFor by Redis's clock.
//
// A store on the caller's clock sets a key to expire when its bucket is full by that clock,
// but Redis expires it by its own, which on a loaded machine runs far ahead of a clock that a
// test advances by microseconds a request, and drops a bucket the test still counts on. The
// decision does not depend on the key expiring (a key whose bucket is full by the clock it is
// given answers as a key never seen, see TestExpiresWhenFresh), so these tests keep it.
func withInjectedClock() Option {
	return func(s *Store) {
		withCallerClock()(s)
		s.client = keptKeys{s.client.(redis.Cmdable)}
	}
}

// keptKeys runs each script in a transaction, MULTI/EXEC, with a PEXPIRE that keeps each of its
// keys for keepFor: no instant of Redis's clock falls between the two, so a key the script wrote
// cannot expire before it is kept. It is one round trip, as the script alone is.
type keptKeys struct{ redis.Cmdable }

func (k keptKeys) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return k.keep(ctx, keys, func(p redis.Pipeliner) *redis.Cmd { return p.Eval(ctx, script, keys, args...) })
}

func (k keptKeys) EvalSha(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	return k.keep(ctx, keys, func(p redis.Pipeliner) *redis.Cmd { return p.EvalSha(ctx, sha1, keys, args...) })
}

func (k keptKeys) keep(ctx context.Context, keys []string, run func(redis.Pipeliner) *redis.Cmd) *redis.Cmd {
	var cmd *redis.Cmd
	_, err := k.TxPipelined(ctx, func(p redis.Pipeliner) error {
		cmd = run(p)
		for _, key := range keys {
			p.PExpire(ctx, key, keepFor)
		}
		return nil
	})
	if err != nil && cmd.Err() == nil {
		cmd.SetErr(err)
	}
	return cmd
}

// Pipeline returns a pipeline whose script calls keep their keys as keptKeys's do, each with a
// PEXPIRE queued right after it: not atomic, but a key the script wrote lives at least a
// millisecond, far longer than the gap between two commands of one pipeline on the server.
func (k keptKeys) Pipeline() redis.Pipeliner { return keptPipe{k.Cmdable.Pipeline()} }

// keptPipe is the pipeline of keptKeys.
type keptPipe struct{ redis.Pipeliner }

func (p keptPipe) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	cmd := p.Pipeliner.Eval(ctx, script, keys, args...)
	p.keep(ctx, keys)
	return cmd
}

func (p keptPipe) EvalSha(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	cmd := p.Pipeliner.EvalSha(ctx, sha1, keys, args...)
	p.keep(ctx, keys)
	return cmd
}

// Process queues cmd, and keeps the keys of a script call (see script.queue).
func (p keptPipe) Process(ctx context.Context, cmd redis.Cmder) error {
	err := p.Pipeliner.Process(ctx, cmd)
	if args := cmd.Args(); len(args) > 2 && (cmd.Name() == "eval" || cmd.Name() == "evalsha") {
		n, _ := args[2].(int)
		keys := make([]string, n)
		for i := range keys {
			keys[i], _ = args[3+i].(string)
		}
		p.keep(ctx, keys)
	}
	return err
}

func (p keptPipe) keep(ctx context.Context, keys []string) {
	for _, key := range keys {
		p.PExpire(ctx, key, keepFor)
	}
}

// redisNow returns Redis's clock (TIME), to the microsecond.
func redisNow(t testing.TB, client *redis.Client) time.Time {
	t.Helper()
	now, err := client.Time(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	return now
}

// redisMillis returns Redis's clock in Unix milliseconds, truncated as Redis's expiry does.
func redisMillis(t testing.TB, client *redis.Client) int64 {
	t.Helper()
	return redisNow(t, client).UnixMilli()
}

// wantExpiry checks that key is set to expire px milliseconds after a write that Redis's clock
// put within [before, after] (Unix milliseconds), or, if it is gone already, that Redis's clock
// has passed the earliest instant at which it could expire. A loaded machine can delay the
// check past the expiry, so a key that is gone is no failure unless it went too early.
func wantExpiry(t *testing.T, client *redis.Client, key string, before, after, px int64) {
	t.Helper()
	at, err := client.PExpireTime(context.Background(), key).Result()
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case at == -2: // no such key
		if now := redisMillis(t, client); now <= before+px {
			t.Fatalf("the key is gone at %d ms, before its earliest expiry at %d ms (%d ms after a write in [%d, %d])", now, before+px, px, before, after)
		}
	case at < 0:
		t.Fatalf("PEXPIRETIME %d: the key never expires, want %d ms after the write", at, px)
	default:
		if ms := at.Milliseconds(); ms < before+px || ms > after+px {
			t.Fatalf("expires at %d ms, want within [%d, %d] (%d ms after a write in [%d, %d])", ms, before+px, after+px, px, before, after)
		}
	}
}

var prefixes atomic.Int64

// testPrefix returns a key prefix no other test, and no earlier run, uses.
func testPrefix(t testing.TB) string {
	return fmt.Sprintf("retryafter-test:%s:%d.%d:", t.Name(), time.Now().UnixNano(), prefixes.Add(1))
}

// A server is a redis-server process of the test's own.
type server = redistest.Server

// startServer starts a redis-server of the test's own on a free loopback port, and stops it
// when the test ends. It skips the test (fails it in CI) when the binary is missing.
func startServer(t testing.TB) *server {
	t.Helper()
	return redistest.Start(t)
}

// get sends GET / from remote through h.
func get(h http.Handler, remote string) *httptest.ResponseRecorder {
	return testkit.Serve(h, http.MethodGet, remote)
}

// wantRefusal checks that w is a 429 with a Date of now and a whole-second Retry-After, and
// returns that wait.
func wantRefusal(t *testing.T, w *httptest.ResponseRecorder, now time.Time) time.Duration {
	t.Helper()
	return wantStatus(t, w.Code, w.Header(), http.StatusTooManyRequests, now)
}

func wantStatus(t *testing.T, code int, h http.Header, status int, now time.Time) time.Duration {
	t.Helper()
	if code != status {
		t.Fatalf("status %d, want %d", code, status)
	}
	if got, want := h.Get("Date"), now.UTC().Format(http.TimeFormat); got != want {
		t.Fatalf("Date %q, want %q", got, want)
	}
	wait, ok := retryafter.ParseRetryAfter(h, now)
	if !ok || wait < time.Second || wait%time.Second != 0 {
		t.Fatalf("Retry-After %q is not whole seconds >= 1", h.Get("Retry-After"))
	}
	return wait
}

// A clockStep is a clock the store decides by, and the steps back of it that the tests of steps
// take.
type clockStep struct {
	name  string
	opts  []Option
	steps []time.Duration
}

// clockSteps returns the clocks and steps back that the tests of steps take, for a bucket that
// refills in horizon: Redis's clock (injected), from a microsecond to a month; the caller's, only
// steps longer than its tolerance of out-of-order instants (a refill), which are repaired.
func clockSteps(horizon time.Duration) []clockStep {
	long := []time.Duration{horizon + time.Microsecond, time.Minute, time.Hour, 30 * 24 * time.Hour}
	return []clockStep{
		{"redis clock", []Option{withInjectedClock(), withStepTolerance(0)}, append([]time.Duration{time.Microsecond, horizon / 3}, long...)},
		{"caller clock", []Option{withInjectedClock()}, []time.Duration{2*horizon + time.Microsecond, time.Hour}},
	}
}

// agrees reports whether got is the decision want is, to Redis's microsecond: the same verdict
// and Remaining, and RetryAfter and Reset within 2 µs.
func agrees(got, want retryafter.Decision) bool {
	return got.Allowed == want.Allowed && got.Remaining == want.Remaining &&
		(got.RetryAfter-want.RetryAfter).Abs() <= 2*time.Microsecond && (got.Reset-want.Reset).Abs() <= 2*time.Microsecond
}

// quota returns d's exported fields but its layers, to compare a Decision of several layers
// with one of one.
func quota(d retryafter.Decision) retryafter.Decision {
	return retryafter.Decision{Allowed: d.Allowed, RetryAfter: d.RetryAfter, Limit: d.Limit, Remaining: d.Remaining, Reset: d.Reset, Policy: d.Policy}
}
