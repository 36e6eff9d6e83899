package retryafter

import (
	"net/http"
	"strconv"
	"time"
)

// temporary, replaced by parse.go
func ParseRetryAfter(h http.Header, now time.Time) (time.Duration, bool) {
	v := h.Get("Retry-After")
	n, err := strconv.ParseInt(v, 10, 64)
	if err == nil && n >= 0 {
		return time.Duration(n) * time.Second, true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	ref := now
	if d, err := http.ParseTime(h.Get("Date")); err == nil {
		ref = d
	}
	if t.Before(ref) {
		return 0, false
	}
	return t.Sub(ref), true
}
