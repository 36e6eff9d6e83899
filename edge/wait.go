package edge

import (
	"math"
	"time"

	"golang.org/x/time/rate"

	"github.com/retryafter/retryafter/internal/header"
)

// DelaySeconds returns wait as Retry-After's delay-seconds: rounded up to whole seconds and at
// least 1, so that a client that waits that long is not early. It reports false for a wait of
// [rate.InfDuration] or more, which no client can honour: send no Retry-After then.
func DelaySeconds(wait time.Duration) (int64, bool) {
	if wait >= rate.InfDuration {
		return 0, false
	}
	return header.DelaySeconds(wait), true
}

// Millis returns wait in milliseconds, rounded up and at least 1, so that a client that waits
// that long is never early: gRPC's grpc-retry-pushback-ms and the retry_delay of a
// google.rpc.RetryInfo. It reports false for a wait that is never over ([rate.InfDuration])
// and for one whose milliseconds, multiplied back, would not fit a Duration: grpc-go
// multiplies the pushback by a millisecond, and a product that wrapped would be a wait of
// nothing.
func Millis(wait time.Duration) (ms int64, ok bool) {
	if wait >= rate.InfDuration {
		return 0, false
	}
	ms = int64(wait / time.Millisecond)
	if wait%time.Millisecond > 0 {
		ms++
	}
	if ms > math.MaxInt64/int64(time.Millisecond) {
		return 0, false
	}
	return max(ms, 1), true
}
