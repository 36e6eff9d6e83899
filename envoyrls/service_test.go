package envoyrls

import (
	"context"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/retryafter/retryafter"
	"github.com/retryafter/retryafter/edge"
)

// t0 is the instant the tests start at.
var t0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

// A clock is an injected clock.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// serve starts s on loopback and returns a client of it, made by go-control-plane's generated
// code, as Envoy calls it.
func serve(t *testing.T, s *Service) rlsv3.RateLimitServiceClient {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	rlsv3.RegisterRateLimitServiceServer(srv, s)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return rlsv3.NewRateLimitServiceClient(conn)
}

// newService returns a Service of yaml in memory on clock c, and its client.
func newService(t *testing.T, yaml string, c *clock, opts ...Option) (*Service, rlsv3.RateLimitServiceClient) {
	t.Helper()
	cfg, err := Parse(File{Name: "test.yaml", Data: []byte(yaml)})
	if err != nil {
		t.Fatal(err)
	}
	s := New(cfg, Memory, append([]Option{WithClock(c.Now)}, opts...)...)
	return s, serve(t, s)
}

// request makes a request of domain with descriptors.
func request(domain string, hits uint32, ds ...*ratelimitv3.RateLimitDescriptor) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: domain, Descriptors: ds, HitsAddend: hits}
}

// ask sends req and fails the test on an error.
func ask(t *testing.T, cl rlsv3.RateLimitServiceClient, req *rlsv3.RateLimitRequest) *rlsv3.RateLimitResponse {
	t.Helper()
	resp, err := cl.ShouldRateLimit(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// headerValue returns the value of name in resp's response_headers_to_add, and how many there are.
func headerValue(resp *rlsv3.RateLimitResponse, name string) (string, int) {
	v, n := "", 0
	for _, h := range resp.GetResponseHeadersToAdd() {
		if strings.EqualFold(h.GetKey(), name) {
			v, n = h.GetValue(), n+1
		}
	}
	return v, n
}

// wait returns the wait a refusal states, checking that duration_until_reset of the refusing
// descriptors and Retry-After agree and are whole seconds, at least 1.
func wait(t *testing.T, resp *rlsv3.RateLimitResponse) time.Duration {
	t.Helper()
	if resp.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("code %v, want OVER_LIMIT", resp.GetOverallCode())
	}
	ra, n := headerValue(resp, "Retry-After")
	if n != 1 {
		t.Fatalf("%d Retry-After headers, want 1", n)
	}
	var longest time.Duration
	for _, st := range resp.GetStatuses() {
		if st.GetCode() == rlsv3.RateLimitResponse_OVER_LIMIT {
			d := st.GetDurationUntilReset().AsDuration()
			if d < time.Second || d%time.Second != 0 {
				t.Fatalf("duration_until_reset %v: not whole seconds, or under 1 s", d)
			}
			longest = max(longest, d)
		}
	}
	if ra != strconv.FormatInt(int64(longest/time.Second), 10) {
		t.Fatalf("Retry-After %q, longest duration_until_reset %v", ra, longest)
	}
	return longest
}

// roundTrip spends the quota of req at the clock's instant, then checks the promise: refused
// with wait D; refused still at D - 1 s (the wait is tight) when D > 1 s; admitted at D.
func roundTrip(t *testing.T, c *clock, cl rlsv3.RateLimitServiceClient, req *rlsv3.RateLimitRequest, burst int) {
	t.Helper()
	for i := range burst {
		if resp := ask(t, cl, req); resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
			t.Fatalf("request %d of a burst of %d: %v", i+1, burst, resp)
		}
	}
	resp := ask(t, cl, req)
	d := wait(t, resp)
	start := c.Now()
	if d > time.Second {
		c.Add(d - time.Second)
		if again := ask(t, cl, req); again.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
			t.Fatalf("admitted 1 s before the wait of %v ended", d)
		}
	}
	c.Add(start.Add(d).Sub(c.Now()))
	if again := ask(t, cl, req); again.GetOverallCode() != rlsv3.RateLimitResponse_OK {
		t.Fatalf("refused after waiting exactly the %v stated: %v", d, again)
	}
}

const shapes = `domain: shapes
descriptors:
  - key: second
    rate_limit: {unit: second, requests_per_unit: 3}
  - key: minute
    rate_limit: {unit: minute, requests_per_unit: 7}
  - key: hour
    rate_limit: {unit: hour, requests_per_unit: 5}
  - key: day
    rate_limit: {unit: day, requests_per_unit: 11}
  - key: week
    rate_limit: {unit: week, requests_per_unit: 2}
  - key: month
    rate_limit: {unit: month, requests_per_unit: 13}
  - key: year
    rate_limit: {unit: year, requests_per_unit: 1}
  - key: outer
    value: v
    rate_limit: {unit: minute, requests_per_unit: 100}
    descriptors:
      - key: inner
        rate_limit: {unit: minute, requests_per_unit: 2}
      - key: wild
        value: a*
        rate_limit: {unit: second, requests_per_unit: 4}
  - key: old
    rate_limit: {unit: hour, requests_per_unit: 1, name: old}
  - key: new
    rate_limit: {unit: minute, requests_per_unit: 3, replaces: [{name: old}]}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: free
    rate_limit: {unlimited: true}
  - key: ban
    rate_limit: {unit: minute, requests_per_unit: 0}
`

// TestRoundTrip: for every policy shape, a client that waits exactly duration_until_reset is
// admitted, and one that waits a second less is not.
func TestRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name  string
		req   *rlsv3.RateLimitRequest
		burst int
	}{
		{"second", request("shapes", 0, descriptor("second", "c")), 3},
		{"minute", request("shapes", 0, descriptor("minute", "c")), 7},
		{"hour", request("shapes", 0, descriptor("hour", "c")), 5},
		{"day", request("shapes", 0, descriptor("day", "c")), 11},
		{"week", request("shapes", 0, descriptor("week", "c")), 2},
		{"month", request("shapes", 0, descriptor("month", "c")), 13},
		{"year", request("shapes", 0, descriptor("year", "c")), 1},
		{"nested", request("shapes", 0, descriptor("outer", "v", "inner", "c")), 2},
		{"nested and outer", request("shapes", 0, descriptor("outer", "v"), descriptor("outer", "v", "inner", "c")), 2},
		{"wildcard", request("shapes", 0, descriptor("outer", "v", "wild", "abc")), 4},
		{"replaces", request("shapes", 0, descriptor("old", "c"), descriptor("new", "c")), 3},
		{"hits_addend", request("shapes", 3, descriptor("minute", "c")), 2},
		{"descriptor hits_addend", request("shapes", 1, withHits(descriptor("minute", "c"), 2), descriptor("second", "c")), 3},
		{"several", request("shapes", 0, descriptor("second", "c"), descriptor("minute", "c"), descriptor("hour", "c")), 3},
		{"with shadow", request("shapes", 0, descriptor("minute", "c"), descriptor("shadow", "c")), 7},
		{"with unlimited", request("shapes", 0, descriptor("hour", "c"), descriptor("free", "c")), 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &clock{now: t0}
			_, cl := newService(t, shapes, c)
			roundTrip(t, c, cl, tc.req, tc.burst)
		})
	}
}

// withHits sets d's own hits_addend.
func withHits(d *ratelimitv3.RateLimitDescriptor, n uint64) *ratelimitv3.RateLimitDescriptor {
	d.HitsAddend = wrapperspb.UInt64(n)
	return d
}

// TestZeroHitsAddendChecksOnly: a descriptor's own hits_addend of 0 checks without counting, as
// in envoyproxy/ratelimit (a request's hits_addend of 0 still means 1): any number of such
// checks leave the whole limit to the requests that count, and one sent when the limit is
// spent but not exceeded is OK, as upstream's count of 7 of 7 is not over.
func TestZeroHitsAddendChecksOnly(t *testing.T) {
	c := &clock{now: t0}
	_, cl := newService(t, shapes, c)
	for range 20 {
		if resp := ask(t, cl, request("shapes", 0, withHits(descriptor("minute", "c"), 0))); resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
			t.Fatalf("a check of hits_addend 0: %v", resp.GetStatuses()[0])
		}
	}
	for i := range 7 {
		if resp := ask(t, cl, request("shapes", 0, descriptor("minute", "c"))); resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
			t.Fatalf("request %d of 7 a minute after the checks: %v", i+1, resp.GetStatuses()[0])
		}
	}
	if resp := ask(t, cl, request("shapes", 0, withHits(descriptor("minute", "c"), 0))); resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
		t.Fatalf("a check with the limit spent, not exceeded: %v", resp.GetStatuses()[0])
	}
	if resp := ask(t, cl, request("shapes", 0, descriptor("minute", "c"))); resp.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("the 8th request of 7 a minute: %v", resp.GetStatuses()[0])
	}
}

// TestRefusalChargesNothing: a request one descriptor refuses spends nothing in the others.
func TestRefusalChargesNothing(t *testing.T) {
	c := &clock{now: t0}
	_, cl := newService(t, shapes, c)
	ask(t, cl, request("shapes", 0, descriptor("year", "c")))
	for range 5 {
		resp := ask(t, cl, request("shapes", 0, descriptor("minute", "c"), descriptor("year", "c")))
		if resp.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
			t.Fatal("admitted past the year's limit")
		}
		if st := resp.GetStatuses()[0]; st.GetCode() != rlsv3.RateLimitResponse_OK || st.GetLimitRemaining() != 7 {
			t.Fatalf("the minute's descriptor: %v, want OK with 7 remaining", st)
		}
	}
	for i := range 7 {
		if ask(t, cl, request("shapes", 0, descriptor("minute", "c"))).GetOverallCode() != rlsv3.RateLimitResponse_OK {
			t.Fatalf("request %d of 7 refused: the refusals spent", i+1)
		}
	}
}

// TestMixedCostsChargeNothing: the same across descriptors of different hits_addend, decided
// one All after the other.
func TestMixedCostsChargeNothing(t *testing.T) {
	c := &clock{now: t0}
	_, cl := newService(t, shapes, c)
	ask(t, cl, request("shapes", 0, descriptor("year", "c")))
	for range 3 {
		req := request("shapes", 1, withHits(descriptor("minute", "c"), 2), descriptor("year", "c"))
		if ask(t, cl, req).GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
			t.Fatal("admitted past the year's limit")
		}
	}
	if resp := ask(t, cl, request("shapes", 7, descriptor("minute", "c"))); resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
		t.Fatalf("the minute's 7 refused: the refusals spent: %v", resp)
	}
}

// TestRepeatedDescriptorChargesNothing: the same descriptor four times in one request, four
// layers on one client of a rule of 100 a minute (a rate x/time/rate counts inexactly), is
// refused when the client holds one token, and the refusal leaves the token.
func TestRepeatedDescriptorChargesNothing(t *testing.T) {
	c := &clock{now: t0}
	_, cl := newService(t, shapes, c)
	ask(t, cl, request("shapes", 99, descriptor("outer", "v"))) // 100 a minute: 1 left
	d := descriptor("outer", "v")
	if ask(t, cl, request("shapes", 0, d, d, d, d)).GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatal("4 admitted with 1 held")
	}
	if resp := ask(t, cl, request("shapes", 0, d)); resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
		t.Fatalf("the token held before the refusal is gone: %v", resp.GetStatuses()[0])
	}
}

// TestOneClientTwoCosts: two descriptors of different hits_addend count against one client of
// one rule (3 tokens in all, 1 held): refused, with the wait for all 3, after which the request
// is admitted.
func TestOneClientTwoCosts(t *testing.T) {
	c := &clock{now: t0}
	_, cl := newService(t, shapes, c)
	ask(t, cl, request("shapes", 6, descriptor("minute", "c"))) // 7 a minute: 1 left
	req := request("shapes", 1, withHits(descriptor("minute", "c"), 2), descriptor("minute", "c"))
	resp := ask(t, cl, req)
	if resp.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatal("3 admitted with 1 held")
	}
	for i, st := range resp.GetStatuses() {
		if st.GetCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
			t.Errorf("descriptor %d: %v, want OVER_LIMIT", i, st)
		}
	}
	c.Add(wait(t, resp))
	if again := ask(t, cl, req); again.GetOverallCode() != rlsv3.RateLimitResponse_OK {
		t.Fatalf("refused after waiting exactly the wait told: %v", again)
	}
}

// TestNeverAdmitted: a ban and a cost above the burst are refused with no wait: no
// duration_until_reset and no Retry-After.
func TestNeverAdmitted(t *testing.T) {
	c := &clock{now: t0}
	_, cl := newService(t, shapes, c)
	for _, req := range []*rlsv3.RateLimitRequest{
		request("shapes", 0, descriptor("ban", "c")),
		request("shapes", 8, descriptor("minute", "c")),
		request("shapes", 0, withHits(descriptor("minute", "c"), 1<<40)),
		request("shapes", 0, descriptor("second", "c"), descriptor("ban", "c")),
	} {
		resp := ask(t, cl, req)
		if resp.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
			t.Fatalf("%v: admitted", req)
		}
		if _, n := headerValue(resp, "Retry-After"); n != 0 {
			t.Errorf("%v: a Retry-After for a request never admitted", req)
		}
		for _, st := range resp.GetStatuses() {
			if st.GetDurationUntilReset() != nil && st.GetCode() == rlsv3.RateLimitResponse_OVER_LIMIT {
				t.Errorf("%v: duration_until_reset %v", req, st.GetDurationUntilReset().AsDuration())
			}
		}
	}
	if ask(t, cl, request("shapes", 0, descriptor("second", "c"))).GetStatuses()[0].GetLimitRemaining() != 2 {
		t.Error("a request refused by the ban spent the second's quota")
	}
}

// TestShadow: a shadow_mode rule over its limit answers OK and reports a dry-run refusal,
// spending nothing when refused.
func TestShadow(t *testing.T) {
	c := &clock{now: t0}
	var reports []Report
	_, cl := newService(t, shapes, c, WithDecisionHook(func(r Report) { reports = append(reports, r) }))
	for range 3 {
		if ask(t, cl, request("shapes", 0, descriptor("shadow", "c"))).GetOverallCode() != rlsv3.RateLimitResponse_OK {
			t.Fatal("shadow mode refused")
		}
	}
	want := []retryafter.Outcome{edge.Admitted, edge.DryRunRefused, edge.DryRunRefused}
	if len(reports) != 3 {
		t.Fatalf("%d reports, want 3", len(reports))
	}
	for i, r := range reports {
		if r.Outcome != want[i] {
			t.Errorf("report %d: %v, want %v", i, r.Outcome, want[i])
		}
	}
}

// TestShadowNotAskedNotReported: a request another rule refuses never asks its shadow_mode
// rule, which is not reported; alone, the shadow rule admits.
func TestShadowNotAskedNotReported(t *testing.T) {
	c := &clock{now: t0}
	var reports []Report
	_, cl := newService(t, shapes, c, WithDecisionHook(func(r Report) { reports = append(reports, r) }))
	ask(t, cl, request("shapes", 0, descriptor("year", "c"))) // the year's one request
	reports = nil
	if ask(t, cl, request("shapes", 0, descriptor("year", "c"), descriptor("shadow", "fresh"))).GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatal("admitted past the year's limit")
	}
	for _, r := range reports {
		if r.Rule.ShadowMode {
			t.Errorf("the shadow rule, not asked, reported as %v", r.Outcome)
		}
	}
	reports = nil
	ask(t, cl, request("shapes", 0, descriptor("shadow", "fresh")))
	if len(reports) != 1 || reports[0].Outcome != edge.Admitted {
		t.Fatalf("the shadow rule alone: %+v, want one Admitted", reports)
	}
}

// TestUnmatched: a descriptor no rule matches, or of an unknown domain, is OK with no limit.
func TestUnmatched(t *testing.T) {
	c := &clock{now: t0}
	_, cl := newService(t, shapes, c)
	for _, req := range []*rlsv3.RateLimitRequest{
		request("shapes", 0, descriptor("nothing", "c")),
		request("unknown", 0, descriptor("second", "c")),
		request("shapes", 0, descriptor()),
	} {
		for range 5 {
			resp := ask(t, cl, req)
			if resp.GetOverallCode() != rlsv3.RateLimitResponse_OK || resp.GetStatuses()[0].GetCurrentLimit() != nil {
				t.Fatalf("%v: %v", req, resp)
			}
		}
	}
}

// TestBadRequests: what is beyond the limits, or malformed, is INVALID_ARGUMENT.
func TestBadRequests(t *testing.T) {
	c := &clock{now: t0}
	_, cl := newService(t, shapes, c)
	many := func(n int) []*ratelimitv3.RateLimitDescriptor {
		ds := make([]*ratelimitv3.RateLimitDescriptor, n)
		for i := range ds {
			ds[i] = descriptor("second", "c")
		}
		return ds
	}
	long := strings.Repeat("x", MaxLength+1)
	entries := make([]string, 2*(MaxEntries+1))
	for i := range entries {
		entries[i] = "k"
	}
	for _, req := range []*rlsv3.RateLimitRequest{
		{},
		{Domain: "shapes"},
		{Domain: "shapes", Descriptors: many(MaxDescriptors + 1)},
		{Domain: "shapes", Descriptors: many(5000)},
		{Domain: long, Descriptors: many(1)},
		request("shapes", 0, descriptor(entries...)),
		request("shapes", 0, &ratelimitv3.RateLimitDescriptor{IsNegativeHits: true}),
		request("shapes", 0, &ratelimitv3.RateLimitDescriptor{Limit: &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1}}),
	} {
		_, err := cl.ShouldRateLimit(context.Background(), req)
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("%.80v: %v, want INVALID_ARGUMENT", req, err)
		}
	}
	if resp := ask(t, cl, &rlsv3.RateLimitRequest{Domain: "shapes", Descriptors: many(MaxDescriptors)}); resp.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Errorf("64 descriptors of a limit of 3: %v", resp.GetOverallCode())
	}
}

// TestLongValuesCounted: a descriptor value longer than MaxLength (a path padded with a query
// string, a header the client writes) is matched and counted as any other, by its SHA-256 in
// the client's key: refused with INVALID_ARGUMENT, it turned every limit of the request off
// behind an Envoy that lets a request through when the service errs (failure_mode_deny: false).
func TestLongValuesCounted(t *testing.T) {
	const yml = `domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: path
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: wild
    value: /x*
    rate_limit: {unit: hour, requests_per_unit: 1}
`
	c := &clock{now: t0}
	_, cl := newService(t, yml, c)
	long := "/x?" + strings.Repeat("a", 4*MaxLength)
	if resp := ask(t, cl, request("edge", 0, descriptor("remote_address", "10.0.0.1"), descriptor("path", "/x"))); resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
		t.Fatalf("first request: %v", resp)
	}
	// The client over its limit of 1 an hour, with a long path: refused, not an error.
	resp, err := cl.ShouldRateLimit(context.Background(), request("edge", 0, descriptor("remote_address", "10.0.0.1"), descriptor("path", long)))
	if err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("a client over its limit, with a %d-byte path: %v, %v; want OVER_LIMIT", len(long), resp, err)
	}
	// A long value is one client, another long value another, however alike.
	for i, want := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT} {
		if got := ask(t, cl, request("edge", 0, descriptor("path", long))).GetOverallCode(); got != want {
			t.Fatalf("the long path, request %d of 2 an hour: %v, want %v", i+1, got, want)
		}
	}
	if got := ask(t, cl, request("edge", 0, descriptor("path", long[:len(long)-1]+"b"))).GetOverallCode(); got != rlsv3.RateLimitResponse_OK {
		t.Fatalf("a long path differing in its last byte, first request: %v", got)
	}
	// A wildcard matches a long value by all of it.
	for i, want := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT} {
		if got := ask(t, cl, request("edge", 0, descriptor("wild", long))).GetOverallCode(); got != want {
			t.Fatalf("a long value matching /x*, request %d of 1 an hour: %v, want %v", i+1, got, want)
		}
	}
}

// TestRemainingAdmits: the X-RateLimit-Remaining of an admitted request is how many more of it
// are admitted at that instant: the descriptor with the least Remaining binds. The one with the
// least share of its limit bound, telling 30 (of 100) where the other's 2 (of 4) let 2 more in.
func TestRemainingAdmits(t *testing.T) {
	const cfg = `domain: d
descriptors:
  - key: a
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: b
    rate_limit: {unit: minute, requests_per_unit: 4}
`
	c := &clock{now: t0}
	_, cl := newService(t, cfg, c, WithXRateLimitHeaders(true))
	for range 69 {
		ask(t, cl, request("d", 0, descriptor("a", "x")))
	}
	ask(t, cl, request("d", 0, descriptor("b", "x")))
	resp := ask(t, cl, request("d", 0, descriptor("a", "x"), descriptor("b", "x")))
	got, _ := headerValue(resp, "X-RateLimit-Remaining")
	more := 0
	for range 40 {
		if ask(t, cl, request("d", 0, descriptor("a", "x"), descriptor("b", "x"))).GetOverallCode() == rlsv3.RateLimitResponse_OK {
			more++
		}
	}
	if got != strconv.Itoa(more) {
		t.Errorf("X-RateLimit-Remaining %s, then %d more of the same request admitted", got, more)
	}
}

// farLimiter refuses every request with the longest wait a Duration holds, the wait the
// package's waits saturate at.
type farLimiter struct {
	pol func(string) retryafter.Policy
}

func (f farLimiter) Decide(_ context.Context, key string, _ int, _ time.Time) (retryafter.Decision, error) {
	p := f.pol(key)
	return retryafter.Decision{RetryAfter: rate.InfDuration - 1, Limit: p.Burst, Reset: rate.InfDuration - 1, Policy: p}, nil
}

// TestLongestWait: a refusal of the longest wait a Duration holds is told it in whole seconds,
// in duration_until_reset as in Retry-After; the seconds, made a Duration again, wrapped to a
// negative duration_until_reset.
func TestLongestWait(t *testing.T) {
	cfg, err := Parse(File{Name: "t.yaml", Data: []byte("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: minute, requests_per_unit: 1}\n")})
	if err != nil {
		t.Fatal(err)
	}
	s := New(cfg, func(p func(string) retryafter.Policy) retryafter.Limiter { return farLimiter{p} }, WithClock(func() time.Time { return t0 }))
	resp := ask(t, serve(t, s), request("d", 0, descriptor("a", "x")))
	st := resp.GetStatuses()[0]
	ra, _ := headerValue(resp, "Retry-After")
	if st.GetCode() != rlsv3.RateLimitResponse_OVER_LIMIT || ra != "9223372037" || st.GetDurationUntilReset().GetSeconds() != 9223372037 {
		t.Errorf("Retry-After %s, duration_until_reset %d s, want 9223372037 both", ra, st.GetDurationUntilReset().GetSeconds())
	}
}

// TestReloadKeepsState: SetConfig keeps each client's tokens, capped at the new burst: a client
// with 4 of 5 left has 2 of a new burst of 2, and one with none left still has none.
func TestReloadKeepsState(t *testing.T) {
	c := &clock{now: t0}
	s, cl := newService(t, shapes, c)
	ask(t, cl, request("shapes", 0, descriptor("hour", "a")))
	for range 5 {
		ask(t, cl, request("shapes", 0, descriptor("hour", "b")))
	}
	cfg, err := Parse(File{Name: "test.yaml", Data: []byte(strings.Replace(shapes, "{unit: hour, requests_per_unit: 5}", "{unit: hour, requests_per_unit: 2}", 1))})
	if err != nil {
		t.Fatal(err)
	}
	s.SetConfig(cfg)
	a := ask(t, cl, request("shapes", 0, descriptor("hour", "a")))
	if a.GetOverallCode() != rlsv3.RateLimitResponse_OK || a.GetStatuses()[0].GetLimitRemaining() != 1 {
		t.Errorf("a: %v, want OK with 1 of 2 left", a.GetStatuses()[0])
	}
	if b := ask(t, cl, request("shapes", 0, descriptor("hour", "b"))); b.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Errorf("b, with no tokens, admitted after the reload: its state was lost")
	}
}

// TestManyLimitedDescriptors: more than 16 descriptors with a limit are decided in several
// Alls, and a refusal in the last gives back what the first spent.
func TestManyLimitedDescriptors(t *testing.T) {
	c := &clock{now: t0}
	_, cl := newService(t, shapes, c)
	for range 7 {
		ask(t, cl, request("shapes", 0, descriptor("minute", "v19")))
	}
	var ds []*ratelimitv3.RateLimitDescriptor
	for i := range 20 {
		ds = append(ds, descriptor("minute", "v"+strconv.Itoa(i)))
	}
	if ask(t, cl, request("shapes", 0, ds...)).GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatal("admitted with v19 spent")
	}
	if st := ask(t, cl, request("shapes", 0, descriptor("minute", "v0"))).GetStatuses()[0]; st.GetLimitRemaining() != 6 {
		t.Errorf("v0 after one request: %d left, want 6: the refusal spent", st.GetLimitRemaining())
	}
}

// TestNilOptionsPanicAtConstruction: a nil clock or option is refused when the Service is made,
// not by a panic on its first request, inside a gRPC handler.
func TestNilOptionsPanicAtConstruction(t *testing.T) {
	cfg, err := Parse(File{Name: "test.yaml", Data: []byte(shapes)})
	if err != nil {
		t.Fatal(err)
	}
	for name, build := range map[string]func(){
		"WithClock(nil)": func() { New(cfg, Memory, WithClock(nil)) },
		"a nil Option":   func() { New(cfg, Memory, nil) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: New did not panic", name)
				}
			}()
			build()
		}()
	}
}
