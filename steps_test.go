package retryafter

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/retryafter/retryafter/internal/clock"
	"golang.org/x/time/rate"
)

// TestStepsStaleReadingsCreditNoKey decides, on a clock without monotonic readings, a victim
// asking every 10 ms for 60 s at 1/s, while background keys keep every part current and, once
// or five times a second, another key's request is decided with a reading 1.1 s or 3 s stale
// (a request that read the clock long before it was decided): the victim is admitted its burst
// and 60 more, at most. Each stale reading was once taken for a step back of the clock and
// shifted the whole TokenBucket, crediting every key its age: up to 417 admitted against 70.
func TestStepsStaleReadingsCreditNoKey(t *testing.T) {
	ctx := context.Background()
	for _, burst := range []int{1, 10} {
		for _, stale := range []time.Duration{1100 * time.Millisecond, 3 * time.Second} {
			for _, perSecond := range []int{1, 5} {
				b := NewTokenBucket(1, burst)
				admitted := 0
				for step := range 6000 {
					now := t0.Add(time.Duration(step) * 10 * time.Millisecond)
					b.Decide(ctx, fmt.Sprint("bg-", step%256), 0, now)
					if step%(100/perSecond) == 0 {
						b.Decide(ctx, fmt.Sprint("other-", step), 1, now.Add(-stale))
					}
					if d, _ := b.Decide(ctx, "victim", 1, now); d.Allowed {
						admitted++
					}
				}
				if admitted > 60+burst {
					t.Errorf("burst %d, readings %v stale %d a second: the victim admitted %d times in 60 s, want at most %d", burst, stale, perSecond, admitted, 60+burst)
				}
			}
		}
	}
}

// TestStepsStaleReadingsAfterAStepBack is TestStepsStaleReadingsCreditNoKey with the clock
// stepped back by an hour 1 s in, and every part decided at every tick: while the step waited
// to be confirmed, each stale reading was taken for a further step back, which restarted the
// confirmation and credited every key its age (up to 296 admitted against 61).
func TestStepsStaleReadingsAfterAStepBack(t *testing.T) {
	for _, burst := range []int{1, 10} {
		for _, stale := range []time.Duration{1100 * time.Millisecond, 3 * time.Second} {
			for _, perSecond := range []int{1, 5} {
				b := NewTokenBucket(1, burst)
				admitted := victimAfterAStepBack(b, func(step int, now time.Time) {
					if step%(100/perSecond) == 50%(100/perSecond) {
						b.Decide(context.Background(), fmt.Sprint("other-", step), 1, now.Add(-stale))
					}
				})
				if admitted > 61+burst {
					t.Errorf("burst %d, readings %v stale %d a second: the victim admitted %d times in 60 s, want at most %d", burst, stale, perSecond, admitted, 61+burst)
				}
				if sh := b.steps.Shift(); sh < time.Hour-time.Second || sh > time.Hour {
					t.Errorf("burst %d, readings %v stale %d a second: the step taken is %v, want about 1h", burst, stale, perSecond, sh)
				}
			}
		}
	}
}

// victimAfterAStepBack decides on b, on a clock stepped back an hour 1 s in, a victim asking
// every 10 ms for 60 s at cost 1, every part of b decided at every tick, and calls stale at
// every tick for the stale readings; it returns how often the victim was admitted.
func victimAfterAStepBack(b *TokenBucket, stale func(step int, now time.Time)) int {
	ctx := context.Background()
	busy := keysOfEveryPart(b)
	admitted := 0
	for step := range 6000 {
		now := t0.Add(time.Duration(step) * 10 * time.Millisecond)
		if step >= 100 {
			now = now.Add(-time.Hour)
		}
		for _, k := range busy {
			b.Decide(ctx, k, 0, now)
		}
		stale(step, now)
		if d, _ := b.Decide(ctx, "victim", 1, now); d.Allowed {
			admitted++
		}
	}
	return admitted
}

// keysOfEveryPart returns a key of each part of b.
func keysOfEveryPart(b *TokenBucket) []string {
	var keys []string
	seen := map[uint64]bool{}
	for i := 0; len(keys) < partCount; i++ {
		if k := fmt.Sprint("busy-", i); !seen[b.partOf(k)] {
			seen[b.partOf(k)] = true
			keys = append(keys, k)
		}
	}
	return keys
}

// TestStepsJitter decides one key 100 times a second for 60 s at 1/s with bursts of 1 on a clock
// whose readings jitter by up to ±0.6 s (a clock of another host, one being slewed), so that
// some are more than a second behind others: at most 61 admitted.
func TestStepsJitter(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	b := NewTokenBucket(1, 1)
	admitted := 0
	for step := range 6000 {
		jitter := time.Duration((rng.Float64()*1.2 - 0.6) * float64(time.Second))
		if d, _ := b.Decide(context.Background(), "k", 1, t0.Add(time.Duration(step)*10*time.Millisecond+jitter)); d.Allowed {
			admitted++
		}
	}
	if admitted > 61 {
		t.Errorf("admitted %d in 60 s, want at most 61", admitted)
	}
}

// TestStepsBackWithRequestsInFlight sets a clock without monotonic readings back 2 s while one
// client's requests are in flight, readings from before the step decided between readings from
// after it, right after a victim spent its burst of 10 (1/s): 20 ms later the victim finds at
// most a token. The interleaved readings were once taken for steps, each crediting every key.
func TestStepsBackWithRequestsInFlight(t *testing.T) {
	ctx := context.Background()
	b := NewTokenBucket(1, 10)
	for i := range 256 { // every part has seen t0
		b.Decide(ctx, fmt.Sprint("bg", i), 0, t0)
	}
	b.Decide(ctx, "victim", 10, t0)
	for i := range 20 {
		ms := time.Duration(i) * time.Millisecond
		b.Decide(ctx, "other", 0, t0.Add(-2*time.Second+ms)) // read after the step
		b.Decide(ctx, "other", 0, t0.Add(ms))                // read before it, decided after
	}
	if d, _ := b.Decide(ctx, "victim", 0, t0.Add(-2*time.Second+20*time.Millisecond)); d.Remaining > 1 {
		t.Errorf("20 ms after spending its burst, the victim finds %d tokens, want at most 1", d.Remaining)
	}
}

// TestStepsZeroReading decides 100 keys, at one request an hour, spent at t0, then one peek at
// the zero time.Time (a clock that failed): a second later none of them is admitted. And a real
// step back of an hour after it is still taken once the new readings confirm it, 10 s on: a key
// spent at t0 is told to wait the hour less those 10 s. The zero reading once refilled every
// key and shifted the readings by the most a Duration holds, after which a step back was not
// taken and every wait was an hour too long.
func TestStepsZeroReading(t *testing.T) {
	ctx := context.Background()
	b := NewTokenBucket(rate.Every(time.Hour), 1)
	for i := range 100 {
		b.Decide(ctx, fmt.Sprint("k", i), 1, t0)
	}
	b.Decide(ctx, "k0", 0, time.Time{})
	for i := range 100 {
		if d, _ := b.Decide(ctx, fmt.Sprint("k", i), 1, t0.Add(time.Second)); d.Allowed {
			t.Fatalf("after one zero reading, a key spent a second before: %+v, want refused", d)
		}
	}
	back := t0.Add(-time.Hour)
	b.Decide(ctx, "k1", 0, back)
	want := time.Hour - time.Second - 10*time.Second // from t0 + 1 s, the latest instant
	if d, _ := b.Decide(ctx, "k0", 1, back.Add(10*time.Second)); d.Allowed || d.RetryAfter < want-time.Millisecond || d.RetryAfter > want {
		t.Errorf("10 s after a step back of an hour: %+v, want refused for %v", d, want)
	}
}

// logUniformStep returns a step of the clock from a second to ten years, log-uniform, back or
// forward.
func logUniformStep(rng *rand.Rand) time.Duration {
	const tenYears = 10 * 365 * 24 * time.Hour
	d := time.Duration(math.Exp(math.Log(float64(time.Second)) + rng.Float64()*(math.Log(float64(tenYears))-math.Log(float64(time.Second)))))
	if rng.IntN(2) == 0 {
		return -d
	}
	return d
}

// TestStepsAnyStep decides one key a second at 1/s on a clock without monotonic readings that
// steps back and forward at random, by a second to ten years, through a TokenBucket and an All of
// two: no sequence of steps admits more than the burst and the rate over the time the buckets
// saw pass (a step forward is time passing, to a clock like this); no refusal is told more than
// a second, the longest a cost of 1 can wait at 1/s, measured from a reading at most clock.MaxLag
// behind the latest instant, and, while a step back of at most that and a second more (the
// rounding up to whole seconds) is not yet confirmed, that step too (a client back within
// MaxLag of the latest instant reads as the clock's old line: see TestStepsBackRoundTrip), so
// that a step back costs no client more than it really has to wait; and the key is admitted
// again within seconds of each step. Until this was so, a step
// back of more than 366 days was never taken (0 of 60 admitted, told 9599h59m after a 400-day
// step), and a client right after a step back was told the step.
func TestStepsAnyStep(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 54))
	ctx := context.Background()
	for trial := range 60 {
		burst := 1 + rng.IntN(3)
		b := NewTokenBucket(1, burst)
		var l Limiter = b
		if trial%2 == 1 {
			l = All(b, Shared(NewTokenBucket(1, burst), "all"))
		}
		offset, seen := time.Duration(0), time.Duration(0) // the clock's offset; the time the buckets saw pass
		var steps []time.Duration
		admitted, ticks := 0, 0
		for range 8 {
			run := 10 + rng.IntN(60)
			for range run {
				ticks++
				seen += time.Second
				now := t0.Add(time.Duration(ticks)*time.Second + offset)
				d, err := l.Decide(ctx, "k", 1, now)
				if err != nil {
					t.Fatal(err)
				}
				if d.Allowed {
					admitted++
				} else if most := 3*time.Second + 2*clock.MaxLag; d.RetryAfter > most {
					t.Fatalf("trial %d, after steps %v: told %v, want at most %v", trial, steps, d.RetryAfter, most)
				}
			}
			step := logUniformStep(rng)
			offset += step
			steps = append(steps, step)
			if step > 0 {
				seen += step
			}
		}
		if most := burst + int(seen/time.Second); admitted > most {
			t.Fatalf("trial %d, steps %v: admitted %d, want at most %d", trial, steps, admitted, most)
		}
		if least := ticks - 8*7; admitted < least {
			t.Fatalf("trial %d, steps %v: admitted %d of %d a second, want at least %d", trial, steps, admitted, ticks, least)
		}
	}
}

// TestStepsStaleReadingsOfManyAgesAfterAStepBack is TestStepsStaleReadingsAfterAStepBack with
// several stale readings a second, each older than the one before by more than MaxLag, one right
// after the other: each replaces the proposal of the one before, which replaced the clock's new
// line. With one replaced line kept, the next current reading brought back the first stale
// one's (158 admitted against 71 at burst 10 with two, and the step never taken); more than
// maxKept of them are as many as two.
func TestStepsStaleReadingsOfManyAgesAfterAStepBack(t *testing.T) {
	for _, ages := range [][]time.Duration{{1500 * time.Millisecond, 3 * time.Second}, {1500 * time.Millisecond, 3 * time.Second, 4500 * time.Millisecond, 6 * time.Second, 7500 * time.Millisecond, 9 * time.Second}} {
		for _, burst := range []int{1, 10} {
			b := NewTokenBucket(1, burst)
			admitted := victimAfterAStepBack(b, func(step int, now time.Time) {
				if step%100 == 50 {
					for i, age := range ages {
						b.Decide(context.Background(), fmt.Sprint("stale-", i, "-", step), 1, now.Add(-age))
					}
				}
			})
			if admitted > 61+burst {
				t.Errorf("%d ages, burst %d: the victim admitted %d times in 60 s, want at most %d", len(ages), burst, admitted, 61+burst)
			}
			if sh := b.steps.Shift(); sh < time.Hour-time.Second || sh > time.Hour {
				t.Errorf("%d ages, burst %d: the step taken is %v, want about 1h", len(ages), burst, sh)
			}
		}
	}
}

// TestStepsBackRoundTrip holds the round trip across a step back of the clock not yet
// confirmed: a key that spent its burst, asked again on a clock stepped back by any step, is
// told a wait that admits it when it comes back after exactly that long, or that long rounded
// up to whole seconds, whether the clock's new line is by then confirmed or read as the old one's. Told the wait from the latest instant
// only, it came back as far behind that instant as the step, and was refused (a step of 3 s at
// 7 a minute: told 9 s, refused for 3 s more).
func TestStepsBackRoundTrip(t *testing.T) {
	ctx := context.Background()
	for _, step := range []time.Duration{1100 * time.Millisecond, 3 * time.Second, 5 * time.Second, 8 * time.Second, 10 * time.Second, 20 * time.Second, time.Hour} {
		for _, pol := range []Policy{{Limit: rate.Every(time.Minute / 7), Burst: 7}, {Limit: 1, Burst: 1}, {Limit: 0.1, Burst: 3}} {
			b := NewTokenBucket(pol.Limit, pol.Burst)
			decide(t, b, "k", pol.Burst, t0)
			now := t0.Add(-step)
			d, _ := b.Decide(ctx, "k", 1, now)
			if d.Allowed {
				t.Fatalf("step back %v, %v: admitted with the burst spent", step, pol)
			}
			// Exactly, and as Retry-After tells it, rounded up to whole seconds.
			for _, wait := range []time.Duration{d.RetryAfter, (d.RetryAfter + time.Second - 1).Truncate(time.Second)} {
				b := NewTokenBucket(pol.Limit, pol.Burst)
				decide(t, b, "k", pol.Burst, t0)
				b.Decide(ctx, "k", 1, now)
				if again, _ := b.Decide(ctx, "k", 1, now.Add(wait)); !again.Allowed {
					t.Errorf("step back %v, %v: told %v, refused after waiting %v: %+v", step, pol, d.RetryAfter, wait, plain(again))
				}
			}
		}
	}
}

// TestReadingBeyondAnyStep: a reading further behind than any step the line follows (the zero
// time.Time, from a clock that failed once) is decided at the latest instant and told the
// bucket's own wait from there, as one 66 years behind is; it was told the whole lag, saturated
// at 292 years, and a client that obeys never came back.
func TestReadingBeyondAnyStep(t *testing.T) {
	for _, bad := range []time.Time{time.Date(1960, 1, 1, 0, 0, 0, 0, time.UTC), {}, time.Date(-5000, 1, 1, 0, 0, 0, 0, time.UTC)} {
		b := NewTokenBucket(rate.Every(2*time.Second), 1)
		decide(t, b, "k", 1, t0)
		d, _ := b.Decide(context.Background(), "k", 1, bad)
		if d.Allowed || d.RetryAfter <= 0 || d.RetryAfter > 2*time.Second || d.Reset > 2*time.Second {
			t.Errorf("a reading of %v after one of %v: %+v, want refused with the bucket's own wait, 2 s", bad, t0, plain(d))
		}
	}
}

// TestStepsTwoBackRoundTrip: a clock steps back 5.1 s, and 2.15 s later (before the first
// step is confirmed) back another 5.1 s; a key of the same part is decided every 50 ms at the
// current reading. A victim (1/s, burst 1) that asks as soon as it may and then exactly when
// told, rounded up to whole seconds, is refused on return: the second step's readings, climbing within MaxLag of the first
// step's line, brought that line back, which froze the part 5 s behind its latest instant.
func TestStepsTwoBackRoundTrip(t *testing.T) {
	ctx := context.Background()
	b := NewTokenBucket(1, 1)
	other := keyOfPart(b, "victim")
	next, promised := time.Duration(0), time.Duration(-1)
	var told time.Duration
	for r := time.Duration(0); r < 40*time.Second; r += 50 * time.Millisecond {
		now := t0.Add(r + twoStepsBack(r))
		b.Decide(ctx, other, 0, now)
		if r < next {
			continue
		}
		d, _ := b.Decide(ctx, "victim", 1, now)
		if d.Allowed {
			next = r + 50*time.Millisecond
			continue
		}
		if r == promised {
			t.Errorf("real %v (reading %v): told %v at real %v, came back after %v, refused: %+v (shift %v)",
				r, now.Sub(t0), told, r-(told+time.Second-1).Truncate(time.Second), (told + time.Second - 1).Truncate(time.Second), plain(d), b.steps.Shift())
		}
		told = d.RetryAfter
		promised = r + (told + time.Second - 1).Truncate(time.Second)
		next = promised
	}
}

// TestStepsTwoBackAll: an All of X (generous) and Y (1/s, burst 1). X's part
// also decides another key every 50 ms, so X sees the clock's two steps back (5.1 s, then 5.1 s
// again 2.15 s later) before the All does. Y, asked every 50 ms through the All, must admit at
// most its burst plus 1 a second of real time: X's part, frozen by the second step (see
// TestStepsTwoBackRoundTrip), pushed Y's ahead by seconds, which Y took for a step and kept (45
// admitted in 40 s).
func TestStepsTwoBackAll(t *testing.T) {
	ctx := context.Background()
	x, y := NewTokenBucket(1000, 1000), NewTokenBucket(1, 1)
	all := All(x, y)
	other := keyOfPart(x, "victim")
	admitted := 0
	const span = 40 * time.Second
	for r := time.Duration(0); r < span; r += 50 * time.Millisecond {
		now := t0.Add(r + twoStepsBack(r))
		x.Decide(ctx, other, 0, now)
		if r >= 10*time.Second && r < 12500*time.Millisecond {
			continue // the All sees nothing while the clock steps
		}
		if d, _ := all.Decide(ctx, "victim", 1, now); d.Allowed {
			admitted++
		}
	}
	if most := 1 + int(span/time.Second); admitted > most {
		t.Errorf("Y admitted %d in %v of real time (the clock only stepped back), want at most %d; Y shift %v, X shift %v", admitted, span, most, y.steps.Shift(), x.steps.Shift())
	}
}

// keyOfPart returns another key of key's part of b.
func keyOfPart(b *TokenBucket, key string) string {
	for i := 0; ; i++ {
		if k := "other-" + string(rune('a'+i%26)) + string(rune('a'+i/26%26)) + string(rune('a'+i/676%26)); b.partOf(k) == b.partOf(key) {
			return k
		}
	}
}

// twoStepsBack is the offset at real time r of a clock that steps back 5.1 s at 10 s and again
// at 12.15 s, before the first step is confirmed.
func twoStepsBack(r time.Duration) time.Duration {
	o := time.Duration(0)
	if r >= 10*time.Second {
		o -= 5100 * time.Millisecond
	}
	if r >= 12150*time.Millisecond {
		o -= 5100 * time.Millisecond
	}
	return o
}
