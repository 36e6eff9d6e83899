package main

import (
	"context"
	"fmt"
	"time"
)

// The retry checks obey what a refusal told, as a client would: its Retry-After, or where that is
// missing or unusable, the reset field a client reads in its place (readObeyed), which the
// report names:
//
//   - obey: wait exactly the Retry-After and retry: the retry must be admitted. Delay-seconds
//     count from when the response arrived. A date is obeyed at its instant by the probe's own
//     clock, as clients obey it, with Date only to measure skew: were the date less Date
//     counted from the response instead, the retry would come up to a second after the date,
//     and pass a date cut to the second that clients, retrying at it, miss.
//   - tight: retry one second earlier, counted from when the refused request was sent, so that
//     the round trip cannot make the retry late: it must be refused, or the wait was padded.
//     It is aimed tightMargin earlier still, and judged by when it went (see tightVerdict). A
//     date is one second less Date's resolution: the retry goes two seconds before it, and so
//     reaches the server at least one second before it. A wait of one second (a date two
//     seconds after Date) cannot be judged: the early retry goes at once, and is refused
//     whether the wait was padded or not; it still goes, for refusal-free.
//   - refusal-free: after that early retry was refused, wait the rest and retry: it must be
//     admitted, or the refused early retry was charged.
//
// Every wait is timed on the probe's clock; the checks give the server the benefit of the
// round trip, never the client.

// unobeyable says why t cannot be obeyed, or returns "".
func unobeyable(t told) string {
	switch {
	case t.usable:
		return ""
	case !t.present:
		return "no Retry-After, nor a reset field that says when, to obey"
	}
	return fmt.Sprintf("Retry-After %q cannot be read as a wait, nor a reset field", t.value)
}

// earlyBy is how much earlier than told the tight check's retry must go for an admission to
// prove the wait padded.
func earlyBy(t told) time.Duration {
	if t.date {
		return 2 * time.Second
	}
	return time.Second
}

// tightMargin is how much earlier still than earlyBy the early retry is aimed, so that the
// probe's own lateness, up to that much (a loaded machine's timers), still leaves it earlyBy
// early. A limiter that rounds its wait up keeps up to a second less than it tells, and may
// admit a retry that went less than earlyBy early: that is no padding.
const tightMargin = 100 * time.Millisecond

// earlyAt is when the early retry after the refusal r, which told t, is aimed: earlyBy and
// tightMargin before the wait, counted from when r was sent, and never before r was sent.
func earlyAt(r *exchange, t told) time.Time {
	return r.sent.Add(max(t.wait-earlyBy(t)-tightMargin, 0))
}

// tooShortForEarly says why t leaves no room for an early retry.
func tooShortForEarly(t told) string {
	if t.date {
		return fmt.Sprintf("%s %q is %s after %s: no room for an early retry at a date's resolution of a second", t.source(), t.value, seconds(t.wait), t.ref)
	}
	return fmt.Sprintf("%s %q leaves no second to take off", t.source(), t.value)
}

// obeyAt is when a client obeying t, the Retry-After of e, retries: delay-seconds after e
// arrived; a date at its instant by the probe's clock, or by the server's where the Dates of
// the run prove the two apart.
func (q *session) obeyAt(t told, e *exchange) time.Time {
	if !t.date {
		return e.received.Add(t.wait)
	}
	return t.at.Add(-q.s.skew.offset())
}

// obeyed describes how the probe obeyed t, the Retry-After of e, at the instant at.
func (q *session) obeyed(t told, e *exchange, at time.Time) string {
	wait := at.Sub(e.received)
	switch {
	case t.date && wait <= 0 && t.past > 0:
		return fmt.Sprintf("retried at once, the date being %s before %s", seconds(t.past), t.ref)
	case t.date && wait <= 0:
		return fmt.Sprintf("retried at once, the date having passed by %s", q.s.skew)
	case t.wait == 0:
		return fmt.Sprintf("retried at once as told (%q)", t.value)
	case t.date && t.field != "":
		return fmt.Sprintf("waited %s, until the instant of %s: %s by %s", seconds(roundDuration(wait)), t.field, t.value, q.s.skew)
	case t.date:
		return fmt.Sprintf("waited %s, until the date by %s", seconds(roundDuration(wait)), q.s.skew)
	case t.field != "":
		return fmt.Sprintf("waited %s as %s: %s told, there being no usable Retry-After", seconds(t.wait), t.field, t.value)
	}
	return fmt.Sprintf("waited %s as told", seconds(t.wait))
}

// answer describes the response to a retry.
func answer(e *exchange) string {
	switch {
	case e.refused():
		if t := readTold(e); t.present {
			return fmt.Sprintf("refused (%s, Retry-After: %s)", statusText(e.status), t.value)
		}
		return "refused (" + statusText(e.status) + ", no Retry-After)"
	case e.admitted():
		return "admitted (" + statusText(e.status) + ")"
	}
	return "answered " + statusText(e.status) + ", neither admitted nor refused"
}

// obeyVerdict judges the retry o made after obeying t, the Retry-After of the refusal r, as
// how, a description from obeyed, says.
func (q *session) obeyVerdict(t told, how string, r, o *exchange) Check {
	seen := how + ", then retried: " + answer(o)
	switch {
	case o.late() > 0:
		return lateObey(t, r, o)
	case o.refused():
		c := Check{Name: checkObey, Result: Fail, Seen: seen + ": obeying is not enough"}
		if t.date && q.s.skew.n > 0 && q.s.skew.agrees() {
			c.Seen += " (the date is early: cut to the second rather than rounded up, or the server's clock is behind the probe's by less than Date can show)"
		}
		return c
	case !o.admitted():
		return na(checkObey, seen+": obeying cannot be judged")
	}
	return Check{Name: checkObey, Result: Pass, Seen: seen}
}

// lateObey judges o, a retry obeying t, the Retry-After of r, that went late. It fails when
// r itself held it back (its body still being read when the retry was due: a client obeying
// r is held back alike); a retry the probe sent late of itself, or after a request of its own,
// is n/a.
func lateObey(t told, r, o *exchange) Check {
	seen := fmt.Sprintf("told %s %q, the retry went %s after the refusal: it %s; then: %s: a retry more than %s late shows nothing of obeying",
		t.source(), t.value, seconds(roundDuration(o.sent.Sub(r.received))), o.lateness(), answer(o), seconds(lateSlack))
	if o.prevN == r.n && r.read.Sub(o.due) > lateSlack {
		return Check{Name: checkObey, Result: Fail, Seen: seen}
	}
	return na(checkObey, seen+", and the refusal did not hold it back")
}

// obey waits until a client obeying t, the Retry-After of e, retries, sends that retry, and
// judges it: a retry that went late is judged by when it went (see obeyVerdict).
func (q *session) obey(ctx context.Context, t told, e *exchange) (*exchange, Check, error) {
	at := q.obeyAt(t, e)
	how := q.obeyed(t, e, at) // before the retry's own Date moves the skew
	o, err := q.s.sendAt(ctx, at, q.p.Method)
	if err != nil {
		return nil, Check{}, err
	}
	return o, q.obeyVerdict(t, how, e, o), nil
}

// tightVerdict judges the early retry e made against t, the wait the refusal r told, by when e
// actually went. A retry that went at once, since t left nothing to take off but earlyBy, judges
// nothing: a limiter refuses a retry at once whether its wait is padded or not. An admission
// proves padding only when the retry still went earlyBy early.
func tightVerdict(t told, r, e *exchange) Check {
	if t.wait <= earlyBy(t)+tightMargin {
		what := fmt.Sprintf("%q", t.value)
		if t.date {
			what = fmt.Sprintf("%q, %s after %s", t.value, seconds(t.wait), t.ref)
		}
		return na(checkTight, "cannot judge "+what+": a second early is at once, which a limiter refuses whether the wait is padded or not (retried at once: "+answer(e)+")")
	}
	early := t.wait - e.sent.Sub(r.sent)
	what := "retried " + seconds(roundDuration(early)) + " early"
	if t.date {
		what = "retried at least " + seconds(roundDuration(early-time.Second)) + " before the date"
	}
	switch {
	case e.late() > 0:
		return na(checkTight, "the early retry "+e.lateness()+", which tells nothing of a second early: "+answer(e))
	case !e.refused() && !e.admitted():
		return na(checkTight, what+": "+answer(e)+", which tells nothing of padding")
	case e.refused():
		return Check{Name: checkTight, Result: Pass, Seen: what + ": " + answer(e)}
	case early < earlyBy(t):
		return na(checkTight, fmt.Sprintf("%s, having gone %s after its instant: %s, which a limiter that rounds its wait up may do without padding it", what, seconds(roundDuration(e.sent.Sub(e.due))), answer(e)))
	}
	return Check{Name: checkTight, Result: Fail, Seen: what + ": " + answer(e) + ": the wait is padded by a second or more"}
}

// retriesAfter429 runs the retry checks on a 429. Obeying comes first, on the first refusal,
// and on its own, so that it is judged apart from whatever an early retry costs; the early
// retry goes to the next refusal.
func (q *session) retriesAfter429(ctx context.Context, r1 *exchange) (obey, tight, free Check) {
	t1 := readObeyed(r1)
	if why := unobeyable(t1); why != "" {
		return na(checkObey, why), na(checkTight, why), na(checkFree, why)
	}
	o1, obey, err := q.obey(ctx, t1, r1)
	if err != nil {
		q.stopWith(err)
		return q.notChecked(checkObey), q.notChecked(checkTight), q.notChecked(checkFree)
	}
	r2 := o1 // a refused retry is itself the next refusal
	if !o1.refused() {
		if r2, err = q.s.provoke(ctx); err != nil {
			q.stopWith(err)
			return obey, q.notChecked(checkTight), q.notChecked(checkFree)
		}
	}
	tight, free = q.earlyRetry(ctx, r2, &obey)
	return obey, tight, free
}

// earlyRetry runs tight and refusal-free on r2, a refusal: it retries a second early, and
// after that early retry is refused, waits the rest. obey is the verdict of obeying alone,
// which it may revise (see blameEarly).
func (q *session) earlyRetry(ctx context.Context, r2 *exchange, obey *Check) (tight, free Check) {
	t2 := readObeyed(r2)
	if why := unobeyable(t2); why != "" {
		why = fmt.Sprintf("the next refusal (request %d): %s", r2.n, why)
		return na(checkTight, why), na(checkFree, why)
	}
	early := earlyBy(t2)
	if t2.wait < early {
		why := tooShortForEarly(t2)
		return na(checkTight, why), na(checkFree, why)
	}
	e, err := q.s.sendAt(ctx, earlyAt(r2, t2), q.p.Method)
	if err != nil {
		q.stopWith(err)
		return q.notChecked(checkTight), q.notChecked(checkFree)
	}
	tight = tightVerdict(t2, r2, e)
	switch {
	case e.late() > 0:
		return tight, na(checkFree, "the early retry "+e.lateness())
	case e.admitted():
		return tight, na(checkFree, "the early retry was admitted")
	case !e.refused():
		return tight, na(checkFree, "the early retry "+answer(e))
	}
	return tight, q.restAfterEarly(ctx, r2, t2, obey)
}

// restAfterEarly judges refusal-free: after the early retry was refused, it waits the rest of
// t2, the wait r2 told, and retries.
func (q *session) restAfterEarly(ctx context.Context, r2 *exchange, t2 told, obey *Check) Check {
	o2, err := q.s.sendAt(ctx, q.obeyAt(t2, r2), q.p.Method)
	if err != nil {
		q.stopWith(err)
		return q.notChecked(checkFree)
	}
	rest := fmt.Sprintf("after the refused early retry, waited the rest (%s in all), then retried: %s", seconds(roundDuration(o2.sent.Sub(r2.received))), answer(o2))
	switch {
	case o2.late() > 0:
		return na(checkFree, "after the refused early retry, the retry that waited the rest "+o2.lateness()+": "+answer(o2))
	case o2.admitted():
		return Check{Name: checkFree, Result: Pass, Seen: rest}
	case !o2.refused():
		return na(checkFree, rest)
	case obey.Result != Pass:
		return na(checkFree, rest+"; obeying alone is refused too, so what the early retry cost cannot be told apart")
	}
	return q.blameEarly(ctx, o2, rest, obey)
}

// blameEarly decides refusal-free when obeying alone was admitted and obeying after an early
// retry was not: it obeys o2, that refusal, alone too, so that the blame falls on the early
// retry only if obeying still works. rest describes o2; obey is revised if obeying now fails.
func (q *session) blameEarly(ctx context.Context, o2 *exchange, rest string, obey *Check) Check {
	t3 := readObeyed(o2)
	if why := unobeyable(t3); why != "" {
		return Check{Name: checkFree, Result: Fail, Seen: rest + ", and " + why}
	}
	o3, again, err := q.obey(ctx, t3, o2)
	if err != nil {
		q.stopWith(err)
		return q.notChecked(checkFree)
	}
	switch {
	case again.Result == Fail:
		again.Seen = fmt.Sprintf("on request %d: %s", o3.n, again.Seen)
		*obey = again
		return na(checkFree, rest+"; obeying alone fails too, so what the early retry cost cannot be told apart")
	case again.Result != Pass:
		return na(checkFree, rest+"; obeying alone then: "+answer(o3))
	}
	return Check{Name: checkFree, Result: Fail, Seen: rest + ", while obeying alone is admitted: the refused early retry was charged"}
}

// retriesAfter503 runs the retry checks on a 503. A maintenance window is over once a retry is
// admitted, so the early retry and the obeying one both go to the first refusal.
func (q *session) retriesAfter503(ctx context.Context, r1 *exchange) (obey, tight, free Check) {
	t1 := readObeyed(r1)
	if why := unobeyable(t1); why != "" {
		return na(checkObey, why), na(checkTight, why), na(checkFree, why)
	}
	var e *exchange
	if early := earlyBy(t1); t1.wait >= early {
		var err error
		if e, err = q.s.sendAt(ctx, earlyAt(r1, t1), q.p.Method); err != nil {
			q.stopWith(err)
			return q.notChecked(checkObey), q.notChecked(checkTight), q.notChecked(checkFree)
		}
		tight = tightVerdict(t1, r1, e)
	} else {
		tight = na(checkTight, tooShortForEarly(t1))
	}
	o, obey, err := q.obey(ctx, t1, r1)
	if err != nil {
		q.stopWith(err)
		return q.notChecked(checkObey), tight, q.notChecked(checkFree)
	}
	return obey, tight, freeAfter503(r1, e, o, tight, obey)
}

// freeAfter503 judges refusal-free on a maintenance window: e is the early retry (nil when none
// went), o the obeying one after it, judged as tight and obey.
func freeAfter503(r1, e, o *exchange, tight, obey Check) Check {
	switch {
	case e == nil:
		return na(checkFree, tight.Seen)
	case e.late() > 0 || !e.refused() && !e.admitted():
		return na(checkFree, "the early retry tells nothing: "+tight.Seen)
	case !e.refused():
		return na(checkFree, "the early retry was admitted")
	case o.refused():
		return na(checkFree, "obeying after the early retry was refused, and a maintenance window cannot be obeyed twice: what the early retry cost cannot be told apart")
	case obey.Result != Pass:
		return na(checkFree, "obeying after the early retry tells nothing: "+obey.Seen)
	}
	return Check{Name: checkFree, Result: Pass, Seen: fmt.Sprintf("after the refused early retry, waited the rest (%s in all), then retried: %s", seconds(roundDuration(o.sent.Sub(r1.received))), answer(o))}
}

// na is a check that does not apply, for the reason why.
func na(name, why string) Check { return Check{Name: name, Result: NA, Seen: why} }
