package grpclimit

import (
	"context"
	"net/http"
	"net/url"
	"time"

	"google.golang.org/grpc/metadata"

	"github.com/retryafter/retryafter"
)

// The RateLimit fields of a call are those the HTTP middleware writes for the same Decision, so
// that a gRPC client reads what an HTTP client would: they come from the middleware itself, as
// the one writer of the fields, asked through its exported API about a Decision already made.

// Metadata keys of the RateLimit fields: the HTTP fields' names, in lower case, as gRPC
// metadata keys are.
const (
	RateLimitKey       = "ratelimit"
	RateLimitPolicyKey = "ratelimit-policy"
)

// fieldWriter returns the RateLimit fields of a Decision as metadata.
type fieldWriter struct{ m *retryafter.Middleware }

func newFieldWriter(policy string) *fieldWriter {
	discard := func(http.ResponseWriter, *http.Request, retryafter.Refusal) {}
	return &fieldWriter{m: retryafter.NewMiddleware(decided{}, retryafter.WithRateLimitFields(policy), retryafter.WithResponder(discard))}
}

// fields returns the RateLimit fields of d, nil when d has no Limit.
func (f *fieldWriter) fields(d retryafter.Decision) metadata.MD {
	w := headerOnly{}
	r := (&http.Request{Method: http.MethodPost, URL: &url.URL{}, Header: http.Header{}}).
		WithContext(context.WithValue(context.Background(), decisionKey{}, d))
	f.m.Allow(w, r, "")
	q, p := w[http.CanonicalHeaderKey(RateLimitKey)], w[http.CanonicalHeaderKey(RateLimitPolicyKey)]
	if len(q) == 0 || len(p) == 0 {
		return nil
	}
	return metadata.MD{RateLimitKey: q, RateLimitPolicyKey: p}
}

// decisionKey is the context key of the Decision that decided answers with.
type decisionKey struct{}

// decided is a Limiter that answers the Decision its request's context carries.
type decided struct{}

func (decided) Decide(ctx context.Context, _ string, _ int, _ time.Time) (retryafter.Decision, error) {
	d, _ := ctx.Value(decisionKey{}).(retryafter.Decision)
	return d, nil
}

// headerOnly is a ResponseWriter that keeps the header and discards the rest.
type headerOnly http.Header

func (h headerOnly) Header() http.Header       { return http.Header(h) }
func (headerOnly) Write(b []byte) (int, error) { return len(b), nil }
func (headerOnly) WriteHeader(int)             {}

// WithRateLimitFields makes the interceptor send the RateLimit and RateLimit-Policy fields of
// draft-ietf-httpapi-ratelimit-headers as the metadata "ratelimit" and "ratelimit-policy" of every
// call the limiter decides, exactly as [retryafter.WithRateLimitFields] sends them over HTTP (its
// doc says how they read and how policy names an item): in the header metadata of an admitted
// call, and in the trailer of a refused one, since a refusal must come without a header for a
// retry policy to read its pushback. The default is to send neither. It panics as
// retryafter.WithRateLimitFields does.
func WithRateLimitFields(policy string) Option {
	f := newFieldWriter(policy)
	return func(c *config) { c.fields = f }
}
