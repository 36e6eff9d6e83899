//go:build unix

package main

import (
	"syscall"
	"time"
)

// cpuTime returns the CPU time, user and system, that this process and all its threads have
// used so far (getrusage).
func cpuTime() (time.Duration, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, err
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}
