package header

import "net/http"

// IsRefusal reports whether a response with this status and header refuses its request for a
// while, so that its wait is read as a refusal's: a 429 or a 503, or a 403 that says it is a
// rate limit as GitHub's API does, with X-RateLimit-Remaining 0 (its primary limit) or with
// Retry-After beside X-RateLimit-Remaining (its secondary limits). Any other 403 is not: it
// stays a refusal of access, whatever its fields.
func IsRefusal(status int, h http.Header) bool {
	switch status {
	case http.StatusTooManyRequests, http.StatusServiceUnavailable:
		return true
	case http.StatusForbidden:
		left, ok := singleFieldValue(h[XRateLimitRemaining])
		return ok && (isZero(left) || len(h[RetryAfter]) != 0)
	}
	return false
}
