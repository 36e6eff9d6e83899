package envoyrls

import (
	"strconv"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"golang.org/x/time/rate"
)

// appendFields appends to h the RateLimit fields and the X-RateLimit headers of the binding
// item, as configured.
func (s *Service) appendFields(h []*corev3.HeaderValue, it *item) []*corev3.HeaderValue {
	d, r := it.d, it.rule
	t, hasT := window(it)
	if s.fields && d.Limit > 0 {
		name := sfString(d.Policy.Name)
		policy := name + ";q=" + strconv.Itoa(d.Limit)
		if w := ceilSeconds(r.Per); w > 0 {
			policy += ";w=" + strconv.FormatInt(w, 10)
		}
		quota := name + ";r=" + strconv.Itoa(max(d.Remaining, 0))
		if hasT {
			quota += ";t=" + strconv.FormatInt(t, 10)
		}
		h = append(h, &corev3.HeaderValue{Key: "RateLimit-Policy", Value: policy},
			&corev3.HeaderValue{Key: "RateLimit", Value: quota})
	}
	if s.legacy {
		h = append(h, header("X-RateLimit-Limit", int64(r.RequestsPerUnit)),
			header("X-RateLimit-Remaining", int64(max(d.Remaining, 0))))
		if hasT {
			h = append(h, header("X-RateLimit-Reset", t))
		}
	}
	return h
}

// window returns the seconds until the binding item's client may make a request again: for a
// refusal its delay-seconds, else the time until it has more quota than now; false when it
// never will.
func window(it *item) (int64, bool) {
	d := it.d
	if !d.Allowed {
		return delaySeconds(d.RetryAfter)
	}
	if d.Reset >= rate.InfDuration {
		return 0, false
	}
	if d.Remaining >= d.Limit || d.Policy.Limit <= 0 {
		return 0, true
	}
	later := time.Duration(float64(d.Limit-d.Remaining-1) / float64(d.Policy.Limit) * float64(time.Second))
	return ceilSeconds(max(d.Reset-later, 0)), true
}

// sfString returns s as a Structured Field String (RFC 9651 §4.1.6), leaving out what is not
// printable ASCII.
func sfString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c > 0x7e {
			continue
		}
		if c == '"' || c == '\\' {
			b.WriteByte('\\')
		}
		b.WriteByte(c)
	}
	b.WriteByte('"')
	return b.String()
}
