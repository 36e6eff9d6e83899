package main

import "time"

// A Result is the verdict of one check.
type Result string

// The verdicts.
const (
	Pass Result = "pass"
	Fail Result = "fail"
	NA   Result = "n/a" // not applicable, or not checked; Check.Seen says which and why
)

// A Check is one check of the probe and what it saw.
type Check struct {
	Name   string `json:"name"`
	Result Result `json:"result"`
	Seen   string `json:"seen"`
}

// The names of the checks, in the order a report lists them.
const (
	checkRetryAfter = "retry-after"  // Retry-After present, conforming, never 0 nor a past date
	checkDate       = "date"         // Date present, an IMF-fixdate, near the probe's clock
	checkObey       = "obey"         // waiting what Retry-After said, a retry is admitted
	checkTight      = "tight"        // retrying a second early is refused
	checkFree       = "refusal-free" // that early retry cost nothing: waiting the rest is admitted
	checkHEAD       = "head"         // HEAD is refused like GET
	checkCORS       = "cors"         // a browser script of -origin can read Retry-After
	checkRateLimit  = "ratelimit"    // RateLimit fields parse and agree with Retry-After
)

// checkNames lists every check, in report order.
var checkNames = []string{checkRetryAfter, checkDate, checkObey, checkTight, checkFree, checkHEAD, checkCORS, checkRateLimit}

// The exit codes of the command.
const (
	exitPass   = 0 // every check that applies passed
	exitFail   = 1 // a check failed
	exitUsage  = 2 // the command line is wrong
	exitGaveUp = 3 // the probe could not run or finish: no refusal, a redirect, a network error, a budget spent
)

// A Refusal summarises the first refusal the probe met.
type Refusal struct {
	Request    int      `json:"request"` // its number among the requests sent
	Status     int      `json:"status"`
	RetryAfter []string `json:"retry_after"` // the field lines as received; null when absent
	Date       []string `json:"date"`
	// AlreadyLimited says that the probe's first request was refused with 429: earlier traffic
	// had spent the quota, and what other traffic spends meanwhile can make a retry fail.
	AlreadyLimited bool `json:"already_limited,omitempty"`
}

// A Report is what one run of the probe found.
type Report struct {
	Method   string        `json:"method"`
	URL      string        `json:"url"`
	Requests int           `json:"requests"` // how many requests were sent, all to URL
	Elapsed  time.Duration `json:"-"`
	Seconds  float64       `json:"seconds"` // Elapsed, in seconds
	// Budget and Timeout are the budgets of the run: the most requests, and the time.
	Budget         int           `json:"budget"`
	Timeout        time.Duration `json:"-"`
	TimeoutSeconds float64       `json:"timeout_seconds"`
	// FieldsCut is how many responses had more than 16 KB of the fields the checks read, of
	// which the probe kept only 16 KB: what it judged is what it kept.
	FieldsCut int      `json:"fields_cut,omitempty"`
	Refusal   *Refusal `json:"refusal"` // nil when none was met
	Checks    []Check  `json:"checks"`  // empty when no refusal was met
	// GaveUp says why the probe stopped before it was done, or is "" when it finished.
	GaveUp string `json:"gave_up,omitempty"`
	Exit   int    `json:"exit"`
}

// check returns the check named name, or nil.
func (r *Report) check(name string) *Check {
	for i := range r.Checks {
		if r.Checks[i].Name == name {
			return &r.Checks[i]
		}
	}
	return nil
}

// failed returns the names of the checks that failed.
func (r *Report) failed() []string {
	var names []string
	for _, c := range r.Checks {
		if c.Result == Fail {
			names = append(names, c.Name)
		}
	}
	return names
}

// exitCode is the command's exit code for r: a failed check wins over an unfinished run.
func (r *Report) exitCode() int {
	switch {
	case len(r.failed()) > 0:
		return exitFail
	case r.GaveUp != "":
		return exitGaveUp
	}
	return exitPass
}
