//go:build unix

package retryafter

import "syscall"

// cpuTime returns the CPU time the process has used, in nanoseconds: user and system time from
// getrusage. Unlike the wall-clock ns/op, it does not count the time the process waited for a
// CPU, so it stays comparable on a machine that other work keeps busy.
func cpuTime() int64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
