package redisstore

import (
	"errors"
	"net"
	"syscall"

	"github.com/redis/go-redis/v9"
)

// ErrKeyState is the error, wrapped, that a decision or a charge of a key returns when the key
// holds in Redis a value that is not a limiter's state: another program's (a hash, a list, a
// string that is no state, a number longer or older than any state), under the store's prefix by
// accident or by a client's choice of key. It is that key's failure, not Redis's: it is not an
// [ErrUnavailable], counts nothing toward taking Redis for down, is not decided by a local
// fallback ([WithLocalFallback]), and leaves every other key decided as usual. The value is
// never overwritten; the charges a Store held back for the key ([WithDeferredCharges]) are
// dropped. The middleware answers it as it answers any error of its Limiter.
//
// Redis's own state is not a key's: a server out of memory (OOM, under maxmemory-policy
// noeviction), a read-only replica (READONLY, a client pointed at a replica or a failover in
// progress), one loading its data or busy with a script are failures of Redis, [ErrUnavailable],
// and count toward taking it for down, as a timeout does.
var ErrKeyState = errors.New("redisstore: the key holds a value that is not a limiter's state")

// keyStateError is an error wrapping ErrKeyState and Redis's reply.
type keyStateError struct{ cause error }

func (e *keyStateError) Error() string { return ErrKeyState.Error() + ": " + e.cause.Error() }

func (e *keyStateError) Unwrap() []error { return []error{ErrKeyState, e.cause} }

// isKeyState reports whether err, the failure of a script call, is Redis's answer that a key of
// the call holds a value that is not a limiter's state: WRONGTYPE from Redis, for a value of
// another type, or KEYSTATE from the scripts (see "read" in state.lua).
func isKeyState(err error) bool {
	return redis.HasErrorPrefix(err, "WRONGTYPE") || redis.HasErrorPrefix(err, "KEYSTATE")
}

// resend reports whether the charges a round trip carried are to be held again after it failed
// with err: when it shows the script did not run, that is Redis answered with an error of its
// own state (OOM, READONLY, LOADING, BUSY) or the connection was never made; not when they may
// have been made (a timeout, a connection lost after the call was written), nor when the key
// cannot take them.
func resend(err error) bool {
	if isKeyState(err) {
		return false
	}
	var reply redis.Error
	var op *net.OpError
	return errors.As(err, &reply) || errors.As(err, &op) && op.Op == "dial" ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, redis.ErrPoolTimeout) || errors.Is(err, redis.ErrClosed)
}
