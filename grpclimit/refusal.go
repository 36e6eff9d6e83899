package grpclimit

import (
	"math"
	"strconv"
	"time"

	"golang.org/x/time/rate"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/retryafter/retryafter"
)

// PushbackKey is the trailer of gRFC A6 (retry design) in which a server tells a client with a
// retry policy when to retry: whole milliseconds, or a negative number for "do not retry".
// grpc-go, grpc-java and gRPC core obey it.
const PushbackKey = "grpc-retry-pushback-ms"

// neverPushback is the pushback of a call that can never be admitted: "do not retry".
const neverPushback = "-1"

// failWait is the wait a call refused because the limiter failed is told: short, since a store
// that is down is usually back soon (the HTTP middleware's Retry-After: 1).
const failWait = time.Second

// millis returns wait in milliseconds, rounded up and at least 1, so that a client that waits
// that long is never early; ok is false for a wait that is never over ([rate.InfDuration]) and
// for one whose milliseconds, multiplied back, would not fit a Duration: grpc-go multiplies
// the pushback by a millisecond, and a product that wrapped would be a wait of nothing.
func millis(wait time.Duration) (ms int64, ok bool) {
	if wait >= rate.InfDuration {
		return 0, false
	}
	ms = int64(wait / time.Millisecond)
	if wait%time.Millisecond > 0 {
		ms++
	}
	if ms > math.MaxInt64/int64(time.Millisecond) {
		return 0, false
	}
	return max(ms, 1), true
}

// refusal returns the status that ends a call d refused, RESOURCE_EXHAUSTED, and its trailer:
// a RetryInfo and a pushback of the same milliseconds, or, for a call that can never be
// admitted, no RetryInfo and a pushback of -1; a QuotaFailure names the violated policies.
func refusal(d retryafter.Decision) (*status.Status, metadata.MD) {
	ms, ok := millis(d.RetryAfter)
	if !ok {
		st := withDetails(status.New(codes.ResourceExhausted, "rate limited: this call exceeds what its limit ever admits"),
			quotaFailure(d))
		return st, metadata.Pairs(PushbackKey, neverPushback)
	}
	wait := time.Duration(ms) * time.Millisecond
	st := withDetails(status.New(codes.ResourceExhausted, "rate limited: retry in "+wait.String()),
		retryInfo(wait), quotaFailure(d))
	return st, metadata.Pairs(PushbackKey, strconv.FormatInt(ms, 10))
}

// unavailable returns the status that ends a call the limiter could not decide, UNAVAILABLE,
// and its trailer: a short wait, as RetryInfo and pushback. It never names the error.
func unavailable() (*status.Status, metadata.MD) {
	st := withDetails(status.New(codes.Unavailable, "rate limiter unavailable"), retryInfo(failWait))
	return st, metadata.Pairs(PushbackKey, strconv.FormatInt(failWait.Milliseconds(), 10))
}

// retryInfo returns the RetryInfo of wait.
func retryInfo(wait time.Duration) *errdetails.RetryInfo {
	return &errdetails.RetryInfo{RetryDelay: durationpb.New(wait)}
}

// quotaFailure returns the QuotaFailure that names the policies d violated: the layers that
// refused, or d's own policy when it was decided in one.
func quotaFailure(d retryafter.Decision) *errdetails.QuotaFailure {
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
	return q
}

// violation describes the policy p as a QuotaFailure's violation: its name ("default" when it
// has none) as subject and quota id, and its burst as the quota value.
func violation(p retryafter.Policy) *errdetails.QuotaFailure_Violation {
	name := p.Name
	if name == "" {
		name = "default"
	}
	v := &errdetails.QuotaFailure_Violation{
		Subject:     "policy:" + name,
		QuotaId:     name,
		QuotaValue:  int64(p.Burst),
		Description: "rate limit " + name + " exceeded",
	}
	if p.Limit > 0 && p.Limit != rate.Inf && p.Burst > 0 {
		v.Description += ": " + strconv.Itoa(p.Burst) + " at once, " + restoredPer(float64(p.Limit))
	}
	return v
}

// units are the spans a rate is stated per, shortest first.
var units = []struct {
	name    string
	seconds float64
}{{"second", 1}, {"minute", 60}, {"hour", 3600}, {"day", 86400}}

// restoredPer states limit, a positive rate per second, as people write a rate: a whole number
// per second, a decimal of up to three places per second (from 1 a second), a whole number per
// minute, hour or day, or else "about" three figures per the shortest unit in which it is at
// least 1 ("about 8.57 restored per minute" for one every 7 seconds).
func restoredPer(limit float64) string {
	// whole allows the error of the product that made n: a few units in its last place.
	whole := func(n float64) bool { return n < 1e15 && math.Abs(n-math.Round(n)) <= 1e-13*n }
	say := func(n float64, unit string) string {
		return strconv.FormatFloat(n, 'f', -1, 64) + " restored per " + unit
	}
	if whole(limit) || limit >= 1 && whole(limit*1000) {
		return say(math.Round(limit*1000)/1000, "second")
	}
	for _, u := range units[1:] {
		if n := limit * u.seconds; whole(n) {
			return say(math.Round(n), u.name)
		}
	}
	u := units[len(units)-1]
	for _, v := range units {
		if limit*v.seconds >= 1 {
			u = v
			break
		}
	}
	n := limit * u.seconds
	if n >= 1e15 {
		return "about " + strconv.FormatFloat(n, 'g', 3, 64) + " restored per " + u.name
	}
	places := max(0, 2-int(math.Floor(math.Log10(n))))
	return "about " + say(roundTo(n, places), u.name)
}

// roundTo returns n rounded to places decimal places.
func roundTo(n float64, places int) float64 {
	f, _ := strconv.ParseFloat(strconv.FormatFloat(n, 'f', places, 64), 64)
	return f
}

// withDetails returns st with details: messages of this package, which always marshal, on a
// status that is not OK, so that WithDetails cannot fail.
func withDetails(st *status.Status, details ...protoadapt.MessageV1) *status.Status {
	with, err := st.WithDetails(details...)
	if err != nil {
		return st
	}
	return with
}
