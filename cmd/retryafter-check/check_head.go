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

// compareHEAD judges h, a HEAD response, against get, the refused GET right before it. HEAD is
// like GET only when both are refusals of one status whose waits agree; a HEAD the server does
// not serve (405, 501), or answered with a 3xx or a 5xx that is no refusal, says nothing; nor
// does one held back by the body of GET's refusal.
func compareHEAD(get, h *exchange) Check {
	switch late := tooLateForHEAD(get, h); {
	case late != "":
		return na(checkHEAD, late+": too late to compare (HEAD "+answer(h)+")")
	case h.status == http.StatusMethodNotAllowed || h.status == http.StatusNotImplemented:
		return na(checkHEAD, fmt.Sprintf("HEAD answered %s: the server does not serve HEAD here, which says nothing of its limiter", statusText(h.status)))
	case h.admitted() && h.status == get.status:
		return headFail(fmt.Sprintf("HEAD answered %s, which is no refusal, right after GET was refused (%s): HEAD is limited apart, or not at all", statusText(h.status), statusText(get.status)))
	case h.admitted():
		return headFail(fmt.Sprintf("HEAD admitted (%s) right after GET was refused (%s): HEAD is limited apart, or not at all", statusText(h.status), statusText(get.status)))
	case !h.refused():
		return na(checkHEAD, "HEAD "+answer(h)+", right after GET was refused ("+statusText(get.status)+")")
	case h.status != get.status:
		return headFail(fmt.Sprintf("HEAD: %s, GET: %s", statusText(h.status), statusText(get.status)))
	}
	tg, th := readObeyed(get), readObeyed(h)
	if !tg.usable && !th.usable {
		return na(checkHEAD, "HEAD: "+statusText(h.status)+", but neither GET nor HEAD tells a wait: whether they agree cannot be told")
	}
	if diffs := headDiffs(get, h, tg, th); len(diffs) > 0 {
		return headFail("HEAD: " + statusText(h.status) + ", but " + strings.Join(diffs, "; "))
	}
	seen := "HEAD: " + statusText(h.status)
	if th.present {
		seen += ", Retry-After: " + th.value
	} else {
		seen += ", " + th.source() + ": " + th.value
	}
	return Check{Name: checkHEAD, Result: Pass, Seen: seen + ", like GET"}
}

// tooLateForHEAD says why h, a HEAD sent after get, a refused GET, went too late to be
// compared with it, or returns "": the body of get's refusal held it back, or, h not refused,
// get's wait had run out when h went (a refusal whose header the server held back, as a tarpit
// does).
func tooLateForHEAD(get, h *exchange) string {
	if body := get.read.Sub(get.received); body > lateSlack {
		return fmt.Sprintf("the body of GET's refusal took %s to read, and HEAD went after it", seconds(roundDuration(body)))
	}
	t := readObeyed(get)
	if after := h.sent.Sub(get.sent); !h.refused() && t.usable && !t.date && after >= t.wait {
		return fmt.Sprintf("HEAD went %s after GET, whose refusal took %s to arrive, when the wait it told, %s, had run out", seconds(roundDuration(after)), seconds(roundDuration(get.received.Sub(get.sent))), seconds(roundDuration(t.wait)))
	}
	return ""
}

func headFail(seen string) Check { return Check{Name: checkHEAD, Result: Fail, Seen: seen} }

// headDiffs lists how h, a refused HEAD, differs from get, the refused GET before it, whose
// waits are tg and th: the Retry-After on one only or in another form, a wait on one only or
// that disagrees by more than the time between the two and the rounding to whole seconds, and
// Date and RateLimit fields on one only.
func headDiffs(get, h *exchange, tg, th told) []string {
	var diffs []string
	switch {
	case tg.present != th.present:
		diffs = append(diffs, presence("Retry-After", th.present, tg.present))
	case tg.strict != th.strict:
		diffs = append(diffs, fmt.Sprintf("Retry-After %q for HEAD, %q for GET", th.value, tg.value))
	case th.usable && !tg.usable:
		diffs = append(diffs, fmt.Sprintf("%s %q for HEAD reads as a wait, %q for GET does not", th.source(), th.value, tg.value))
	case tg.usable && !th.usable:
		diffs = append(diffs, fmt.Sprintf("%s %q for HEAD reads as no wait, %q for GET does", tg.source(), th.value, tg.value))
	default:
		// HEAD went later, so its wait may be shorter by that much, and either may be rounded.
		elapsed := h.received.Sub(get.sent)
		if th.wait > addSat(tg.wait, time.Second) || th.wait < tg.wait-elapsed-time.Second {
			diffs = append(diffs, fmt.Sprintf("%s %q for HEAD, %q for GET %s earlier", th.source(), th.value, tg.value, seconds(roundDuration(elapsed))))
		}
	}
	for _, f := range []string{header.Date, "Ratelimit", "Ratelimit-Policy"} {
		if g, hh := len(get.header[f]) > 0, len(h.header[f]) > 0; g != hh {
			diffs = append(diffs, presence(displayName(f), hh, g))
		}
	}
	return diffs
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
