package main

import (
	"context"
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
// told. The probe skips it with -skip-later, and for a wait told under 3 s (half of it leaves
// no second to take off); when it would pass -timeout or -budget, the probe gives up rather
// than pass a wait it did not check.

// laterMin is the least first wait for which the later round runs.
const laterMin = 3 * time.Second

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
	if err := q.laterBudget(t1, r1.n-1); err != nil {
		q.stopWith(err)
		tight.Result, tight.Seen = NA, tight.Seen+"; the later round not checked: "+err.Error()
		return tight
	}
	sent, start := q.s.sent, q.s.now()
	later := q.spendLater(ctx, t1.wait/2)
	later.Seen += fmt.Sprintf(" (the later round: %d %s in %s)", q.s.sent-sent, plural(q.s.sent-sent, "request"), seconds(roundDuration(q.s.now().Sub(start))))
	tight.Seen += "; " + later.Seen
	if later.Result == Fail {
		tight.Result = Fail
	}
	return tight
}

// noLaterRound says why the later round does not apply after a first wait told t, or returns
// "".
func (q *session) noLaterRound(t told) string {
	switch {
	case q.p.SkipLater:
		return "skipped (-skip-later)"
	case t.wait < laterMin:
		return fmt.Sprintf("the first wait told, %s, is under %s", seconds(roundDuration(t.wait)), seconds(laterMin))
	case q.s.prev == nil || !q.s.prev.admitted():
		return "the last retry was not admitted, so no window is known to have begun"
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
	if need, left := t.wait/2+t.wait+time.Second, q.s.deadline().Sub(q.s.now()); need > left {
		return &laterBudgetError{fmt.Sprintf("would take about %s, and %s is left of -timeout %s", seconds(roundDuration(need)), seconds(roundDuration(max(left, 0))), q.s.timeout)}
	}
	if need, left := quota+2, q.s.budget-q.s.sent; need > left {
		return &laterBudgetError{fmt.Sprintf("needs about %d requests, and %d are left of -budget %d", need, left, q.s.budget)}
	}
	return nil
}

// spendLater waits d past the last admission, spends the quota, and retries a second before
// the wait the refusal then tells.
func (q *session) spendLater(ctx context.Context, d time.Duration) Check {
	what := fmt.Sprintf("later round, the quota spent again %s after an admission", seconds(roundDuration(d)))
	if err := q.s.wait(ctx, q.s.prev.sent.Add(d).Sub(q.s.now())); err != nil {
		q.stopWith(err)
		return na(checkTight, what+": not checked: "+err.Error())
	}
	r, err := q.s.provoke(ctx)
	if err != nil {
		q.stopWith(err)
		return na(checkTight, what+": not checked: "+err.Error())
	}
	what += fmt.Sprintf(" (request %d refused)", r.n)
	t := readObeyed(r)
	if why := unobeyable(t); why != "" {
		return na(checkTight, what+": "+why)
	}
	early := earlyBy(t)
	if t.wait < early {
		return na(checkTight, what+": "+tooShortForEarly(t))
	}
	e, err := q.s.sendAt(ctx, earlyAt(r, t), q.p.Method)
	if err != nil {
		q.stopWith(err)
		return na(checkTight, what+": not checked: "+err.Error())
	}
	c := tightVerdict(t, r, e)
	c.Seen = what + ": " + c.Seen
	return c
}
