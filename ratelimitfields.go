package retryafter

import (
	"math"
	"net/http"
	"strconv"

	"golang.org/x/time/rate"

	"github.com/retryafter/retryafter/internal/header"
)

// The RateLimit and RateLimit-Policy fields follow draft-ietf-httpapi-ratelimit-headers-11
// (23 May 2026), the newest revision published: both are Structured Field Lists (RFC 9651) of
// Items whose value is a String naming the policy.
//
//	RateLimit-Policy: "default";q=10;w=2     §3.1: q quota (REQUIRED), w window in seconds
//	RateLimit: "default";r=7;t=1             §4.1: r available quota (REQUIRED), t effective window
//
// How a token bucket of rate R per second and burst B maps onto them, and why it is honest:
//
//   - q = B and w = ceil(B / R) seconds (w is left out when R is 0: the bucket never refills).
//     A client that spends at most q units at once, once every w seconds, is never refused: by
//     then the bucket has refilled at least B tokens. Rounding w up understates the throughput a
//     little and never overstates it.
//   - r = the whole tokens left after this request (Decision.Remaining, never negative) and
//     t = seconds until the bucket is full again (Decision.Reset), rounded up. A client that spends
//     no more than r within t seconds (§7: "SHOULD NOT exceed the available quota within the time
//     expressed in the effective window") is never refused, and after t it has q again. t is left
//     out when the bucket never refills.
//   - On a 429 with a Retry-After, t is the Retry-After's own delay-seconds, so the two name the
//     same instant: §6 asks that Retry-After not be earlier than the end of the effective window,
//     and t is never earlier than Retry-After (compare Appendix B.1.4 of the draft).
//
// The legacy X-RateLimit-Limit, X-RateLimit-Remaining and X-RateLimit-Reset carry q, r and t, with
// Reset in delay-seconds (not a Unix time), for the same reasons of clock skew as Retry-After.

// fieldSet says which rate-limit fields the middleware writes.
type fieldSet uint8

const (
	fieldsDraft  fieldSet = 1 << iota // RateLimit and RateLimit-Policy
	fieldsLegacy                      // X-RateLimit-Limit, -Remaining and -Reset
)

// Header names, canonical so that setting them skips canonicalisation.
const (
	headerRateLimit       = "Ratelimit"
	headerRateLimitPolicy = "Ratelimit-Policy"
	headerXLimit          = "X-Ratelimit-Limit"
	headerXRemaining      = "X-Ratelimit-Remaining"
	headerXReset          = "X-Ratelimit-Reset"
)

// maxSFInteger is the largest Integer a Structured Field may carry (RFC 9651 §3.3.1).
const maxSFInteger = 999_999_999_999_999

// defaultPolicy is the policy name when WithRateLimitFields is given "".
const defaultPolicy = "default"

// WithRateLimitFields makes [Limit] and [LimitWith] send the RateLimit and RateLimit-Policy fields
// of draft-ietf-httpapi-ratelimit-headers-11 on every response the limiter decides, admitted
// (set before next is called) and refused alike, under the policy name policy ("default" when
// policy is ""). The default is to send neither.
//
// For a [TokenBucket] of rate R and burst B the fields read
//
//	RateLimit-Policy: "default";q=B;w=ceil(B/R)
//	RateLimit: "default";r=<whole tokens left>;t=<seconds until the bucket is full, rounded up>
//
// and on a 429, t equals the Retry-After, so that neither tells the client it may come back
// earlier than the other. Other limiters fill the fields from their [Decision]; one that leaves
// Decision.Limit at 0 gets no fields, and RateLimit-Policy carries no w for it. It panics if
// policy has a character outside printable ASCII.
func WithRateLimitFields(policy string) Option {
	if policy == "" {
		policy = defaultPolicy
	}
	for i := 0; i < len(policy); i++ {
		if policy[i] < 0x20 || policy[i] > 0x7e {
			panic("retryafter: WithRateLimitFields: policy name outside printable ASCII")
		}
	}
	name := sfString(policy)
	return func(c *config) {
		c.fields |= fieldsDraft
		c.policy = name
	}
}

// WithLegacyRateLimitFields makes [Limit] and [LimitWith] also send, when on is true, the
// X-RateLimit-Limit, X-RateLimit-Remaining and X-RateLimit-Reset fields that older clients read,
// with the values of q, r and t of [WithRateLimitFields]: X-RateLimit-Reset is in delay-seconds,
// not a Unix time, so that the client's clock plays no part. The default is not to send them.
func WithLegacyRateLimitFields(on bool) Option {
	return func(c *config) {
		if on {
			c.fields |= fieldsLegacy
		} else {
			c.fields &^= fieldsLegacy
		}
	}
}

// sfString returns s, printable ASCII, as a Structured Field String (RFC 9651 §4.1.6).
func sfString(s string) string {
	b := make([]byte, 0, len(s)+2)
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		if s[i] == '"' || s[i] == '\\' {
			b = append(b, '\\')
		}
		b = append(b, s[i])
	}
	return string(append(b, '"'))
}

// quotaFields writes the rate-limit fields. It is built once per middleware: the policy field,
// which does not change for a TokenBucket, is formatted ahead.
type quotaFields struct {
	set    fieldSet
	name   string // the policy name as an sf-string
	window int64  // w in seconds; 0 when unknown or never
	policy string // the RateLimit-Policy value formatted ahead, for q; "" when none
	q      int    // the quota policy was formatted for
}

// newQuotaFields returns the field writer of the configuration c for the limiter l.
func newQuotaFields(c *config, l Limiter) quotaFields {
	f := quotaFields{set: c.fields, name: c.policy}
	if b, ok := l.(*TokenBucket); ok && b.limit != rate.Inf {
		f.window = policyWindow(b.limit, b.burst)
		f.q = b.burst
		f.policy = f.policyValue(b.burst)
	}
	return f
}

// policyWindow returns ceil(burst / limit) seconds, at least 1, or 0 when the bucket never
// refills (limit 0) or the window does not fit a structured-field Integer.
func policyWindow(limit rate.Limit, burst int) int64 {
	if limit <= 0 || limit == rate.Inf {
		return 0
	}
	w := math.Ceil(float64(burst) / float64(limit))
	if w > maxSFInteger {
		return 0
	}
	return max(1, int64(w))
}

// policyValue formats the RateLimit-Policy Item for quota q.
func (f *quotaFields) policyValue(q int) string {
	b := make([]byte, 0, len(f.name)+32)
	b = append(b, f.name...)
	b = append(b, ";q="...)
	b = strconv.AppendInt(b, sfInteger(int64(q)), 10)
	if f.window > 0 {
		b = append(b, ";w="...)
		b = strconv.AppendInt(b, f.window, 10)
	}
	return string(b)
}

// sfInteger clamps n to the non-negative Integers a structured field may carry.
func sfInteger(n int64) int64 {
	return min(max(n, 0), maxSFInteger)
}

// effectiveWindow returns t of the RateLimit field for d, and false when there is none (the
// quota never refills). For a refused request with a finite wait it is the Retry-After's own
// delay-seconds; otherwise Reset rounded up to whole seconds.
func effectiveWindow(d Decision) (int64, bool) {
	if !d.Allowed && d.RetryAfter > 0 && d.RetryAfter < rate.InfDuration {
		return sfInteger(header.DelaySeconds(d.RetryAfter)), true
	}
	if d.Reset >= rate.InfDuration {
		return 0, false
	}
	if d.Reset <= 0 {
		return 0, true
	}
	return sfInteger(header.DelaySeconds(d.Reset)), true
}

// write sets the configured rate-limit fields of d on h, taking the header values from lines.
// A Decision with no Limit sets none.
func (f *quotaFields) write(h http.Header, d Decision, lines *header.Lines) {
	if f.set == 0 || d.Limit <= 0 {
		return
	}
	t, hasT := effectiveWindow(d)
	r := sfInteger(int64(d.Remaining))
	if f.set&fieldsDraft != 0 {
		if f.policy != "" && d.Limit == f.q {
			h[headerRateLimitPolicy] = lines.Line(f.policy)
		} else {
			h[headerRateLimitPolicy] = lines.Line(f.policyValue(d.Limit))
		}
		var buf [64]byte // on the stack unless the policy name is long
		b := append(buf[:0], f.name...)
		b = append(b, ";r="...)
		b = strconv.AppendInt(b, r, 10)
		if hasT {
			b = append(b, ";t="...)
			b = strconv.AppendInt(b, t, 10)
		}
		h[headerRateLimit] = lines.Bytes(b)
	}
	if f.set&fieldsLegacy != 0 {
		h[headerXLimit] = lines.Int(sfInteger(int64(d.Limit)))
		h[headerXRemaining] = lines.Int(r)
		if hasT {
			h[headerXReset] = lines.Int(t)
		} else {
			delete(h, headerXReset)
		}
	}
}

// exposed returns the names of the fields f writes, for Access-Control-Expose-Headers.
func (f *quotaFields) exposed() []string {
	var names []string
	if f.set&fieldsDraft != 0 {
		names = append(names, "RateLimit", "RateLimit-Policy")
	}
	if f.set&fieldsLegacy != 0 {
		names = append(names, "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset")
	}
	return names
}
