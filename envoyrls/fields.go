package envoyrls

import (
	"strconv"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/retryafter/retryafter/edge"
)

// fields formats the RateLimit fields; each rule's policy name names its item.
var fields = edge.NewFields(edge.DefaultPolicy)

// appendFields appends to h the RateLimit fields and the X-RateLimit headers of the binding
// item, as configured, with the values every edge of retryafter sends.
func (s *Service) appendFields(h []*corev3.HeaderValue, it *item) []*corev3.HeaderValue {
	if s.fields {
		if rl, policy, ok := fields.Values(it.d); ok {
			h = append(h, &corev3.HeaderValue{Key: "RateLimit-Policy", Value: policy},
				&corev3.HeaderValue{Key: "RateLimit", Value: rl})
		}
	}
	if s.legacy {
		limit, remaining, reset, hasReset := edge.Legacy(it.d)
		h = append(h, header("X-RateLimit-Limit", limit), header("X-RateLimit-Remaining", remaining))
		if hasReset {
			h = append(h, header("X-RateLimit-Reset", reset))
		}
	}
	return h
}

// header returns a header of an integer value.
func header(name string, v int64) *corev3.HeaderValue {
	return &corev3.HeaderValue{Key: name, Value: strconv.FormatInt(v, 10)}
}
