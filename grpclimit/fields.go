package grpclimit

import (
	"google.golang.org/grpc/metadata"

	"github.com/retryafter/retryafter"
	"github.com/retryafter/retryafter/edge"
)

// The RateLimit fields of a call are those the HTTP middleware writes for the same Decision, so
// that a gRPC client reads what an HTTP client would: both take their values from the core's
// edge.Fields.

// Metadata keys of the RateLimit fields: the HTTP fields' names, in lower case, as gRPC
// metadata keys are.
const (
	RateLimitKey       = "ratelimit"
	RateLimitPolicyKey = "ratelimit-policy"
)

// fields returns the RateLimit fields of d as metadata, nil when d has no Limit.
func fields(f *edge.Fields, d retryafter.Decision) metadata.MD {
	q, p, ok := f.Values(d)
	if !ok {
		return nil
	}
	return metadata.MD{RateLimitKey: {q}, RateLimitPolicyKey: {p}}
}

// WithRateLimitFields makes the interceptor send the RateLimit and RateLimit-Policy fields of
// draft-ietf-httpapi-ratelimit-headers as the metadata "ratelimit" and "ratelimit-policy" of every
// call the limiter decides, exactly as [retryafter.WithRateLimitFields] sends them over HTTP (its
// doc says how they read and how policy names an item): in the header metadata of an admitted
// call, and in the trailer of a refused one, since a refusal must come without a header for a
// retry policy to read its pushback. The default is to send neither. It panics as
// retryafter.WithRateLimitFields does.
func WithRateLimitFields(policy string) Option {
	if !edge.Printable(policy) {
		panic("grpclimit: WithRateLimitFields: policy name outside printable ASCII")
	}
	f := edge.NewFields(policy)
	return func(c *config) { c.fields = f }
}
