package envoyrls_test

import (
	"context"
	"fmt"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/retryafter/retryafter/envoyrls"
)

// Example decides requests of envoyproxy/ratelimit's YAML: the third in a minute of a limit of
// 2 a minute is told the exact wait, 30 s, in duration_until_reset and Retry-After.
func Example() {
	cfg, err := envoyrls.Parse(envoyrls.File{Name: "rl.yaml", Data: []byte(`
domain: rl
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 2}
`)})
	if err != nil {
		panic(err)
	}
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	s := envoyrls.New(cfg, envoyrls.Memory, envoyrls.WithClock(func() time.Time { return now }))
	req := &rlsv3.RateLimitRequest{Domain: "rl", Descriptors: []*ratelimitv3.RateLimitDescriptor{
		{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "192.0.2.1"}}},
	}}
	for range 3 {
		resp, _ := s.ShouldRateLimit(context.Background(), req)
		fmt.Print(resp.GetOverallCode(), " ", resp.GetStatuses()[0].GetDurationUntilReset().AsDuration())
		for _, h := range resp.GetResponseHeadersToAdd() {
			fmt.Printf(" %s: %s", h.GetKey(), h.GetValue())
		}
		fmt.Println()
	}
	// Output:
	// OK 30s
	// OK 1m0s
	// OVER_LIMIT 30s Retry-After: 30
}
