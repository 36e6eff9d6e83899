package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func sampleReport() *Report {
	r := &Report{
		Method: "GET", URL: "http://127.0.0.1:8080/", Requests: 14, Elapsed: 19512 * time.Millisecond,
		Refusal: &Refusal{Request: 6, Status: 429, RetryAfter: []string{"10"}, Date: []string{date0}},
		Checks: []Check{
			{checkRetryAfter, Pass, `"10": delay-seconds`},
			{checkObey, Fail, "waited 10 s as told, then retried: refused (429 Too Many Requests, Retry-After: 10): obeying is not enough"},
			{checkCORS, NA, "no -origin given"},
		},
	}
	r.Seconds = 19.512
	r.Exit = r.exitCode()
	return r
}

func TestWriteTable(t *testing.T) {
	var b strings.Builder
	if err := writeTable(&b, sampleReport()); err != nil {
		t.Fatal(err)
	}
	want := `retryafter-check GET http://127.0.0.1:8080/
first refusal: request 6, 429 Too Many Requests

CHECK        RESULT  SEEN
retry-after  pass    "10": delay-seconds
obey         FAIL    waited 10 s as told, then retried: refused (429 Too Many Requests, Retry-After: 10): obeying is not enough
cors         n/a     no -origin given

14 requests sent in 19.5 s, all to http://127.0.0.1:8080/
FAIL: obey (exit 1)
`
	if got := b.String(); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}

	// A server limited before the probe began says so under the first refusal.
	limited := sampleReport()
	limited.Refusal.Request, limited.Refusal.AlreadyLimited = 1, true
	b.Reset()
	writeTable(&b, limited)
	if want := "first refusal: request 1, 429 Too Many Requests\nalready limited: the first request was refused, so earlier traffic had spent this quota; what other traffic spends meanwhile can make a retry fail\n\nCHECK"; !strings.Contains(b.String(), want) {
		t.Errorf("got\n%s\nwant it to hold\n%s", b.String(), want)
	}

	gaveUp := &Report{Method: "GET", URL: "http://127.0.0.1:8080/", Requests: 1, GaveUp: "could not run: refused"}
	gaveUp.Exit = gaveUp.exitCode()
	b.Reset()
	writeTable(&b, gaveUp)
	if want := "retryafter-check GET http://127.0.0.1:8080/\n1 request sent in 0 s, all to http://127.0.0.1:8080/\ngave up: could not run: refused (exit 3)\n"; b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
}

func TestWriteJSON(t *testing.T) {
	var b strings.Builder
	if err := writeJSON(&b, sampleReport()); err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(b.String()), &got); err != nil {
		t.Fatalf("%v:\n%s", err, b.String())
	}
	if got["requests"] != 14.0 || got["seconds"] != 19.512 || got["exit"] != 1.0 || got["method"] != "GET" {
		t.Errorf("got %v", got)
	}
	if _, ok := got["gave_up"]; ok {
		t.Errorf("gave_up present on a finished run: %v", got)
	}
	checks := got["checks"].([]any)
	if c := checks[1].(map[string]any); c["name"] != "obey" || c["result"] != "fail" || !strings.Contains(c["seen"].(string), "obeying is not enough") {
		t.Errorf("checks[1] = %v", c)
	}
	if ref := got["refusal"].(map[string]any); ref["status"] != 429.0 || ref["request"] != 6.0 || ref["already_limited"] != nil {
		t.Errorf("refusal = %v", ref)
	}
	limited := sampleReport()
	limited.Refusal.AlreadyLimited = true
	b.Reset()
	writeJSON(&b, limited)
	if !strings.Contains(b.String(), `"already_limited": true`) {
		t.Errorf("got %s", b.String())
	}

	// A run that met no refusal has an empty list of checks, not null.
	b.Reset()
	writeJSON(&b, &Report{GaveUp: "no refusal", Exit: exitGaveUp})
	if !strings.Contains(b.String(), `"checks": []`) || !strings.Contains(b.String(), `"refusal": null`) {
		t.Errorf("got %s", b.String())
	}
}

func TestExitCode(t *testing.T) {
	for _, c := range []struct {
		checks []Check
		gaveUp string
		want   int
	}{
		{[]Check{{checkObey, Pass, ""}, {checkCORS, NA, ""}}, "", exitPass},
		{[]Check{{checkObey, Fail, ""}}, "", exitFail},
		{[]Check{{checkObey, Fail, ""}}, "interrupted", exitFail}, // a failure found stands
		{[]Check{{checkObey, NA, ""}}, "interrupted", exitGaveUp},
		{nil, "no refusal", exitGaveUp},
	} {
		if got := (&Report{Checks: c.checks, GaveUp: c.gaveUp}).exitCode(); got != c.want {
			t.Errorf("%v %q: exit %d, want %d", c.checks, c.gaveUp, got, c.want)
		}
	}
}

// TestWriteTableBudgets checks that the table states the budgets of the run, and how many
// responses had more fields than the probe keeps.
func TestWriteTableBudgets(t *testing.T) {
	r := sampleReport()
	r.Budget, r.Timeout, r.FieldsCut = 300, 3*time.Minute, 2
	var b strings.Builder
	writeTable(&b, r)
	want := "14 requests sent in 19.5 s (-budget 300, -timeout 3m0s), all to http://127.0.0.1:8080/\n" +
		"2 responses had more of the fields the checks read than the probe keeps (16 KB, 1 KB a line): what was judged is what was kept\n"
	if !strings.Contains(b.String(), want) {
		t.Errorf("got\n%s\nwant it to hold\n%s", b.String(), want)
	}
}
