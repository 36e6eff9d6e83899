package clock

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// TestReturnsTake checks the schedule against its promise over many random bookings: a second
// is never before the one asked for, no second holds more than its share of the rate (nor more
// than burst), any run of seconds holds at most the rate times its length, rounded up, and
// each booking is the first second with room.
func TestReturnsTake(t *testing.T) {
	rng := rand.New(rand.NewPCG(35, 1))
	for trial := range 300 {
		perSecond := []float64{0.2, 0.5, 1, 2.5, 7, 100, 333.3}[trial%7]
		burst := []int{0, 1, 3, 50}[rng.IntN(4)]
		var s Returns
		now := int64(1_796_000_000 + rng.IntN(1000))
		booked := map[int64]int{}
		for range 400 {
			now += int64(rng.IntN(3)) // time goes on, or not
			first := now + 1 + int64(rng.IntN(20))
			b := s.take(now, first, perSecond, burst)
			if b < first {
				t.Fatalf("rate %v burst %d: booked second %d before the first allowed, %d", perSecond, burst, b, first)
			}
			// The first second with room: every second from first to b had none.
			for x := first; x < b; x++ {
				if room := int(s.share(x, perSecond, burst)) - booked[x]; room > 0 {
					t.Fatalf("rate %v burst %d: booked %d though %d had room for %d", perSecond, burst, b, x, room)
				}
			}
			booked[b]++
		}
		lo, hi := int64(math.MaxInt64), int64(0)
		for b, n := range booked {
			lo, hi = min(lo, b), max(hi, b)
			if n > int(math.Ceil(perSecond)) || (burst > 0 && n > burst) {
				t.Fatalf("rate %v burst %d: second %d holds %d", perSecond, burst, b, n)
			}
		}
		for from := lo; from <= hi; from++ {
			sum := 0
			for to := from; to <= hi && to < from+30; to++ {
				sum += booked[to]
				if limit := math.Ceil(perSecond*float64(to-from+1)) + 1; float64(sum) > limit {
					t.Fatalf("rate %v: seconds %d..%d hold %d, more than %v", perSecond, from, to, sum, limit)
				}
			}
		}
	}
}

func TestReturnsForgetsThePast(t *testing.T) {
	var s Returns
	for i := range int64(5) {
		if b := s.take(1000, 1001, 1, 0); b != 1001+i {
			t.Fatalf("booking %d: second %d, want %d", i, b, 1001+i)
		}
	}
	// An hour and more later the ring is empty again, and a second far ahead is not booked.
	if b := s.take(1000+2*returnHorizon, 1001+2*returnHorizon, 1, 0); b != 1001+2*returnHorizon {
		t.Errorf("after two hours: %d, want %d", b, 1001+2*returnHorizon)
	}
	if b := s.take(1000, 1000+returnHorizon*5, 1, 0); b != 1000+returnHorizon*5 {
		t.Errorf("beyond the horizon: %d, want the second asked for", b)
	}
	// Booked out: the wait stays honest.
	var full Returns
	for range returnHorizon + 3 {
		if b := full.take(0, 1, 1, 0); b < 1 {
			t.Fatalf("booked %d, before the first allowed", b)
		}
	}
	if w := full.SpreadWait(time.Unix(0, 5e8), 2*returnHorizon*time.Second, 1, 0, 1); w != 2*returnHorizon*time.Second {
		t.Errorf("a wait beyond the horizon: %v, want it unchanged", w)
	}
}

// TestReturnsRateRises: seconds booked out at a low rate (a Concurrency's ServiceTime before
// anything was measured) take more clients once the rate rises, rather than being passed over.
func TestReturnsRateRises(t *testing.T) {
	var s Returns
	for i := range int64(20) {
		if b := s.take(1000, 1001, 1, 0); b != 1001+i {
			t.Fatalf("at 1/s, booking %d: second %d, want %d", i, b, 1001+i)
		}
	}
	if b := s.take(1000, 1001, 10, 0); b != 1001 {
		t.Errorf("at 10/s: second %d, want 1001, which has room for 9 more", b)
	}
	// A small rise, as a measured rate wobbles, does not make it look again.
	var w Returns
	for range 20 {
		w.take(1000, 1001, 1, 0)
	}
	if b := w.take(1000, 1001, 1.2, 0); b != 1020 {
		t.Errorf("at 1.2/s: second %d, want 1020, the last looked at (not 1005, the first with room)", b)
	}
}

// TestReturnsHoldsAnHour: as time goes on the schedule holds the hour after the present, and
// no second past it, even one whose share of a rate that does not divide the hour has room.
func TestReturnsHoldsAnHour(t *testing.T) {
	var s Returns
	s.take(0, 1, 1, 0) // the schedule starts at second 1
	for i := range int64(returnHorizon) {
		if b := s.take(10, 11, 1, 0); b != 11+i {
			t.Fatalf("ten seconds on, booking %d: second %d, want %d", i, b, 11+i)
		}
	}
	if b := s.take(10, 11, 1, 0); b != 11 {
		t.Fatalf("the hour from second 11 booked out: second %d, want 11, the first allowed", b)
	}
	// A second on, only the second passed is forgotten: 1002 to 1005 stay booked, looked at
	// afresh (another burst).
	var k Returns
	for range 5 {
		k.take(1000, 1001, 1, 0)
	}
	if b := k.take(1001, 1002, 1, 1); b != 1006 {
		t.Fatalf("a second on: second %d, want 1006, after the four still booked", b)
	}
	// At 0.9999 a second, 3599 seconds of the hour from second 1 take one client each, and the
	// second after the hour would take one too.
	var f Returns
	last := int64(1)
	for i := range 3599 {
		b := f.take(0, 1, 0.9999, 0)
		if b <= last || b > returnHorizon {
			t.Fatalf("at 0.9999/s, booking %d: second %d, want one after %d within the hour", i, b, last)
		}
		last = b
	}
	if b := f.take(0, 1, 0.9999, 0); b != 1 {
		t.Fatalf("at 0.9999/s, booked out: second %d, want 1, the first allowed", b)
	}
}

// TestReturnsRateRisesAQuarter: seconds found full are looked at again at a rate more than a
// quarter higher than the one they were found full at, and not at a quarter.
func TestReturnsRateRisesAQuarter(t *testing.T) {
	for _, c := range []struct {
		rate float64
		want int64
	}{{5, 1005}, {5.04, 1001}} {
		var s Returns
		for range 20 { // 4 a second: 1001 to 1005 full
			s.take(1000, 1001, 4, 0)
		}
		if b := s.take(1000, 1001, c.rate, 0); b != c.want {
			t.Errorf("at %v/s after 4/s: second %d, want %d", c.rate, b, c.want)
		}
	}
}

// TestReturnsTooHighToCount: a rate of maxShare a second or more is no bound: its clients are
// told the earliest second and not counted, so they take no room from a rate that is.
func TestReturnsTooHighToCount(t *testing.T) {
	now := time.Unix(1000, 0)
	for _, r := range []float64{maxShare, math.Inf(1)} {
		var s Returns
		for range 3 {
			if b := s.Book(now, now.Add(time.Second), r, 0, 1, false); b != 1001 {
				t.Fatalf("at %v/s: second %d, want 1001", r, b)
			}
		}
		if b := s.Book(now, now.Add(time.Second), 1, 0, 1, false); b != 1001 {
			t.Errorf("at 1/s after three at %v/s: second %d, want 1001, which they did not take", r, b)
		}
	}
}
