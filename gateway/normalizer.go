// Package gateway repairs the Retry-After that upstreams get wrong, for API gateways and reverse
// proxies written in Go:
//
//	proxy := httputil.NewSingleHostReverseProxy(upstream)
//	proxy.ModifyResponse = new(gateway.Normalizer).ModifyResponse
//
// Every client behind it gets Retry-After in delay-seconds, which depends on nobody's clock,
// with a Date from the gateway's own clock. What the upstream sent is read the way it evidently
// meant it, its rate-limit reset fields too when it sent no usable Retry-After, and each value
// that did not conform is reported with what was understood.
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
// RFC 9110 §10.2.3 gives Retry-After a meaning on 503 Service Unavailable and 429 Too Many
// Requests (how long to wait before retrying) and on a redirect (how long to wait before
// issuing the redirected request). ModifyResponse touches those two, the 403 Forbidden that
// GitHub's API sends for a rate limit (with X-RateLimit-Remaining 0, or with Retry-After beside
// X-RateLimit-Remaining), which it repairs as a 429, and the redirects a user agent follows to
// a Location: 301, 302, 303, 307 and 308. Every other response passes untouched, any other 403,
// 300 Multiple Choices and 304 Not Modified included, as does a redirect without Retry-After.
//
// GitHub's 403 stays a 403: its Retry-After serves the clients that retry a 403 and honour
// Retry-After on it (retryclient; urllib3 with 403 in its Retry's status_forcelist), not those
// that retry 429 and 5xx alone, as curl's --retry and urllib3's default Retry do. curl waits
// its own backoff, not Retry-After, on a 403 that --retry-all-errors retries.
//
// The clock is read once, and that one reading is used to measure the upstream's value and is
// sent as Date, so that the client sees one consistent pair. The upstream's value is read the
// way its sender evidently meant it:
//
//   - delay-seconds, also with a leading "+" or a decimal fraction ("1.5" means 2);
//   - an HTTP-date in any of its three formats, also in zone UTC, +0000 or -0000 (Go's
//     time.RFC1123, which sethvargo/go-limiter sends) or with its day name missing or
//     misspelled, measured against the upstream's own Date (read the same way) when there is
//     one, so that the upstream's clock skew cancels, and otherwise against the gateway's
//     clock; a date is read as the end of the second it names unless ExactDates is set;
//   - on a 429 or 503, a 0, or a date equal to Date, means a wait under a second, as an
//     upstream that truncates its waits (go-chi/httprate with a window under a second,
//     go-limiter a moment before its reset) sends it: the client gets 1, the smallest honest
//     delay-seconds.
//
// On a 429 or 503 whose Retry-After is missing or unusable, unless RetryAfterOnly is set, the
// first of the upstream's reset fields that says when gives the wait, read as generously:
// Retry-After-Ms (Azure, OpenAI), then X-Ms-Retry-After-Ms (Azure), in milliseconds; RateLimit
// (the rate-limit drafts from 08), the largest t (or w) of the policies whose r (or a) is 0, or
// the reset of draft 07's form when its remaining is 0; RateLimit-Reset (drafts up to 06,
// tollbooth); OpenAI's X-RateLimit-Reset-Requests and -Tokens, Go durations ("6m0s");
// Anthropic's Anthropic-RateLimit-*-Reset, RFC 3339 instants measured against the upstream's
// Date; then X-RateLimit-Reset (GitHub, ulule/limiter, Tyk). Of an API's several limits, the
// longest reset of those with no quota left gives the wait, or the longest of all when none
// says so. RateLimit-Reset and X-RateLimit-Reset are delay-seconds, or a Unix time when the
// number is more than half the Unix time of the upstream's Date (or of the gateway's clock), in
// milliseconds when more than half that in milliseconds: in 2026 the line is about 900 million
// seconds, a delay of 28 years that no limiter means and an instant of 1998 that no reset
// names. An instant is measured against the upstream's Date like a date, and one in whole
// seconds read as the end of the second it names unless ExactDates is set.
//
// Then:
//
//   - A wait above 0 becomes delay-seconds, rounded up, and is clamped to Max.
//   - On a 429 or 503 with nothing usable, an unusable Retry-After (negative, an exponent,
//     hex, a list, several lines that disagree, a date before Date, garbage) is replaced with
//     the Fallback; a missing one gets the Fallback only with FillMissing.
//   - On a redirect, an unusable value or 0 is removed.
//
// OnRepair is told of every value that did not conform, with what was understood of it.
//
// Each response it changes gets the gateway's Date; no other header is changed.
func (n *Normalizer) ModifyResponse(resp *http.Response) error {
	redirect := false
	switch resp.StatusCode {
	case http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther,
		http.StatusTemporaryRedirect, http.StatusPermanentRedirect:
		redirect = true
	default:
		if !header.IsRefusal(resp.StatusCode, resp.Header) {
			return nil
		}
	}
	h := resp.Header
	sent := h[header.RetryAfter]
	derive := !redirect && !n.RetryAfterOnly
	if len(sent) == 0 && (redirect || !n.FillMissing && !(derive && hasResetField(h))) {
		return nil
	}
	sentDate := h[header.Date]

	now := time.Now()
	if n.Now != nil {
		now = n.Now()
	}
	fallback, maxWait := n.limits()
	var kind RepairKind
	var wait time.Duration
	var read header.Reading
	var mode header.ReadMode
	if !redirect {
		mode |= header.Refusal
	}
	if n.ExactDates {
		mode |= header.ExactDates
	}
	if derive {
		read = header.ReadWait(h, now, mode)
	} else if len(sent) != 0 {
		read = header.ReadRetryAfter(h, now, mode)
	}
	wait = read.Wait
	switch {
	case (!read.OK || wait <= 0) && redirect:
		wait, kind = 0, RepairRemoved
	case !read.OK && len(sent) != 0:
		wait, kind = fallback, RepairInvalid
	case !read.OK && !n.FillMissing:
		return nil // reset fields that say nothing usable either
	case !read.OK:
		wait, kind = fallback, RepairMissing
	case wait > maxWait:
		wait, kind = maxWait, RepairClamped
	case read.Field != header.RetryAfter:
		kind = RepairDerived
	case read.Leniency != 0:
		kind = RepairUnderstood
	}

	if h == nil {
		h = make(http.Header)
		resp.Header = h
	}
	lines := new(header.Lines)
	h[header.Date] = lines.Line(n.date.Format(now))
	var secs int64
	if wait > 0 {
		secs = header.DelaySeconds(wait)
		h[header.RetryAfter] = lines.Int(secs)
		lines.Done()
	} else {
		delete(h, header.RetryAfter)
	}
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
