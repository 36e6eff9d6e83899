package httpratestore

import (
	"net/http"

	"github.com/retryafter/retryafter/internal/testkit"
)

// The clock and the round trip are shared with the other packages' tests. t0 is on a window
// boundary for every window the tests use.
var (
	t0             = testkit.T0
	newClock       = testkit.NewClock
	serve          = testkit.Serve
	wantRefusal    = testkit.WantRefusal
	checkRoundTrip = testkit.RoundTrip
)

// ok is a handler that answers 200 "ok".
var ok = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	w.Write([]byte("ok"))
})
