package envoyrls

import (
	"context"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// TestAnyRequest sends many random requests, well formed or not, and checks what every answer
// keeps: no panic; an error only as INVALID_ARGUMENT; a status a descriptor; OVER_LIMIT overall
// exactly when a descriptor is; and a Retry-After, when there is one, equal to the longest
// duration_until_reset of the refused descriptors, none of which lacks one.
func TestAnyRequest(t *testing.T) {
	c := &clock{now: t0}
	cfg, err := Parse(File{Name: "shapes.yaml", Data: []byte(shapes)})
	if err != nil {
		t.Fatal(err)
	}
	s := New(cfg, Memory, WithClock(c.Now), WithRateLimitFields(true), WithXRateLimitHeaders(true))
	rng := rand.New(rand.NewPCG(1, 2))
	keys := []string{"second", "minute", "hour", "outer", "inner", "wild", "old", "new", "shadow", "free", "ban", "x", ""}
	pick := func() string {
		if rng.IntN(10) == 0 {
			b := make([]byte, rng.IntN(300))
			for i := range b {
				b[i] = byte(rng.IntN(256))
			}
			return string(b)
		}
		return keys[rng.IntN(len(keys))]
	}
	for range 5000 {
		c.Add(time.Duration(rng.IntN(3000)) * time.Millisecond)
		req := &rlsv3.RateLimitRequest{Domain: []string{"shapes", "shapes", "other", ""}[rng.IntN(4)], HitsAddend: uint32(rng.IntN(4))}
		if rng.IntN(50) == 0 {
			req.HitsAddend = rng.Uint32()
		}
		for range rng.IntN(20) + rng.IntN(2)*rng.IntN(60) {
			d := &ratelimitv3.RateLimitDescriptor{}
			for range rng.IntN(4) + rng.IntN(2)*rng.IntN(16) {
				d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: pick(), Value: strconv.Itoa(rng.IntN(3)) + []string{"", "a", "abc"}[rng.IntN(3)]})
			}
			if rng.IntN(5) == 0 {
				d.HitsAddend = wrapperspb.UInt64(rng.Uint64N(1 << uint(rng.IntN(64))))
			}
			req.Descriptors = append(req.Descriptors, d)
		}
		resp, err := s.ShouldRateLimit(context.Background(), req)
		if err != nil {
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("%.200v: %v", req, err)
			}
			continue
		}
		checkAnswer(t, req, resp)
	}
}

// checkAnswer checks what every answer to req keeps (see TestAnyRequest).
func checkAnswer(t *testing.T, req *rlsv3.RateLimitRequest, resp *rlsv3.RateLimitResponse) {
	t.Helper()
	if len(resp.GetStatuses()) != len(req.GetDescriptors()) {
		t.Fatalf("%d statuses for %d descriptors", len(resp.GetStatuses()), len(req.GetDescriptors()))
	}
	over, finite, longest := false, true, time.Duration(0)
	for _, st := range resp.GetStatuses() {
		if st.GetCode() == rlsv3.RateLimitResponse_OVER_LIMIT {
			over = true
			if st.GetDurationUntilReset() == nil {
				finite = false
			}
			longest = max(longest, st.GetDurationUntilReset().AsDuration())
		}
	}
	if over != (resp.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT) {
		t.Fatalf("overall %v with a descriptor over its limit: %v", resp.GetOverallCode(), over)
	}
	ra, n := headerValue(resp, "Retry-After")
	switch {
	case n > 1:
		t.Fatalf("%d Retry-After", n)
	case resp.GetOverallCode() == rlsv3.RateLimitResponse_OK && n != 0:
		t.Fatalf("a Retry-After on OK")
	case over && finite && ra != strconv.FormatInt(int64(longest/time.Second), 10):
		t.Fatalf("Retry-After %q, longest duration_until_reset %v", ra, longest)
	case over && !finite && n != 0:
		t.Fatalf("Retry-After %q for a request never admitted", ra)
	}
}
