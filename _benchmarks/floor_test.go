package benchmarks

import (
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"golang.org/x/time/rate"
)

// The floor benchmarks measure the parts every limited request pays for, whichever limiter
// counts it, so that the comparison's figures can be read against them: reading the clock,
// cutting the port off RemoteAddr, taking an uncontended lock, looking a client up in a map by
// its address, and x/time/rate's arithmetic for one admitted request.

// BenchmarkFloorTimeNow: one reading of the clock.
func BenchmarkFloorTimeNow(b *testing.B) {
	cpu := cpuTime()
	for b.Loop() {
		time.Now()
	}
	reportCPU(b, cpu)
}

// BenchmarkFloorSplitHostPort: the key function of the comparison, RemoteAddr without its port.
func BenchmarkFloorSplitHostPort(b *testing.B) {
	addr := clientAddr(1) + ":4321"
	cpu := cpuTime()
	for b.Loop() {
		net.SplitHostPort(addr)
	}
	reportCPU(b, cpu)
}

// BenchmarkFloorMutex: an uncontended sync.Mutex, locked and unlocked.
func BenchmarkFloorMutex(b *testing.B) {
	var mu sync.Mutex
	cpu := cpuTime()
	for b.Loop() {
		mu.Lock()
		mu.Unlock() //lint:ignore SA2001 the lock is what is measured
	}
	reportCPU(b, cpu)
}

// BenchmarkFloorMapLookup: a map[string]*rate.Limiter looked up by an IPv4 address, with the
// key a string of its own (as a key function returns it) rather than the one the map holds;
// with 1 and 10,000 clients held, the latter looked up round-robin.
func BenchmarkFloorMapLookup(b *testing.B) {
	for _, n := range []int{1, 10_000} {
		b.Run("keys="+strconv.Itoa(n), func(b *testing.B) {
			m := make(map[string]*rate.Limiter, n)
			keys := make([]string, n)
			for i := range n {
				m[clientAddr(i)] = rate.NewLimiter(1, 1)
				keys[i] = clientAddr(i) // a copy, so that no comparison is cut short by identity
			}
			cpu := cpuTime()
			i := 0
			for b.Loop() {
				if m[keys[i]] == nil {
					b.Fatal("no limiter")
				}
				if i++; i == n {
					i = 0
				}
			}
			reportCPU(b, cpu)
		})
	}
}

// BenchmarkFloorAllowN: x/time/rate's arithmetic for an admitted request, at an instant read
// beforehand (Allow adds a reading of the clock to it).
func BenchmarkFloorAllowN(b *testing.B) {
	lim := rate.NewLimiter(plenty.limit(), plenty.burst)
	now := time.Now()
	cpu := cpuTime()
	for b.Loop() {
		if !lim.AllowN(now, 1) {
			b.Fatal("refused")
		}
	}
	reportCPU(b, cpu)
}
