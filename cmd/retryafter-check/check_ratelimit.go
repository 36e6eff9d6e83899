package main

import (
	"fmt"
	"strings"
	"time"
)

// The RateLimit fields of draft-ietf-httpapi-ratelimit-headers (revision 11): two Structured
// Field Lists whose members are Items naming a quota policy with a String.
//
//	RateLimit-Policy: "default";q=5;w=5     q the quota (required), w its window in seconds
//	RateLimit: "default";r=0;t=1            r what is left (required), t seconds until more is
//
// The working group's text after revision 11 (its review branch, §3.1) names RateLimit's r and t
// a (the available quota) and w (the effective window), and adds c and pk; unknown parameters
// are ignored. Both names are read: a for r, w for t.
//
// On a refusal the policy that refused has r=0, and its t tells a client when it may come back,
// as Retry-After does: the two must agree, or a client that reads one of them comes back early
// or waits for nothing. With several policies exhausted at once, the last of them to refill
// decides.

// A quotaItem is one member of a RateLimit or RateLimit-Policy field.
type quotaItem struct {
	name   string
	params map[string]int64 // the Integer parameters checked
	has    map[string]bool
}

// parseQuotaField parses the lines of field as a List of Items, each a String naming a policy,
// with the Integer parameters ints, of which required, or the name alias gives it, must be
// present. It returns a sentence saying what is wrong, or "".
func parseQuotaField(field string, lines []string, ints []string, required string, alias map[string]string) ([]quotaItem, string) {
	members, err := parseSFList(lines)
	q := fmt.Sprintf("%s: %q", field, strings.Join(lines, ", "))
	if err != nil {
		return nil, q + ": " + err.Error()
	}
	items := make([]quotaItem, 0, len(members))
	for i, m := range members {
		if m.isInner {
			return nil, fmt.Sprintf("%s: member %d is an inner list, not an Item", q, i+1)
		}
		if m.bare.kind != sfString {
			return nil, fmt.Sprintf("%s: member %d names its policy with a %s, not a String", q, i+1, kindName(m.bare.kind))
		}
		it := quotaItem{name: m.bare.s, params: map[string]int64{}, has: map[string]bool{}}
		for _, key := range ints {
			v, ok := m.param(key)
			if !ok {
				continue
			}
			if v.kind != sfInteger || v.n < 0 {
				return nil, fmt.Sprintf("%s: %s of %q is not a non-negative Integer", q, key, it.name)
			}
			if key, ok := alias[key]; ok && !it.has[key] {
				it.params[key], it.has[key] = v.n, true
			}
			it.params[key], it.has[key] = v.n, true
		}
		if !it.has[required] {
			return nil, fmt.Sprintf("%s: %q has no %s, which is required", q, it.name, required)
		}
		items = append(items, it)
	}
	return items, ""
}

func kindName(k sfKind) string {
	switch k {
	case sfInteger:
		return "Integer"
	case sfDecimal:
		return "Decimal"
	case sfToken:
		return "Token"
	case sfBytes:
		return "Byte Sequence"
	case sfBoolean:
		return "Boolean"
	case sfDate:
		return "Date"
	case sfDisplay:
		return "Display String"
	}
	return "String"
}

// checkRateLimitFields judges the rate-limit fields of the refusal e, whose Retry-After is t:
// the draft's RateLimit and RateLimit-Policy, those of its revisions up to 06, and the
// X-RateLimit-* of no standard, each kind as [checkQuotaFields] and [resetFamily.judge] say. It
// fails when any kind fails, and passes when any passes.
func checkRateLimitFields(e *exchange, t told) Check {
	var parts []Check
	if c, ok := checkQuotaFields(e, t); ok {
		parts = append(parts, c)
	}
	for _, f := range []resetFamily{draft06Fields, xRateLimitFields} {
		if c, ok := f.judge(e, t); ok {
			parts = append(parts, c)
		}
	}
	if len(parts) == 0 {
		return na(checkRateLimit, "no RateLimit, RateLimit-Policy, RateLimit-Limit, -Remaining, -Reset or X-RateLimit-* field")
	}
	c := Check{Name: checkRateLimit, Result: NA}
	seen := make([]string, len(parts))
	for i, p := range parts {
		seen[i] = p.Seen
		switch {
		case p.Result == Fail:
			c.Result = Fail
		case p.Result == Pass && c.Result == NA:
			c.Result = Pass
		}
	}
	c.Seen = strings.Join(seen, "; ")
	return c
}

// checkQuotaFields judges the RateLimit and RateLimit-Policy fields of the refusal e: they
// parse, RateLimit names only policies RateLimit-Policy lists, some policy is exhausted, and the
// t of the exhausted ones agrees with Retry-After (to the second for a date, whose Date has
// whole seconds). It returns false when e has neither field.
func checkQuotaFields(e *exchange, t told) (Check, bool) {
	rl, pol := e.header["Ratelimit"], e.header["Ratelimit-Policy"]
	if len(rl) == 0 && len(pol) == 0 {
		return Check{}, false
	}
	c := Check{Name: checkRateLimit, Result: Fail}
	policies, why := parseQuotaField("RateLimit-Policy", pol, []string{"q", "w"}, "q", nil)
	if why != "" {
		c.Seen = why
		return c, true
	}
	if len(rl) == 0 {
		c.Result, c.Seen = Pass, fmt.Sprintf("RateLimit-Policy: %s parses; no RateLimit on the refusal to compare with Retry-After", strings.Join(pol, ", "))
		return c, true
	}
	limits, why := parseQuotaField("RateLimit", rl, []string{"r", "t", "a", "w"}, "r", map[string]string{"a": "r", "w": "t"})
	if why != "" {
		c.Seen = why
		return c, true
	}
	seen := "RateLimit: " + strings.Join(rl, ", ")
	if name, ok := unlistedPolicy(limits, policies); ok {
		c.Seen = fmt.Sprintf("%s names %q, which RateLimit-Policy: %s does not list", seen, name, strings.Join(pol, ", "))
		return c, true
	}
	latest, exhausted := latestReset(limits)
	switch {
	case !exhausted:
		c.Seen = seen + ": refused, yet every policy has quota left (r above 0)"
	case !t.usable:
		c.Result, c.Seen = Pass, seen+": parses; no usable Retry-After to compare with"
	case latest < 0:
		c.Result, c.Seen = Pass, seen+": parses; the exhausted policy has no t to compare with Retry-After"
	default:
		c.Result, c.Seen = quotaVerdict(seen, latest, t)
	}
	return c, true
}

// unlistedPolicy returns the first policy of limits that policies does not list, when policies
// lists any; an empty RateLimit-Policy lists nothing to hold RateLimit to.
func unlistedPolicy(limits, policies []quotaItem) (string, bool) {
	if len(policies) == 0 {
		return "", false
	}
	for _, l := range limits {
		if !hasPolicy(policies, l.name) {
			return l.name, true
		}
	}
	return "", false
}

// latestReset returns the largest t of the exhausted policies of limits (r=0), -1 when none of
// them has a t, and whether any policy is exhausted.
func latestReset(limits []quotaItem) (latest int64, exhausted bool) {
	latest = -1
	for _, l := range limits {
		if l.params["r"] != 0 {
			continue
		}
		exhausted = true
		if l.has["t"] {
			latest = max(latest, l.params["t"])
		}
	}
	return latest, exhausted
}

// quotaVerdict judges latest, the t of the exhausted policies, against t's Retry-After.
func quotaVerdict(seen string, latest int64, t told) (Result, string) {
	want, wrong := disagreement(time.Duration(min(latest, maxSeconds))*time.Second, t, false)
	if wrong != "" {
		return Fail, fmt.Sprintf("%s: t=%d but Retry-After says %s: a client reading RateLimit %s", seen, latest, seconds(want), wrong)
	}
	return Pass, fmt.Sprintf("%s: t=%d agrees with Retry-After", seen, latest)
}

// disagreement compares got, a wait read from a rate-limit field, with t's Retry-After, both in
// whole seconds, Retry-After rounded up. It returns Retry-After so rounded and what a client
// that reads the field does wrong: "comes back early", "waits longer than it must", or "" when
// they agree. A second either way agrees when either side was measured against a Date of whole
// seconds: t is a date, or got was read from an instant (instant).
func disagreement(got time.Duration, t told, instant bool) (want time.Duration, wrong string) {
	slack := time.Duration(0)
	if t.date || instant {
		slack = time.Second
	}
	want = addSat(t.wait, time.Second-1).Truncate(time.Second)
	switch {
	case got < want-slack:
		return want, "comes back early"
	case got > want+slack:
		return want, "waits longer than it must"
	}
	return want, ""
}

func hasPolicy(policies []quotaItem, name string) bool {
	for _, p := range policies {
		if p.name == name {
			return true
		}
	}
	return false
}
