package grpclimit

import (
	"bytes"
	"context"
	"math"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"golang.org/x/time/rate"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/retryafter/retryafter"
)

// wantMillis is the pushback of wait, stated apart from millis: the wait rounded up to the
// millisecond and at least 1, or false for a wait never over or whose milliseconds, multiplied
// back by grpc-go, would not fit a Duration.
func wantMillis(wait time.Duration) (int64, bool) {
	if wait >= rate.InfDuration {
		return 0, false
	}
	ms := int64(wait / time.Millisecond)
	if wait%time.Millisecond > 0 {
		ms++
	}
	if ms > math.MaxInt64/int64(time.Millisecond) {
		return 0, false
	}
	return max(ms, 1), true
}

// referenceRefusal builds the refusal of d the way the messages were built before they were
// kept in their wire form: status.New, then WithDetails of a RetryInfo from durationpb.New and
// of a QuotaFailure, each marshalled by proto.Marshal through anypb.New.
func referenceRefusal(t *testing.T, d retryafter.Decision) (*status.Status, metadata.MD) {
	t.Helper()
	q := &errdetails.QuotaFailure{}
	layers := d.Layers()
	if layers == nil {
		layers = []retryafter.Decision{d}
	}
	for _, l := range layers {
		if !l.Allowed {
			q.Violations = append(q.Violations, violation(l.Policy))
		}
	}
	details := []protoadapt.MessageV1{q}
	msg, back := "rate limited: this call exceeds what its limit ever admits", "-1"
	if ms, ok := wantMillis(d.RetryAfter); ok {
		wait := time.Duration(ms) * time.Millisecond
		details = []protoadapt.MessageV1{&errdetails.RetryInfo{RetryDelay: durationpb.New(wait)}, q}
		msg, back = "rate limited: retry in "+wait.String(), strconv.FormatInt(ms, 10)
	}
	st, err := status.New(codes.ResourceExhausted, msg).WithDetails(details...)
	if err != nil {
		t.Fatalf("reference of %+v: %v", d, err)
	}
	return st, metadata.Pairs(PushbackKey, back)
}

// sameRefusal fails t unless got is want, byte for byte on the wire, and its details read back
// as they should: a RetryInfo of the pushback's milliseconds exactly, never 0, and the
// QuotaFailure's violations.
func sameRefusal(t *testing.T, d retryafter.Decision, got, want *status.Status, gotMD, wantMD metadata.MD) {
	t.Helper()
	opts := proto.MarshalOptions{Deterministic: true}
	g, err := opts.Marshal(got.Proto())
	if err != nil {
		t.Fatal(err)
	}
	w, _ := opts.Marshal(want.Proto())
	if !bytes.Equal(g, w) || !proto.Equal(got.Proto(), want.Proto()) {
		t.Fatalf("decision %+v:\n got %v\nwant %v", d, got.Proto(), want.Proto())
	}
	if len(gotMD) != 1 || len(gotMD[PushbackKey]) != 1 || gotMD[PushbackKey][0] != wantMD[PushbackKey][0] {
		t.Fatalf("decision %+v: trailer %v, want %v", d, gotMD, wantMD)
	}
	var retry *errdetails.RetryInfo
	var quota *errdetails.QuotaFailure
	for _, x := range got.Details() {
		switch x := x.(type) {
		case *errdetails.RetryInfo:
			retry = x
		case *errdetails.QuotaFailure:
			quota = x
		default:
			t.Fatalf("decision %+v: detail %v", d, x)
		}
	}
	ms, ok := wantMillis(d.RetryAfter)
	switch {
	case !ok && retry != nil:
		t.Fatalf("decision %+v: RetryInfo %v beside a pushback of -1", d, retry)
	case ok && (retry.GetRetryDelay().AsDuration() != time.Duration(ms)*time.Millisecond || ms < 1):
		t.Fatalf("decision %+v: RetryInfo %v, want %d ms", d, retry, ms)
	}
	wantQuota := want.Details()[len(want.Details())-1].(*errdetails.QuotaFailure)
	if len(quota.GetViolations()) != len(wantQuota.GetViolations()) {
		t.Fatalf("decision %+v: QuotaFailure %v, want %v", d, quota, wantQuota)
	}
	for i, v := range quota.GetViolations() {
		if v.GetDescription() != wantQuota.GetViolations()[i].GetDescription() || v.GetSubject() != wantQuota.GetViolations()[i].GetSubject() {
			t.Fatalf("decision %+v: violation %v, want %v", d, v, wantQuota.GetViolations()[i])
		}
	}
}

// randomPolicy returns a policy of a random name, rate and burst, as a limiter might decide one.
func randomPolicy(rng *rand.Rand) retryafter.Policy {
	names := []string{"", "default", "per-client", "überall", "a b", strconv.Itoa(rng.IntN(1000))}
	limits := []rate.Limit{0, rate.Inf, rate.Every(time.Duration(1 + rng.Int64N(int64(30*24*time.Hour)))),
		rate.Limit(math.Pow(10, -8+20*rng.Float64())), rate.Limit(1 + rng.IntN(1000))}
	bursts := []int{0, 1, -1, rng.IntN(1000), rng.Int(), math.MaxInt}
	return retryafter.Policy{Name: names[rng.IntN(len(names))], Limit: limits[rng.IntN(len(limits))], Burst: bursts[rng.IntN(len(bursts))]}
}

// randomWait returns a random wait of a refusal, across the milliseconds' edges and the largest.
func randomWait(rng *rand.Rand) time.Duration {
	most := time.Duration(math.MaxInt64/int64(time.Millisecond)) * time.Millisecond
	switch rng.IntN(8) {
	case 0:
		return []time.Duration{0, -1, -time.Hour, 1, time.Millisecond, time.Millisecond + 1, time.Second,
			time.Minute, time.Hour, most, most + 1, rate.InfDuration - 1, rate.InfDuration}[rng.IntN(13)]
	case 1:
		return time.Duration(1 + rng.Int64N(int64(time.Second)))
	case 2:
		return time.Duration(rng.Int64N(1e6)) * time.Millisecond
	case 3:
		return most - time.Duration(rng.Int64N(int64(time.Hour)))
	default:
		return time.Duration(rng.Int64N(int64(48 * time.Hour)))
	}
}

// layered returns a Decision of All over limiters of policies, refused in the layers of a burst
// of 1 and admitted in the others.
func layered(t *testing.T, rng *rand.Rand, policies []retryafter.Policy) retryafter.Decision {
	t.Helper()
	var limiters []retryafter.Limiter
	for i, p := range policies {
		p.Limit = min(max(p.Limit, rate.Every(time.Hour)), 1000) // refilled in no time, it would admit
		p.Burst = 1 + i%2*10                                     // the first layer refuses
		if rng.IntN(3) == 0 {
			p.Burst = 1
		}
		limiters = append(limiters, retryafter.NewTokenBucket(1, 1, retryafter.WithPolicyFunc(func(string) retryafter.Policy { return p })))
	}
	l := retryafter.All(limiters...)
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	l.Decide(context.Background(), "k", 1, now)
	d, err := l.Decide(context.Background(), "k", 1, now)
	if err != nil || d.Allowed {
		t.Fatalf("second call through %v: %+v, %v; want a refusal", policies, d, err)
	}
	return d
}

// TestRefusalWire: the refusal built from the kept wire forms is, byte for byte, the one
// status.New and WithDetails build from the messages, over random policies, several layers and
// waits, from goroutines refusing at once under more policies than are kept; the kept ones
// stay within their bound.
func TestRefusalWire(t *testing.T) {
	s := newServer(retryafter.NewTokenBucket(1, 1), nil)
	var policies []retryafter.Policy
	rng := rand.New(rand.NewPCG(56, 1))
	for range 2 * maxQuotaPolicies {
		policies = append(policies, randomPolicy(rng))
	}
	t.Run("goroutines", func(t *testing.T) {
		for g := range 4 {
			t.Run(strconv.Itoa(g), func(t *testing.T) {
				t.Parallel()
				rng := rand.New(rand.NewPCG(56, uint64(g)))
				for i := range 500 {
					d := retryafter.Decision{RetryAfter: randomWait(rng), Policy: policies[rng.IntN(len(policies))]}
					if i%10 == 0 {
						d = layered(t, rng, []retryafter.Policy{policies[rng.IntN(len(policies))], policies[rng.IntN(len(policies))], randomPolicy(rng)})
						d.RetryAfter = randomWait(rng)
					}
					st, md := s.refusal(&d)
					want, wantMD := referenceRefusal(t, d)
					sameRefusal(t, d, st, want, md, wantMD)
				}
			})
		}
	})
	if n := len(*s.quotas.kept.Load()); n > maxQuotaPolicies {
		t.Fatalf("%d policies kept, want at most %d", n, maxQuotaPolicies)
	}
}

// TestUnavailableWire: the status of a limiter that failed is, byte for byte, the one
// WithDetails built: UNAVAILABLE with a RetryInfo of a second, and a pushback of 1000.
func TestUnavailableWire(t *testing.T) {
	s := newServer(retryafter.NewTokenBucket(1, 1), nil)
	st, md := s.unavailable()
	want, err := status.New(codes.Unavailable, "rate limiter unavailable").
		WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(st.Proto(), want.Proto()) || len(md) != 1 || md.Get(PushbackKey)[0] != "1000" {
		t.Fatalf("%v, trailer %v; want %v, pushback 1000", st.Proto(), md, want.Proto())
	}
}

// TestAppendWait: the wait of the message is time.Duration's String of it, over random whole
// milliseconds up to the largest pushback.
func TestAppendWait(t *testing.T) {
	rng := rand.New(rand.NewPCG(56, 2))
	for i := range 20000 {
		ms := 1 + rng.Int64N([]int64{1000, 60_000, 3_600_000, math.MaxInt64 / int64(time.Millisecond)}[i%4])
		if i < 20 {
			ms = []int64{1, 9, 10, 999, 1000, 1001, 1010, 1100, 59_999, 60_000, 60_001, 3_599_999, 3_600_000,
				3_600_001, 86_400_000, math.MaxInt64 / int64(time.Millisecond), 100, 12_340, 61_200, 3_660_500}[i]
		}
		if got, want := string(appendWait(nil, ms)), (time.Duration(ms) * time.Millisecond).String(); got != want {
			t.Fatalf("%d ms: %q, want %q", ms, got, want)
		}
	}
}

// TestRefusalInvalidName: a policy whose name is not UTF-8 cannot be named in a QuotaFailure;
// the refusal still says when to come back, with its RetryInfo.
func TestRefusalInvalidName(t *testing.T) {
	s := newServer(retryafter.NewTokenBucket(1, 1), nil)
	st, md := s.refusal(&retryafter.Decision{RetryAfter: 1500 * time.Millisecond, Policy: retryafter.Policy{Name: "\xff", Limit: 1, Burst: 1}})
	if len(st.Details()) != 1 || md.Get(PushbackKey)[0] != "1500" {
		t.Fatalf("%v, trailer %v; want a RetryInfo alone, pushback 1500", st.Proto(), md)
	}
	if r, ok := st.Details()[0].(*errdetails.RetryInfo); !ok || r.GetRetryDelay().AsDuration() != 1500*time.Millisecond {
		t.Fatalf("%v: want a RetryInfo of 1.5s", st.Details())
	}
}
