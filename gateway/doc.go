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
//
// # What a Normalizer reads
//
// RFC 9110 §10.2.3 gives Retry-After a meaning on 503 and 429 (how long to wait before
// retrying) and on a redirect (how long to wait before following it). GitHub's API sends its
// rate limit as a 403 with X-RateLimit-Remaining 0 (or with Retry-After beside
// X-RateLimit-Remaining); that 403 is repaired as a 429 but stays a 403, since its Retry-After
// serves the clients that retry a 403 and honour Retry-After on it (retryclient; urllib3 with 403
// in its status_forcelist), not those that retry 429 and 5xx alone (curl's --retry, urllib3's
// default Retry). Any other 403, 300 and 304 pass untouched, as does a redirect without
// Retry-After. The upstream's Retry-After is read the way its sender evidently meant it:
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
// What cannot be read (negative, an exponent, hex, a list, several lines that disagree, a date
// before Date, garbage) is unusable.
package gateway
