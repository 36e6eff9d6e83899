package gateway

import "github.com/retryafter/retryafter/internal/testkit"

// The tests' instant and hand-moved clock, shared with the other packages' tests.
var (
	t0       = testkit.T0
	newClock = testkit.NewClock
)
