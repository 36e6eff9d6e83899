package main

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/retryafter/retryafter/internal/header"
)

// checkHEADAfter sends HEAD right after get, a refused GET, and judges whether it was answered
// alike (RFC 9110 §9.3.2: the same header fields as GET would have had): the same status, and
// the same Retry-After, Date and RateLimit fields, with a wait that differs by no more than the
// time between the two and the rounding to whole seconds.
func (q *session) checkHEADAfter(ctx context.Context, get *exchange) Check {
	if q.p.Method != http.MethodGet {
		return na(checkHEAD, "HEAD mirrors GET; the probe sends "+q.p.Method)
	}
	h, err := q.s.send(ctx, http.MethodHead)
	if err != nil {
		q.stopWith(err)
		return q.notChecked(checkHEAD)
	}
	return compareHEAD(get, h)
}

// compareHEAD judges h, a HEAD response, against get, the refused GET right before it.
func compareHEAD(get, h *exchange) Check {
	c := Check{Name: checkHEAD, Result: Fail}
	if h.status != get.status {
		if h.refused() {
			c.Seen = fmt.Sprintf("HEAD: %s, GET: %s", statusText(h.status), statusText(get.status))
		} else {
			c.Seen = fmt.Sprintf("HEAD admitted (%s) right after GET was refused (%s): HEAD is limited apart, or not at all", statusText(h.status), statusText(get.status))
		}
		return c
	}
	var diffs []string
	tg, th := readTold(get), readTold(h)
	switch {
	case tg.present != th.present:
		diffs = append(diffs, presence("Retry-After", th.present, tg.present))
	case tg.strict != th.strict:
		diffs = append(diffs, fmt.Sprintf("Retry-After %q for HEAD, %q for GET", th.value, tg.value))
	case tg.usable && th.usable:
		// HEAD went later, so its wait may be shorter by that much, and either may be rounded.
		elapsed := h.received.Sub(get.sent)
		if th.wait > tg.wait+time.Second || th.wait < tg.wait-elapsed-time.Second {
			diffs = append(diffs, fmt.Sprintf("Retry-After %q for HEAD, %q for GET %s earlier", th.value, tg.value, seconds(roundDuration(elapsed))))
		}
	}
	for _, f := range []string{header.Date, "Ratelimit", "Ratelimit-Policy"} {
		if g, hh := len(get.header[f]) > 0, len(h.header[f]) > 0; g != hh {
			diffs = append(diffs, presence(displayName(f), hh, g))
		}
	}
	if len(diffs) > 0 {
		c.Seen = "HEAD: " + statusText(h.status) + ", but " + strings.Join(diffs, "; ")
		return c
	}
	c.Result = Pass
	c.Seen = "HEAD: " + statusText(h.status)
	if th.present {
		c.Seen += ", Retry-After: " + th.value
	}
	c.Seen += ", like GET"
	return c
}

// presence says that a field is on one of HEAD and GET only.
func presence(field string, onHEAD, onGET bool) string {
	if onHEAD && !onGET {
		return field + " on HEAD, not on GET"
	}
	return field + " on GET, not on HEAD"
}

// displayName spells a canonical header name as the specifications do.
func displayName(f string) string {
	switch f {
	case "Ratelimit":
		return "RateLimit"
	case "Ratelimit-Policy":
		return "RateLimit-Policy"
	}
	return f
}
