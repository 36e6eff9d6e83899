//go:build unix

package benchmarks

import "syscall"

// cpuTime returns the CPU time the process has used, in nanoseconds (getrusage user + system).
func cpuTime() int64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
