package redisstore

import (
	"context"
	"net"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/time/rate"
)

// stallKey is a hook that holds the script call of one key, sent on its own, until released:
// a round trip in flight that the store's other calls queue behind.
type stallKey struct {
	key     string
	held    chan struct{} // told when the call is held
	release chan struct{}
}

func (h *stallKey) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *stallKey) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if args := cmd.Args(); isScript(cmd) && len(args) > 3 && args[3] == h.key {
			h.held <- struct{}{}
			<-h.release
		}
		return next(ctx, cmd)
	}
}

func (h *stallKey) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// stalled returns a store of a client of the tests' Redis whose call on key "stall" is held
// (see stallKey) until the test releases it, after a few round trips that show the store how
// long they take, and the function that sends that call and waits until it is held.
func stalled(t *testing.T, limit rate.Limit, burst int, opts ...Option) (*Store, *stallKey, func()) {
	t.Helper()
	prefix := testPrefix(t)
	h := &stallKey{key: prefix + "stall", held: make(chan struct{}), release: make(chan struct{})}
	c := newClient(t, sharedAddr(t))
	c.AddHook(h)
	s := New(c, limit, burst, append([]Option{WithPrefix(prefix), WithRefusalMemory(0)}, opts...)...)
	for range 5 {
		decide(t, s, "warm", 0, time.Time{})
	}
	stall := func() {
		go s.Decide(context.Background(), "stall", 1, time.Time{})
		<-h.held
		t.Cleanup(func() { close(h.release) })
	}
	return s, h, stall
}

// TestUnsentChargesHeldAgain holds 20 charges of a key, and then queues its decision, which
// carries them, behind a round trip that stalls, with a deadline of 50 ms: the decision is
// never sent, and the charges must be held again, so that a flush makes them, rather than
// forgotten as if a round trip that carried them had timed out in flight.
func TestUnsentChargesHeldAgain(t *testing.T) {
	ctx := context.Background()
	s, h, stall := stalled(t, rate.Every(time.Hour), 100, WithDeferredCharges(time.Hour))
	for range 20 {
		if err := s.Charge(ctx, "k", 1, time.Time{}); err != nil {
			t.Fatal(err)
		}
	}
	stall()
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	_, err := s.Decide(short, "k", 1, time.Time{})
	t.Logf("the decision queued behind the stall: %v", err)
	admitted := 0
	if err == nil {
		admitted = 1 // it went out on its own, carrying the charges
	}
	h.release <- struct{}{}
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	other := New(s.client, rate.Every(time.Hour), 100, WithPrefix(s.prefix))
	d := decide(t, other, "k", 0, time.Time{})
	if spent := 100 - d.Remaining; spent != 20+admitted {
		t.Fatalf("Redis shows %d spent, want %d: held charges lost", spent, 20+admitted)
	}
}

// TestUnsentGiveBackHeldAgain has a Leased replica of lot 10 on a key of burst 100 spend 1, and
// then give its lease back (Release) with a deadline of 50 ms, queued behind a round trip that
// stalls: the give-back is never sent, so the lease is the replica's again, and a second
// Release gives it back; then the key admits the 99 requests of cost 1 that its bucket holds.
func TestUnsentGiveBackHeldAgain(t *testing.T) {
	ctx := context.Background()
	s, h, stall := stalled(t, rate.Every(time.Hour), 100)
	l := s.Leased(10)
	if d, err := l.Decide(ctx, "k", 1, time.Time{}); err != nil || !d.Allowed {
		t.Fatalf("the first request: %+v, %v", d, err)
	}
	stall()
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	t.Logf("the give-back queued behind the stall: %v", l.Release(short))
	h.release <- struct{}{}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	other := New(s.client, rate.Every(time.Hour), 100, WithPrefix(s.prefix))
	admitted := 0
	for range 200 {
		if decide(t, other, "k", 1, time.Time{}).Allowed {
			admitted++
		}
	}
	if admitted != 99 {
		t.Fatalf("%d admitted after the lease was given back, want 99", admitted)
	}
}

// refuseNext is a client whose next script call fails as a refused connection would, unsent.
type refuseNext struct {
	redis.Scripter
	armed atomic.Bool
}

func (r *refuseNext) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	if r.armed.CompareAndSwap(true, false) {
		return redis.NewCmdResult(nil, &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED})
	}
	return r.Scripter.EvalSha(ctx, sha, keys, args...)
}

// TestRefusedGiveBackHeldAgain is TestUnsentGiveBackHeldAgain for a give-back whose connection
// was refused: it never reached Redis, so the lease is the replica's again.
func TestRefusedGiveBackHeldAgain(t *testing.T) {
	ctx := context.Background()
	prefix := testPrefix(t)
	client := &refuseNext{Scripter: newClient(t, sharedAddr(t))}
	l := New(client, rate.Every(time.Hour), 100, WithPrefix(prefix)).Leased(10)
	if d, err := l.Decide(ctx, "k", 1, time.Time{}); err != nil || !d.Allowed {
		t.Fatalf("the first request: %+v, %v", d, err)
	}
	client.armed.Store(true)
	t.Logf("the refused give-back: %v", l.Release(ctx))
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	other := New(client.Scripter, rate.Every(time.Hour), 100, WithPrefix(prefix))
	admitted := 0
	for range 200 {
		if decide(t, other, "k", 1, time.Time{}).Allowed {
			admitted++
		}
	}
	if admitted != 99 {
		t.Fatalf("%d admitted after the lease was given back, want 99", admitted)
	}
}
