package edge

import (
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"golang.org/x/time/rate"
)

func TestPolicyWindow(t *testing.T) {
	type test struct {
		limit rate.Limit
		burst int
		want  int64
	}
	tests := []test{
		{rate.Every(200 * time.Millisecond), 10, 2},
		{1, 1, 1},
		{10, 1, 1}, // 0.1 s rounds up to the smallest window there is
		{0.3, 3, 10},
		{0.3, 1, 4}, // 3.33 s
		{rate.Every(time.Minute), 1, 60},
		{0, 5, 0},
		{rate.Inf, 5, 0},
		{1e-12, 1 << 20, 0},         // does not fit an sf-integer
		{rate.Limit(3.0 / 5), 3, 5}, // 3 per 5 s, a window of httprate's: 5 s, not 6
		{rate.Limit(100.0 / 60), 100, 60},
	}
	if strconv.IntSize == 64 { // a burst this large does not fit a 32-bit int
		var largest int64 = maxSFInteger
		tests = append(tests, test{1, int(largest), maxSFInteger}, test{1, int(largest + 1), 0})
	}
	for _, tt := range tests {
		if got := policyWindow(tt.limit, tt.burst); got != tt.want {
			t.Errorf("policyWindow(%v, %d) = %d, want %d", tt.limit, tt.burst, got, tt.want)
		}
	}
	// The property that makes the policy honest: a client that spends q at once every w seconds
	// is never refused, because w seconds refill at least q tokens.
	rng := rand.New(rand.NewPCG(3, 4))
	for range 10000 {
		limit := rate.Limit(rng.Float64()*50 + 0.001)
		burst := 1 + rng.IntN(1000)
		w := policyWindow(limit, burst)
		if w < 1 {
			t.Fatalf("policyWindow(%v, %d) = %d", limit, burst, w)
		}
		if refilled := float64(w) * float64(limit); refilled < float64(burst)*(1-1e-9) {
			t.Fatalf("policyWindow(%v, %d) = %d s refills only %v tokens", limit, burst, w, refilled)
		}
		if w > 1 && float64(w-1)*float64(limit) >= float64(burst) {
			t.Fatalf("policyWindow(%v, %d) = %d s is a whole second longer than needed", limit, burst, w)
		}
	}
}

func TestSFString(t *testing.T) {
	for in, want := range map[string]string{
		"default":  `"default"`,
		`a"b\c`:    `"a\"b\\c"`,
		"per user": `"per user"`,
	} {
		if got := sfString(in); got != want {
			t.Errorf("sfString(%q) = %s, want %s", in, got, want)
		}
	}
}
