package main

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// The later round finds a wait padded to the whole window. Where the quota runs out at the start
// of a window, as it does for the first refusals of a run at the probe's pace, the whole window
// is the wait, and a limiter that always tells the whole window passes tight. So, after tight
// passed, the probe waits half the first wait told past the last admission (which began a
// window, or refilled a bucket), spends the quota again, and retries a second before the wait
// then told: a limiter that keeps less than it told admits that retry.
//
// It costs the quota again plus two requests, and about one and a half times the first wait
// told. The probe skips it with -skip-later, and for a wait told under 3 s (6 s for a date: half
// of it leaves no room for the early retry); when it would pass -timeout or -budget, the probe
// gives up rather than pass a wait it did not check, and when it cannot judge (a 5xx, a retry
// sent late, no admission to start from), tight is n/a.

// laterMin is the least first wait t for which the later round runs: three times earlyBy (3 s,
// or 6 s for a date), so that half of it leaves the early retry room to go earlyBy early.
func laterMin(t told) time.Duration { return 3 * earlyBy(t) }

// laterRound runs the later round after r1, the first refusal, and tight, the verdict of the
// first early retry, and returns tight with what the round found.
func (q *session) laterRound(ctx context.Context, r1 *exchange, tight Check) Check {
	if q.stop != nil || tight.Result != Pass {
		return tight
	}
	t1 := readObeyed(r1)
	if why := q.noLaterRound(t1); why != "" {
		tight.Seen += "; no later round: " + why
		return tight
	}
	if q.s.prev == nil || !q.s.prev.admitted() {
		// The first round's pass says nothing of a wait padded to the whole window.
		tight.Result, tight.Seen = NA, tight.Seen+"; no later round: the last retry was not admitted, so no window is known to have begun"
		return tight
	}
	if err := q.laterBudget(t1, r1.n-1); err != nil {
		q.stopWith(err)
		tight.Result, tight.Seen = NA, tight.Seen+"; the later round not checked: "+err.Error()
		return tight
	}
	sent, start := q.s.sent, q.s.now()
	later := q.spendLater(ctx, t1, r1.n)
	later.Seen += fmt.Sprintf(" (the later round: %d %s in %s)", q.s.sent-sent, plural(q.s.sent-sent, "request"), seconds(roundDuration(q.s.now().Sub(start))))
	tight.Seen += "; " + later.Seen
	// A later round that cannot judge leaves tight n/a: the first round's pass says nothing
	// of a wait padded to the whole window.
	tight.Result = later.Result
	return tight
}

// noLaterRound says why the later round does not apply after a first wait told t, or returns
// "".
func (q *session) noLaterRound(t told) string {
	switch {
	case q.p.SkipLater:
		return "skipped (-skip-later)"
	case t.wait < laterMin(t):
		return fmt.Sprintf("the first wait told, %s, is under %s", seconds(roundDuration(t.wait)), seconds(laterMin(t)))
	}
	return ""
}

// A laterBudgetError is a later round that the budgets left cannot hold.
type laterBudgetError struct{ need string }

func (e *laterBudgetError) Error() string {
	return "the later round " + e.need + " (-skip-later skips it)"
}

// laterBudget returns an error when the later round after a first wait told t, the quota spent
// before it being quota requests, would pass -timeout or -budget: it takes about one and a half
// times t, and the quota and two requests. Unchecked, a padded wait would pass.
func (q *session) laterBudget(t told, quota int) error {
	if need, left := addSat(t.wait/2, addSat(t.wait, time.Second)), q.s.deadline().Sub(q.s.now()); need > left {
		return &laterBudgetError{fmt.Sprintf("would take about %s, and %s is left of -timeout %s", seconds(roundDuration(need)), seconds(roundDuration(max(left, 0))), q.s.timeout)}
	}
	if need, left := quota+2, q.s.budget-q.s.sent; need > left {
		return &laterBudgetError{fmt.Sprintf("needs about %d requests, and %d are left of -budget %d", need, left, q.s.budget)}
	}
	return nil
}

// spendLater waits half of t1, the first wait told, past the last admission, spends the quota,
// and retries a second before the wait the refusal then tells. The quota was spent by n
// requests, the first refusal's number: a later round that meets no refusal within them judges
// nothing.
func (q *session) spendLater(ctx context.Context, t1 told, n int) Check {
	d := t1.wait / 2
	what := fmt.Sprintf("later round, the quota spent again %s after an admission", seconds(roundDuration(d)))
	if err := q.s.wait(ctx, q.s.prev.sent.Add(d).Sub(q.s.now())); err != nil {
		q.stopWith(err)
		return na(checkTight, what+": not checked: "+err.Error())
	}
	r, err := q.s.provokeWithin(ctx, n)
	if errors.Is(err, errNoRefusal) {
		return na(checkTight, fmt.Sprintf("%s: none of %d %s refused, as many as spent the quota before", what, n, plural(n, "request")))
	}
	if err != nil {
		q.stopWith(err)
		return na(checkTight, what+": not checked: "+err.Error())
	}
	what += fmt.Sprintf(" (request %d refused)", r.n)
	c := q.earlyLater(ctx, t1, r)
	c.Seen = what + ": " + c.Seen
	return c
}

// earlyLater retries a second before the wait that r, the later round's refusal, told. A wait
// too short for that, but shorter than t1, the first, by earlyBy or more, passes: it fell as the
// window went on, and is not the whole window.
func (q *session) earlyLater(ctx context.Context, t1 told, r *exchange) Check {
	t := readObeyed(r)
	if why := unobeyable(t); why != "" {
		return na(checkTight, why)
	}
	if t.wait <= earlyBy(t)+tightMargin && t.wait+earlyBy(t) <= t1.wait {
		return Check{Name: checkTight, Result: Pass, Seen: fmt.Sprintf("told %s %q, %s less than first: the wait falls as the window goes on, and is not the whole window", t.source(), t.value, seconds(roundDuration(t1.wait-t.wait)))}
	}
	if t.wait < earlyBy(t) {
		return na(checkTight, tooShortForEarly(t))
	}
	e, err := q.s.sendAt(ctx, earlyAt(r, t), q.p.Method)
	if err != nil {
		q.stopWith(err)
		return na(checkTight, "not checked: "+err.Error())
	}
	return tightVerdict(t, r, e)
}
