package retryclient

import (
	"context"
	"math"
	"strconv"
	"time"
)

// An RPC says how a client of remote calls (gRPC, Connect) retries a call that its server
// refused with a wait: at most MaxAttempts tries, the first included, never waiting more than
// MaxWait, nor into the call's deadline. The client interceptors of grpclimit and connectlimit
// share it, each reading the wait from its own protocol's error.
type RPC struct {
	MaxAttempts int
	MaxWait     time.Duration
}

// DefaultRPC returns the RPC of a client interceptor given no option: 4 tries, a wait of up to
// 5 minutes.
func DefaultRPC() RPC { return RPC{MaxAttempts: 4, MaxWait: 5 * time.Minute} }

// Do calls try, and while it fails with a wait its server asked for, waits that long and calls
// it again. try returns the server's wait and the call's error, with ok false when it asked for
// none (or said not to retry). Do never retries sooner than the server said, nor at once (a
// wait below a millisecond counts as one), nor without being told, nor when the wait is above
// MaxWait or would end at or after ctx's deadline: it then returns the last error at once.
// When ctx ends during a wait, it returns ended(ctx.Err()), the protocol's form of it.
func (p RPC) Do(ctx context.Context, try func() (wait time.Duration, ok bool, err error), ended func(error) error) error {
	for attempt := 1; ; attempt++ {
		wait, ok, err := try()
		wait = max(wait, time.Millisecond) // held to MaxWait as it will be waited
		if err == nil || attempt >= p.MaxAttempts || !ok || wait > p.MaxWait {
			return err
		}
		if deadline, has := ctx.Deadline(); has && !time.Now().Add(wait).Before(deadline) {
			return err
		}
		if err := sleep(ctx, wait); err != nil {
			return ended(err)
		}
	}
}

// sleep waits for wait, or until ctx ends, and then returns its error.
func sleep(ctx context.Context, wait time.Duration) error {
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Pushback reads the values of gRPC's grpc-retry-pushback-ms as grpc-go does: one value of
// ASCII digits is a wait in milliseconds (saturating, never wrapping); anything else (negative,
// not a number, several values) says not to retry.
func Pushback(v []string) (wait time.Duration, retry bool) {
	if len(v) != 1 || v[0] == "" {
		return 0, false
	}
	for _, c := range []byte(v[0]) {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	ms, err := strconv.ParseInt(v[0], 10, 64)
	if err != nil || ms > math.MaxInt64/int64(time.Millisecond) {
		return math.MaxInt64, true // too large to fit: above any cap
	}
	return time.Duration(ms) * time.Millisecond, true
}
