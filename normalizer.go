package retryafter

import (
	"net/http"
	"strconv"
	"time"
)

// Defaults of [NewNormalizer].
const (
	// defaultFallback is the Retry-After a 429 or 503 gets in place of an unusable one.
	defaultFallback = 5 * time.Second
	// defaultMaxRetryAfter is the longest Retry-After a Normalizer passes on.
	defaultMaxRetryAfter = time.Hour
)

// A Normalizer repairs the Retry-After field of responses on their way from an upstream to a
// client through a reverse proxy, so that every client gets the delay-seconds form, which
// depends on nobody's clock, and a Date from the gateway's own clock. Its
// [Normalizer.ModifyResponse] fits the ModifyResponse field of [net/http/httputil.ReverseProxy]:
//
//	proxy := httputil.NewSingleHostReverseProxy(upstream)
//	proxy.ModifyResponse = retryafter.NewNormalizer().ModifyResponse
//
// A Normalizer is safe for concurrent use. Make one with [NewNormalizer]; the zero value is
// not ready to use.
type Normalizer struct {
	now      func() time.Time
	fallback time.Duration // at most maxWait
	maxWait  time.Duration // whole seconds, at least one
	missing  bool          // a 429 or 503 without Retry-After gets the fallback
	onRepair func(Repair)
	emit     emitter
}

// NewNormalizer returns a [Normalizer]. It reads [WithClock], [WithFallback],
// [WithMaxRetryAfter], [WithMissingFallback] and [WithRepairHook]. A fallback longer than the
// cap is clamped to the cap like any other value.
func NewNormalizer(opts ...Option) *Normalizer {
	c := newConfig(opts)
	n := &Normalizer{
		now:      c.now,
		fallback: defaultFallback,
		maxWait:  defaultMaxRetryAfter,
		missing:  c.missingFallback,
		onRepair: c.onRepair,
	}
	if c.fallback > 0 {
		n.fallback = c.fallback
	}
	if c.maxRetryAfter > 0 {
		n.maxWait = c.maxRetryAfter.Truncate(time.Second)
	}
	n.fallback = min(n.fallback, n.maxWait)
	return n
}

// WithFallback sets the Retry-After that a [Normalizer] sends on a 429 or 503 whose upstream
// Retry-After is unusable: one that does not parse, several lines that disagree, 0, or a date
// not after the upstream's Date. It is rounded up to whole seconds. The default is 5 seconds.
// WithFallback panics if d is not positive, since a Retry-After of 0 sends clients straight
// back. It affects [NewNormalizer].
func WithFallback(d time.Duration) Option {
	if d <= 0 {
		panic("retryafter: WithFallback duration must be positive")
	}
	return func(c *config) { c.fallback = d }
}

// WithMaxRetryAfter sets the longest Retry-After a [Normalizer] passes on, rounded down to whole
// seconds; a longer one, which a wrong date or a runaway counter can produce, is clamped to it.
// The default is 1 hour. WithMaxRetryAfter panics if d is below one second. It affects
// [NewNormalizer].
func WithMaxRetryAfter(d time.Duration) Option {
	if d < time.Second {
		panic("retryafter: WithMaxRetryAfter duration must be at least one second")
	}
	return func(c *config) { c.maxRetryAfter = d }
}

// WithMissingFallback makes a [Normalizer] add the fallback Retry-After (see [WithFallback]) and
// its Date to a 429 or 503 that came without Retry-After, so that clients back off for a known
// time instead of by their own rules. The default is off: such a response passes untouched. It
// affects [NewNormalizer].
func WithMissingFallback(on bool) Option {
	return func(c *config) { c.missingFallback = on }
}

// WithRepairHook sets a function that a [Normalizer] tells of every response whose Retry-After
// it had to repair, so that operators can find the upstream at fault. It runs on the proxy's
// goroutine, after the response's header has been rewritten and before it is sent, and must be
// safe for concurrent use. It is not told of a valid value passed on faithfully (a date turned
// into delay-seconds, say). The default is none. It affects [NewNormalizer].
func WithRepairHook(fn func(Repair)) Option {
	return func(c *config) { c.onRepair = fn }
}

// A Repair describes one response whose Retry-After a [Normalizer] repaired.
type Repair struct {
	// Request is the request the proxy sent upstream (the response's Request field), whose
	// URL names the upstream at fault. It may be nil.
	Request *http.Request

	// Status is the upstream's status code, which the client gets unchanged.
	Status int

	// Kind says what was repaired.
	Kind RepairKind

	// UpstreamRetryAfter and UpstreamDate are the field lines the upstream sent, nil when it
	// sent none. They must not be modified.
	UpstreamRetryAfter []string
	UpstreamDate       []string

	// ClientRetryAfter is the Retry-After the client got, in whole seconds, or 0 when it
	// got none.
	ClientRetryAfter time.Duration

	// ClientDate is the Date the client got: the gateway's clock reading, truncated to the
	// second, in UTC.
	ClientDate time.Time
}

// A RepairKind says what was wrong with an upstream's Retry-After.
type RepairKind uint8

const (
	// RepairInvalid is a Retry-After on a 429 or 503 that was unusable ([ParseRetryAfter] did
	// not read it, or it meant a wait of 0 or less), replaced by the fallback.
	RepairInvalid RepairKind = iota + 1

	// RepairClamped is a Retry-After above the cap, clamped to it.
	RepairClamped

	// RepairMissing is a 429 or 503 without Retry-After that got the fallback
	// ([WithMissingFallback]).
	RepairMissing

	// RepairRemoved is a Retry-After on a redirect that was unusable or 0, removed: a
	// redirect without one may be followed at once, which is all such a value could mean.
	RepairRemoved
)

// String returns the kind's name in lower case, as "invalid" or "clamped".
func (k RepairKind) String() string {
	switch k {
	case RepairInvalid:
		return "invalid"
	case RepairClamped:
		return "clamped"
	case RepairMissing:
		return "missing"
	case RepairRemoved:
		return "removed"
	}
	return "RepairKind(" + strconv.Itoa(int(k)) + ")"
}

// ModifyResponse repairs the Retry-After of resp in place; it fits the ModifyResponse field of
// [net/http/httputil.ReverseProxy]. It never reads the body and always returns nil.
//
// RFC 9110 §10.2.3 gives Retry-After a meaning on 503 Service Unavailable and 429 Too Many
// Requests (how long to wait before retrying) and on a redirect (how long to wait before
// issuing the redirected request). ModifyResponse touches those two and the redirects a user
// agent follows to a Location: 301, 302, 303, 307 and 308. Every other response passes
// untouched, 300 Multiple Choices and 304 Not Modified included, as does a redirect without
// Retry-After.
//
// The clock is read once, and that one reading is used to measure the upstream's value and is
// sent as Date, so that the client sees one consistent pair. The upstream's value is read with
// [ParseRetryAfter]: an HTTP-date in any of its three formats is measured against the
// upstream's own Date when that is valid, so the upstream's clock skew cancels, and otherwise
// against the gateway's clock. Then:
//
//   - A wait above 0 becomes delay-seconds, rounded up, and is clamped to the cap
//     ([WithMaxRetryAfter]).
//   - On a 429 or 503, an unusable value (one that does not parse, several lines that
//     disagree, 0, a date not after Date) is replaced with the fallback ([WithFallback]); a
//     missing one gets the fallback only with [WithMissingFallback].
//   - On a redirect, an unusable value or 0 is removed.
//
// Each response it changes gets the gateway's Date; no other header is changed.
func (n *Normalizer) ModifyResponse(resp *http.Response) error {
	redirect := false
	switch resp.StatusCode {
	case http.StatusTooManyRequests, http.StatusServiceUnavailable:
	case http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther,
		http.StatusTemporaryRedirect, http.StatusPermanentRedirect:
		redirect = true
	default:
		return nil
	}
	h := resp.Header
	sent := h[headerRetryAfter]
	if len(sent) == 0 && (redirect || !n.missing) {
		return nil
	}
	if h == nil {
		h = make(http.Header)
		resp.Header = h
	}
	sentDate := h[headerDate]

	now := n.now()
	var kind RepairKind
	var wait time.Duration
	switch {
	case len(sent) == 0:
		wait, kind = n.fallback, RepairMissing
	default:
		var ok bool
		wait, ok = ParseRetryAfter(h, now)
		switch {
		case (!ok || wait <= 0) && redirect:
			wait, kind = 0, RepairRemoved
		case !ok || wait <= 0:
			wait, kind = n.fallback, RepairInvalid
		case wait > n.maxWait:
			wait, kind = n.maxWait, RepairClamped
		}
	}

	lines := new(fieldLines)
	n.emit.setDate(h, now, lines)
	var secs int64
	if wait > 0 {
		secs = n.emit.setDelay(h, wait, lines)
	} else {
		delete(h, headerRetryAfter)
	}
	if kind != 0 && n.onRepair != nil {
		n.onRepair(Repair{
			Request:            resp.Request,
			Status:             resp.StatusCode,
			Kind:               kind,
			UpstreamRetryAfter: sent,
			UpstreamDate:       sentDate,
			ClientRetryAfter:   time.Duration(secs) * time.Second,
			ClientDate:         now.Truncate(time.Second).UTC(),
		})
	}
	return nil
}
