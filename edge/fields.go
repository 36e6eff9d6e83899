package edge

import (
	"math"
	"strconv"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/retryafter/retryafter/internal/header"
)

// The RateLimit and RateLimit-Policy fields follow draft-ietf-httpapi-ratelimit-headers-11 (23
// May 2026): both are Structured Field Lists (RFC 9651) of Items whose value is a String naming
// a policy, one Item for each policy that decided the request (§3, §4: a List may hold several).
//
//	RateLimit-Policy: "default";q=10;w=2, "hour";q=1000;w=3600   §3.1: q quota, w window in seconds
//	RateLimit: "default";r=7;t=1, "hour";r=990;t=4              §4.1: r available quota, t effective window
//
// How a token bucket of rate R per second and burst B maps onto them, and why it is honest:
//
//   - q = B and w = ceil(B / R) seconds (w is left out when R is 0: the bucket never refills).
//     A client that spends at most q units at once, once every w seconds, is never refused: by
//     then the bucket has refilled at least B tokens. Rounding w up understates the throughput a
//     little and never overstates it.
//   - r = the whole tokens left after this request (Decision.Remaining, never negative), and t
//     = the seconds until the bucket holds r + 1 whole tokens, rounded up, 0 when it is full:
//     §4.1.2 defines t as "the number of seconds within which the client can use no more than
//     the available quota", and a bucket lets the client use more than r once its next token
//     is in (draft-10 said the same: "until additional quota ... is made available"). t is
//     left out when the bucket never refills.
//   - On a 429 with a Retry-After, t of the layer that refused is the Retry-After's own
//     delay-seconds, so the two name the same instant (§6: Retry-After is not earlier than the
//     end of the effective window).
//
// The legacy X-RateLimit-Limit, X-RateLimit-Remaining and X-RateLimit-Reset carry q, r and t of
// the binding layer, with Reset in delay-seconds (not a Unix time), for the same reasons of clock
// skew as Retry-After.

// Fields formats the RateLimit fields' values of Decisions, for a policy name: the same
// values on every edge. The zero Fields is not ready: use [NewFields]. It is safe for concurrent
// use.
type Fields struct {
	raw string // the policy name

	// The RateLimit-Policy of the last single-policy decision, which for most limiters does not
	// change from one request to the next.
	last atomic.Pointer[policyLine]
}

// DefaultPolicy is the name of a policy that has none of its own, when NewFields is given "".
const DefaultPolicy = "default"

// NewFields returns the Fields of the policy named policy (DefaultPolicy when it is ""): the
// name of each item whose Policy has no Name, suffixed with its place from the second layer on.
// It panics if policy has a character outside printable ASCII, which an sf-string cannot hold.
func NewFields(policy string) *Fields {
	if policy == "" {
		policy = DefaultPolicy
	}
	if !Printable(policy) {
		panic("retryafter: edge.NewFields: policy name outside printable ASCII")
	}
	return &Fields{raw: policy}
}

// RateLimit returns the value of the RateLimit field of d and RateLimitPolicy that of
// RateLimit-Policy; ok is false when d has no Limit, and the fields are then not sent.
func (f *Fields) Values(d Decision) (rateLimit, rateLimitPolicy string, ok bool) {
	if d.Limit <= 0 {
		return "", "", false
	}
	var buf [96]byte
	return string(f.AppendRateLimit(buf[:0], d)), f.PolicyValue(d), true
}

// AppendRateLimit appends the value of the RateLimit field of d, which must have a Limit, to b.
func (f *Fields) AppendRateLimit(b []byte, d Decision) []byte { return f.list(b, d, false) }

// Legacy returns the values of the X-RateLimit-Limit, X-RateLimit-Remaining and
// X-RateLimit-Reset fields of d's binding policy, Reset in delay-seconds; hasReset is false when
// its quota never refills.
func Legacy(d Decision) (limit, remaining, reset int64, hasReset bool) {
	reset, hasReset = effectiveWindow(d)
	return sfInteger(int64(d.Limit)), sfInteger(int64(d.Remaining)), reset, hasReset
}

// maxSFInteger is the largest Integer a Structured Field may carry (RFC 9651 §3.3.1).
const maxSFInteger = 999_999_999_999_999

// sfString returns s, printable ASCII, as a Structured Field String (RFC 9651 §4.1.6).
func sfString(s string) string { return string(appendSFString(nil, []byte(s))) }

// appendSFString appends s, printable ASCII, to b as a Structured Field String.
func appendSFString(b, s []byte) []byte {
	b = append(b, '"')
	for _, c := range s {
		if c == '"' || c == '\\' {
			b = append(b, '\\')
		}
		b = append(b, c)
	}
	return append(b, '"')
}

// Printable reports whether s is printable ASCII, as a structured-field String must be.
func Printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

type policyLine struct {
	pol   Policy
	q     int
	value string
}

// policyWindow returns ceil(burst / limit) seconds, at least 1, or 0 when the bucket never
// refills (limit 0) or the window does not fit a structured-field Integer. A quotient within a
// nanosecond above a whole number of seconds, the float arithmetic of a rate of n per d seconds
// (n / (n / d)), is that number.
func policyWindow(limit rate.Limit, burst int) int64 {
	if limit <= 0 || limit == rate.Inf {
		return 0
	}
	q := float64(burst) / float64(limit)
	w := math.Ceil(q)
	if f := math.Floor(q); q-f <= 1e-9 {
		w = f
	}
	if w > maxSFInteger {
		return 0
	}
	return max(1, int64(w))
}

// sfInteger clamps n to the non-negative Integers a structured field may carry.
func sfInteger(n int64) int64 {
	return min(max(n, 0), maxSFInteger)
}

// appendName appends the name of the policy of d, the i-th layer of its request, to b: its own
// name, or else the middleware's, suffixed with its place from the second layer on, so that
// every item of a list has a name of its own.
func (f *Fields) appendName(b []byte, d Decision, i int) []byte {
	if d.Policy.Name != "" && Printable(d.Policy.Name) {
		return append(b, d.Policy.Name...)
	}
	b = append(b, f.raw...)
	if i > 0 {
		b = append(b, '-')
		b = strconv.AppendInt(b, int64(i+1), 10)
	}
	return b
}

// itemName appends the name of the policy of d, the i-th layer, to b as an sf-string.
func (f *Fields) itemName(b []byte, d Decision, i int) []byte {
	var buf [64]byte
	return appendSFString(b, f.appendName(buf[:0], d, i))
}

// policyItem appends the RateLimit-Policy Item of d, the i-th layer, to b.
func (f *Fields) policyItem(b []byte, d Decision, i int) []byte {
	b = f.itemName(b, d, i)
	b = append(b, ";q="...)
	b = strconv.AppendInt(b, sfInteger(int64(d.Limit)), 10)
	if w := policyWindow(d.Policy.Limit, d.Policy.Burst); w > 0 {
		b = append(b, ";w="...)
		b = strconv.AppendInt(b, w, 10)
	}
	return b
}

// quotaItem appends the RateLimit Item of d, the i-th layer, to b.
func (f *Fields) quotaItem(b []byte, d Decision, i int) []byte {
	b = f.itemName(b, d, i)
	b = append(b, ";r="...)
	b = strconv.AppendInt(b, sfInteger(int64(d.Remaining)), 10)
	if t, ok := effectiveWindow(d); ok {
		b = append(b, ";t="...)
		b = strconv.AppendInt(b, t, 10)
	}
	return b
}

// effectiveWindow returns t of the RateLimit field for d, and false when there is none (the
// quota never refills). For a refused request with a finite wait it is the Retry-After's own
// delay-seconds; otherwise the time until more quota is available, rounded up.
func effectiveWindow(d Decision) (int64, bool) {
	if !d.Allowed && d.RetryAfter > 0 && d.RetryAfter < rate.InfDuration {
		return sfInteger(header.DelaySeconds(d.RetryAfter)), true
	}
	next := moreQuota(d)
	if next >= rate.InfDuration {
		return 0, false
	}
	if next <= 0 {
		return 0, true
	}
	return sfInteger(header.DelaySeconds(next)), true
}

// moreQuota returns how long until d's key has more than d.Remaining. Of a token bucket, it is
// Reset less the time its rate takes to refill the whole tokens missing beyond the next one, 0
// when it is full; of a limiter whose rate is not known, Reset.
func moreQuota(d Decision) time.Duration {
	if d.Reset >= rate.InfDuration || d.Policy.Limit <= 0 || d.Policy.Limit == rate.Inf {
		return d.Reset
	}
	if d.Remaining >= d.Limit {
		return 0
	}
	later := float64(d.Limit-d.Remaining-1) / float64(d.Policy.Limit) * float64(time.Second)
	return max(d.Reset-time.Duration(later), 0)
}

// list appends to b the RateLimit-Policy Items (policy) or the RateLimit Items of each layer of
// d (d itself, when it is one) that has a Limit and is not unlimited, separated as a List's
// members are.
func (f *Fields) list(b []byte, d Decision, policy bool) []byte {
	layers := d.Layers()
	if layers == nil {
		return f.item(b, d, 0, policy)
	}
	start := len(b)
	for i, e := range layers {
		if e.Limit > 0 && e.Policy.Limit != rate.Inf { // an unlimited layer limits nothing
			if len(b) > start {
				b = append(b, ", "...)
			}
			b = f.item(b, e, i, policy)
		}
	}
	if len(b) == start {
		return f.item(b, d, 0, policy)
	}
	return b
}

// item appends the RateLimit-Policy Item (policy) or the RateLimit Item of d, the i-th layer.
func (f *Fields) item(b []byte, d Decision, i int, policy bool) []byte {
	if policy {
		return f.policyItem(b, d, i)
	}
	return f.quotaItem(b, d, i)
}

// PolicyValue returns the value of the RateLimit-Policy field for d: the one of the last decision when d is
// one layer with the same policy and quota.
func (f *Fields) PolicyValue(d Decision) string {
	one := d.Layers() == nil
	if last := f.last.Load(); one && last != nil && last.pol == d.Policy && last.q == d.Limit {
		return last.value
	}
	var buf [96]byte
	v := string(f.list(buf[:0], d, true))
	if one {
		f.last.Store(&policyLine{pol: d.Policy, q: d.Limit, value: v})
	}
	return v
}

// Violated returns the names of the policies that refused d, as the fields name them, for
// the problem details of a refusal.
func (f *Fields) Violated(d Decision) []string {
	layers := d.Layers()
	if layers == nil {
		layers = []Decision{d}
	}
	var names []string
	for i, e := range layers {
		if !e.Allowed {
			names = append(names, string(f.appendName(nil, e, i)))
		}
	}
	return names
}
