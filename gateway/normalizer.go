package gateway

import (
	"net/http"
	"strconv"
	"time"

	"github.com/retryafter/retryafter/internal/header"
)

// Defaults of [Normalizer].
const (
	// defaultFallback is the Retry-After a 429 or 503 gets in place of an unusable one.
	defaultFallback = 5 * time.Second
	// defaultMax is the longest Retry-After a Normalizer passes on.
	defaultMax = time.Hour
)

// A Normalizer repairs the Retry-After field of responses on their way from an upstream to a
// client through a reverse proxy. Its [Normalizer.ModifyResponse] fits the ModifyResponse field
// of [net/http/httputil.ReverseProxy].
//
// The zero value is ready to use with the defaults given for each field. A Normalizer is safe
// for concurrent use; its fields must not change once it is in use.
type Normalizer struct {
	// Now is the gateway's clock, read once per response it changes: for measuring the
	// upstream's value and as the Date the client gets. If nil, the default is time.Now.
	Now func() time.Time

	// Fallback is the Retry-After sent on a 429 or 503 whose upstream Retry-After is unusable
	// (see ModifyResponse), rounded up to whole seconds and at most Max. If zero or negative,
	// the default is 5 seconds.
	Fallback time.Duration

	// Max is the longest Retry-After passed on, rounded down to whole seconds but at least one
	// second, the shortest a refusal can say; a longer one, which a wrong date or a runaway
	// counter can produce, is clamped to it. If zero or negative, the default is 1 hour.
	Max time.Duration

	// FillMissing gives a 429 or 503 that came without Retry-After, and whose reset fields say
	// nothing usable either, the Fallback and the gateway's Date, so that clients back off for a
	// known time instead of by their own rules. If false, the default, such a response passes
	// untouched.
	FillMissing bool

	// RetryAfterOnly makes the Normalizer read Retry-After alone. If false, the default, a 429
	// or 503 whose Retry-After is missing or unusable gets the wait that the first of the
	// upstream's reset fields to say one meant (see ModifyResponse), and the repair is reported
	// as RepairDerived.
	RetryAfterOnly bool

	// ExactDates reads an upstream's Retry-After date, and a Unix time in whole seconds in a
	// reset field, as the very instant it names. If false, the default, a date is read as the
	// end of the second it names, one second later: most upstreams cut the instant they mean to
	// the second (sethvargo/go-limiter, ulule/limiter, anything formatted with time.Format),
	// and a client sent back at the start of that second arrives early about half the time, to
	// be refused. Set it for upstreams known to round their dates up, as retryafter.Maintenance
	// does, to spare their clients that second.
	ExactDates bool

	// OnRepair, if not nil, is told of every response whose Retry-After was repaired, so that
	// operators can find the upstream at fault. It runs on the proxy's goroutine, after the
	// header has been rewritten and before it is sent, and must be safe for concurrent use.
	// It is not told of a conforming value passed on faithfully (a date turned into
	// delay-seconds).
	OnRepair func(Repair)

	date header.DateCache
}

// limits returns the fallback and the cap in force.
func (n *Normalizer) limits() (fallback, maxWait time.Duration) {
	switch {
	case n.Max <= 0:
		maxWait = defaultMax
	case n.Max < time.Second:
		maxWait = time.Second
	default:
		maxWait = n.Max.Truncate(time.Second)
	}
	fallback = n.Fallback
	if fallback <= 0 {
		fallback = defaultFallback
	}
	if fallback > maxWait { // not min: Yaegi v0.16.1, which runs Traefik's plugins, lacks it
		fallback = maxWait
	}
	return fallback, maxWait
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

	// Leniency says how the value read (Retry-After, or the field named by Field) departed
	// from RFC 9110 or from its field's form, and was read as its sender meant; 0 when it
	// conformed or could not be read at all. It is set for every Kind: a value read leniently
	// may also have been clamped.
	Leniency Leniency

	// Understood is the wait the gateway read from the upstream's field named by Field,
	// measured against the upstream's Date (or the gateway's clock), before rounding to whole
	// seconds and clamping; 0 when it read none (the value was unusable or missing).
	Understood time.Duration

	// Field is the canonical name of the upstream's field that Understood was read from:
	// "Retry-After", or for RepairDerived one of "Retry-After-Ms", "X-Ms-Retry-After-Ms",
	// "Ratelimit", "Ratelimit-Reset", "X-Ratelimit-Reset-Requests", "X-Ratelimit-Reset-Tokens",
	// "Anthropic-Ratelimit-Requests-Reset" (or -Tokens-, -Input-Tokens-, -Output-Tokens-) and
	// "X-Ratelimit-Reset"; "" when none was read.
	Field string

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
	// RepairInvalid is a Retry-After on a 429 or 503 that was unusable (it did not parse, or it
	// meant a wait of 0 or less), replaced by the fallback.
	RepairInvalid RepairKind = iota + 1

	// RepairClamped is a Retry-After above the cap, clamped to it.
	RepairClamped

	// RepairMissing is a 429 or 503 without Retry-After that got the fallback
	// (Normalizer.FillMissing).
	RepairMissing

	// RepairRemoved is a Retry-After on a redirect that was unusable or 0, removed: a
	// redirect without one may be followed at once, which is all such a value could mean.
	RepairRemoved

	// RepairUnderstood is a Retry-After that did not conform, or said 0 on a 429 or 503, but
	// whose meaning was evident (Repair.Leniency says how it departed): the client got the
	// delay-seconds it meant.
	RepairUnderstood

	// RepairDerived is a 429 or 503 whose Retry-After was missing or unusable, and whose wait
	// was read from another field of the upstream's, named by Repair.Field: the client got it
	// as delay-seconds. A derived wait above the cap is reported as RepairClamped.
	RepairDerived
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
	case RepairUnderstood:
		return "understood"
	case RepairDerived:
		return "derived"
	}
	return "RepairKind(" + strconv.Itoa(int(k)) + ")"
}

// ModifyResponse repairs the Retry-After of resp in place; it fits the ModifyResponse field of
// [net/http/httputil.ReverseProxy]. It never reads the body and always returns nil.
//
// It touches a 429 or 503, GitHub's rate-limit 403 (X-RateLimit-Remaining 0), which it repairs
// as a 429 and leaves a 403, and a redirect (301, 302, 303, 307, 308, with a Location or not)
// that carries Retry-After; every other response passes untouched. The clock is read once: that reading
// measures the upstream's value and is sent as Date. The upstream's value, or on a refusal
// without a usable one its reset fields, is read as its sender meant (the package doc lists
// how); a wait above 0 becomes delay-seconds, rounded up and clamped to Max. On a refusal with
// nothing usable, an unusable Retry-After is replaced with the Fallback, and a missing one gets
// it only with FillMissing; on a redirect, an unusable value or 0 is removed. OnRepair is told
// of every value that did not conform. Each response it changes gets the gateway's Date; no
// other header is changed.
func (n *Normalizer) ModifyResponse(resp *http.Response) error {
	redirect, ok := handled(resp)
	if !ok || !n.applies(resp.Header, redirect) {
		return nil
	}
	now := time.Now()
	if n.Now != nil {
		now = n.Now()
	}
	read := n.read(resp.Header, now, redirect)
	wait, kind, ok := n.repair(read, len(resp.Header[header.RetryAfter]) != 0, redirect)
	if !ok {
		return nil // reset fields that say nothing usable either
	}
	sent, sentDate := resp.Header[header.RetryAfter], resp.Header[header.Date]
	secs := n.write(resp, now, wait)
	if kind != 0 && n.OnRepair != nil {
		n.OnRepair(Repair{
			Request:            resp.Request,
			Status:             resp.StatusCode,
			Kind:               kind,
			UpstreamRetryAfter: sent,
			UpstreamDate:       sentDate,
			Leniency:           Leniency(read.Leniency),
			Understood:         read.Wait,
			Field:              read.Field,
			ClientRetryAfter:   time.Duration(secs) * time.Second,
			ClientDate:         now.Truncate(time.Second).UTC(),
		})
	}
	return nil
}

// handled reports whether resp is a response whose Retry-After means something (a refusal or a
// redirect, by its status), and whether it is a redirect.
func handled(resp *http.Response) (redirect, ok bool) {
	switch resp.StatusCode {
	case http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther,
		http.StatusTemporaryRedirect, http.StatusPermanentRedirect:
		return true, true
	}
	return false, header.IsRefusal(resp.StatusCode, resp.Header)
}

// applies reports whether h holds anything to repair: a Retry-After, or on a refusal a reset
// field that may give the wait (unless RetryAfterOnly), or nothing where FillMissing fills it.
func (n *Normalizer) applies(h http.Header, redirect bool) bool {
	switch {
	case len(h[header.RetryAfter]) != 0:
		return true
	case redirect:
		return false
	}
	return n.FillMissing || !n.RetryAfterOnly && hasResetField(h)
}

// read reads the wait that h means at now: Retry-After alone on a redirect or with
// RetryAfterOnly, and otherwise the first of the fields that says one.
func (n *Normalizer) read(h http.Header, now time.Time, redirect bool) header.Reading {
	var mode header.ReadMode
	if !redirect {
		mode |= header.Refusal
	}
	if n.ExactDates {
		mode |= header.ExactDates
	}
	switch {
	case !redirect && !n.RetryAfterOnly:
		return header.ReadWait(h, now, mode)
	case len(h[header.RetryAfter]) != 0:
		return header.ReadRetryAfter(h, now, mode)
	}
	return header.Reading{}
}

// repair returns the wait the client gets for read (0: none) and the kind of repair it is (0:
// none), or false when the response is to pass untouched.
func (n *Normalizer) repair(read header.Reading, sent, redirect bool) (time.Duration, RepairKind, bool) {
	fallback, maxWait := n.limits()
	wait := read.Wait
	switch {
	case (!read.OK || wait <= 0) && redirect:
		return 0, RepairRemoved, true
	case !read.OK && sent:
		return fallback, RepairInvalid, true
	case !read.OK && !n.FillMissing:
		return 0, 0, false
	case !read.OK:
		return fallback, RepairMissing, true
	case wait > maxWait:
		return maxWait, RepairClamped, true
	case read.Field != header.RetryAfter:
		return wait, RepairDerived, true
	case read.Leniency != 0:
		return wait, RepairUnderstood, true
	default:
		return wait, 0, true
	}
}

// write sets resp's Date to now and its Retry-After to wait in delay-seconds, which it returns,
// or removes Retry-After when wait is 0.
func (n *Normalizer) write(resp *http.Response, now time.Time, wait time.Duration) int64 {
	h := resp.Header
	if h == nil {
		h = make(http.Header)
		resp.Header = h
	}
	lines := new(header.Lines)
	h[header.Date] = lines.Line(n.date.Format(now))
	if wait <= 0 {
		delete(h, header.RetryAfter)
		return 0
	}
	secs := header.DelaySeconds(wait)
	h[header.RetryAfter] = lines.Int(secs)
	lines.Done()
	return secs
}

// hasResetField reports whether h has one of the fields that [header.ReadWait] reads besides
// Retry-After.
func hasResetField(h http.Header) bool {
	for _, name := range [...]string{header.RetryAfterMs, header.XMsRetryAfterMs, header.RateLimit, header.RateLimitReset,
		header.OpenAIResetRequests, header.OpenAIResetTokens, header.AnthropicRequestsReset, header.AnthropicTokensReset,
		header.AnthropicInputTokensReset, header.AnthropicOutputTokensReset, header.XRateLimitReset} {
		if len(h[name]) != 0 {
			return true
		}
	}
	return false
}
