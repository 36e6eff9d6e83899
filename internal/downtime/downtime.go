// Package downtime holds the rule by which a maintenance window answers a request: what its 503
// says at a given instant. retryafter.Maintenance and the Traefik plugin retryAfterMaintenance
// both answer by it, so that they say the same thing at the same instant.
//
// Traefik interprets the plugin, and so this package, with Yaegi v0.16.1, which lacks the min
// and max builtins and the standard library's generic types: the package uses neither.
package downtime

import (
	"math"
	"time"
)

// never is the longest wait: rate.InfDuration, which the emitter takes for "never".
const never = time.Duration(math.MaxInt64)

// Answer returns what a 503 answered at now says, for maintenance announced to end at until
// (the zero time when the end is unknown), with wait the answer when the end is unknown and the
// longest one while the work overruns its end. wait must be above zero.
//
// While until lies ahead, counting is true, end is until and left is the time until it, one
// nanosecond less than never at most. When the end is unknown, left is wait; when until has been
// reached or passed (an overrun), left is how late the work is, at least a second and at most
// wait, so that a client that comes back as told finds the work late by twice as long. In both
// cases end is now plus left, and counting is false.
func Answer(now, until time.Time, wait time.Duration) (end time.Time, left time.Duration, counting bool) {
	if wait >= never {
		wait = never - 1
	}
	switch {
	case until.IsZero():
		return now.Add(wait), wait, false
	case until.After(now):
		left = until.Sub(now) // saturates at never
		if left >= never {
			left = never - 1
		}
		return until, left, true
	}
	late := now.Sub(until)
	if late < time.Second {
		late = time.Second
	}
	if late > wait {
		late = wait
	}
	return now.Add(late), late, false
}
