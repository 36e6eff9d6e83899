package retryafter

import (
	"net/http"

	"github.com/retryafter/retryafter/edge"
	"github.com/retryafter/retryafter/internal/header"
)

// The fields' values are the core's (edge.Fields, which says how they read and why they are
// honest); this file writes them on a response.

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

// defaultPolicy is the policy name when WithRateLimitFields is given "".
const defaultPolicy = edge.DefaultPolicy

// quotaFields writes the rate-limit fields. The zero value writes none; it is safe for
// concurrent use.
type quotaFields struct {
	set fieldSet
	*edge.Fields
}

// write sets the configured rate-limit fields of d on h, taking the header values from lines.
// A Decision with no Limit sets none, and a layer with no Limit has no item.
func (f *quotaFields) write(h http.Header, d Decision, lines *header.Lines) {
	if f.set == 0 || d.Limit <= 0 {
		return
	}
	if f.set&fieldsDraft != 0 {
		h[headerRateLimitPolicy] = lines.Line(f.PolicyValue(d))
		var buf [96]byte // on the stack for one or two layers with short names
		h[headerRateLimit] = lines.Bytes(f.AppendRateLimit(buf[:0], d))
	}
	if f.set&fieldsLegacy != 0 {
		limit, remaining, reset, ok := edge.Legacy(d)
		h[headerXLimit] = lines.Int(limit)
		h[headerXRemaining] = lines.Int(remaining)
		if ok {
			h[headerXReset] = lines.Int(reset)
		} else {
			delete(h, headerXReset)
		}
	}
	lines.Done()
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
