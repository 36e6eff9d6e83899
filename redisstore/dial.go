package redisstore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// dials watches a go-redis client's dials, so that a call that ran out of time while the client
// dialled says why the dial failed: go-redis dials in the background and hands the caller only
// its deadline, so "connection refused" would appear nowhere. It only looks: every dial and
// command passes through unchanged.
type dials struct {
	failed atomic.Pointer[dialFailure] // the last dial, if it failed
}

// A dialFailure is a dial's error, and when it was seen.
type dialFailure struct {
	err error
	at  time.Time
}

// A hooker is a client that takes hooks, as go-redis's do.
type hooker interface{ AddHook(redis.Hook) }

// watchDials returns the watcher of client's dials, added to it, or nil for a client that takes
// no hooks.
func watchDials(client redis.Scripter) *dials {
	h, ok := client.(hooker)
	if !ok {
		return nil
	}
	d := &dials{}
	h.AddHook(d)
	return d
}

// DialHook records each dial's failure, and forgets it when a dial succeeds.
func (d *dials) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := next(ctx, network, addr)
		if err != nil {
			d.failed.Store(&dialFailure{err: err, at: time.Now()})
		} else {
			d.failed.Store(nil)
		}
		return conn, err
	}
}

// ProcessHook passes commands through.
func (d *dials) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

// ProcessPipelineHook passes pipelines through.
func (d *dials) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// cause returns err, the failure of a call made at since or later, with the failure of a dial
// since then that it hides: a bare deadline says nothing of what Redis did. Both are wrapped.
func (d *dials) cause(err error, since time.Time) error {
	if d == nil || !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	var op *net.OpError
	if errors.As(err, &op) {
		return err // it says already
	}
	f := d.failed.Load()
	if f == nil || f.at.Before(since) {
		return err
	}
	return fmt.Errorf("%w (dialing Redis: %w)", err, f.err)
}
