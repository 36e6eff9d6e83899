//go:build !unix

package main

import (
	"errors"
	"time"
)

// cpuTime fails where getrusage is not available: the comparison needs the server's CPU time.
func cpuTime() (time.Duration, error) {
	return 0, errors.New("no getrusage on this system: the end-to-end comparison needs a unix")
}
