package downtime

import (
	"math"
	"testing"
	"time"
)

func TestAnswer(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	const wait = time.Minute
	for _, tc := range []struct {
		name     string
		until    time.Time
		wait     time.Duration
		end      time.Time
		left     time.Duration
		counting bool
	}{
		{"unknown end", time.Time{}, wait, t0.Add(wait), wait, false},
		{"end ahead", t0.Add(90*time.Second + time.Millisecond), wait, t0.Add(90*time.Second + time.Millisecond), 90*time.Second + time.Millisecond, true},
		{"end ahead, beyond wait", t0.Add(time.Hour), wait, t0.Add(time.Hour), time.Hour, true},
		{"end now", t0, wait, t0.Add(time.Second), time.Second, false},
		{"late by 100ms", t0.Add(-100 * time.Millisecond), wait, t0.Add(time.Second), time.Second, false},
		{"late by 10s", t0.Add(-10 * time.Second), wait, t0.Add(10 * time.Second), 10 * time.Second, false},
		{"late by a day", t0.Add(-24 * time.Hour), wait, t0.Add(wait), wait, false},
		{"end ahead, too far for a Duration", t0.AddDate(400, 0, 0), wait, t0.AddDate(400, 0, 0), math.MaxInt64 - 1, true},
		{"unknown end, wait of never", time.Time{}, math.MaxInt64, t0.Add(math.MaxInt64 - 1), math.MaxInt64 - 1, false},
	} {
		end, left, counting := Answer(t0, tc.until, tc.wait)
		if !end.Equal(tc.end) || left != tc.left || counting != tc.counting {
			t.Errorf("%s: Answer = %v, %v, %v; want %v, %v, %v", tc.name, end, left, counting, tc.end, tc.left, tc.counting)
		}
	}
}

// TestAnswerNeverEarly holds the promise over many instants: while the end lies ahead, now plus
// the time left is the end; after it, the answer is at least a second and never past wait.
func TestAnswerNeverEarly(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	until := t0.Add(time.Minute)
	for step := -3 * time.Minute; step <= 3*time.Minute; step += 37 * time.Millisecond {
		now := until.Add(step)
		end, left, counting := Answer(now, until, 2*time.Minute)
		if counting != now.Before(until) {
			t.Fatalf("at end%+v: counting = %v", step, counting)
		}
		if !now.Add(left).Equal(end) {
			t.Fatalf("at end%+v: now + %v is not the end %v", step, left, end)
		}
		if counting && left <= 0 || !counting && (left < time.Second || left > 2*time.Minute) {
			t.Fatalf("at end%+v: left %v", step, left)
		}
	}
}
