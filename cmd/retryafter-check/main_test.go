package main

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

func TestRunUsage(t *testing.T) {
	dir := t.TempDir()
	body := filepath.Join(dir, "body.json")
	if err := os.WriteFile(body, []byte(`{}`), 0o600); err != nil {
		t.Fatal(err)
	}
	never := roundTripFunc(func(*http.Request) (*http.Response, error) {
		t.Error("a request was sent")
		return nil, http.ErrServerClosed
	})
	for _, c := range []struct {
		args []string
		want int
		msg  string
	}{
		{nil, exitUsage, "usage: retryafter-check [flags] URL"},
		{[]string{"-h"}, exitPass, "usage:"},
		{[]string{testURL, testURL}, exitUsage, "usage:"},
		{[]string{"-budget", "0", testURL}, exitUsage, "-budget must be at least 1"},
		{[]string{"-pace", "0s", testURL}, exitUsage, "-pace must be above 0"},
		{[]string{"-timeout", "-1s", testURL}, exitUsage, "-timeout must be above 0"},
		{[]string{"ftp://api.test/"}, exitUsage, `"ftp://api.test/": want an http or https URL`},
		{[]string{"api.test/v1"}, exitUsage, "want an http or https URL"},
		{[]string{"http:///v1"}, exitUsage, "no host"},
		{[]string{"-H", "no colon", testURL}, exitUsage, `want Name: value, got "no colon"`},
		{[]string{"-d", "@" + filepath.Join(dir, "missing"), testURL}, exitUsage, "no such file"},
		{[]string{testURL, "-pace"}, exitUsage, "flag needs an argument"},
	} {
		var out, errb strings.Builder
		if got := run(t.Context(), c.args, &out, &errb, never); got != c.want || !strings.Contains(errb.String(), c.msg) {
			t.Errorf("%q: exit %d, stderr %q; want %d and %q", c.args, got, errb.String(), c.want, c.msg)
		}
	}
}

// TestRun runs the command as a user does, flags before and after the URL, against servers on
// the fake network.
func TestRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := serve(t, ours())
		defer n.close()
		var out, errb strings.Builder
		code := run(t.Context(), []string{"-origin", testOrigin, testURL, "-json"}, &out, &errb, n.tr)
		if code != exitPass || errb.Len() > 0 {
			t.Fatalf("exit %d, stderr %q, stdout:\n%s", code, errb.String(), out.String())
		}
		var rep Report
		if err := json.Unmarshal([]byte(out.String()), &rep); err != nil {
			t.Fatal(err)
		}
		if rep.Requests != 12 || rep.Exit != exitPass || len(rep.Checks) != len(checkNames) || rep.URL != testURL {
			t.Fatalf("report %+v", rep)
		}
	})
	synctest.Test(t, func(t *testing.T) {
		n := serve(t, withCORS("", newSlidingWindow(5, 500*time.Millisecond)))
		defer n.close()
		var out, errb strings.Builder
		body := filepath.Join(t.TempDir(), "body")
		os.WriteFile(body, []byte("x"), 0o600)
		code := run(t.Context(), []string{"-H", "Authorization: Bearer x", "-d", "@" + body, testURL}, &out, &errb, n.tr)
		if code != exitFail || !strings.Contains(out.String(), "FAIL: retry-after, obey (exit 1)") {
			t.Fatalf("exit %d, stdout:\n%s", code, out.String())
		}
	})
	synctest.Test(t, func(t *testing.T) {
		n := serve(t, hello())
		defer n.close()
		var out, errb strings.Builder
		code := run(t.Context(), []string{"-budget", "10", testURL}, &out, &errb, n.tr)
		if code != exitGaveUp || !strings.Contains(out.String(), "10 requests sent") ||
			!strings.Contains(out.String(), "gave up: no refusal: the request budget is spent (-budget), after 10 requests (10 × 200 OK) (exit 3)") {
			t.Fatalf("exit %d, stdout:\n%s", code, out.String())
		}
	})
}

// TestRunSkipLater checks that -skip-later skips the later round, and says so.
func TestRunSkipLater(t *testing.T) {
	for _, c := range []struct {
		args     []string
		tight    string
		requests int
	}{
		{nil, "later round, the quota spent again 5 s after an admission", 18},
		{[]string{"-skip-later"}, "no later round: skipped (-skip-later)", 14},
	} {
		synctest.Test(t, func(t *testing.T) {
			n := serve(t, &fixedWindow{limit: 3, window: 10 * time.Second, says: wholeWindow})
			defer n.close()
			var out, errb strings.Builder
			code := run(t.Context(), append([]string{"-json", testURL}, c.args...), &out, &errb, n.tr)
			var rep Report
			if err := json.Unmarshal([]byte(out.String()), &rep); err != nil {
				t.Fatal(err)
			}
			if tight := rep.check(checkTight); !strings.Contains(tight.Seen, c.tight) || rep.Requests != c.requests || code != rep.Exit {
				t.Errorf("%q: tight %s %q, %d requests, exit %d; want it to hold %q, %d requests", c.args, tight.Result, tight.Seen, rep.Requests, code, c.tight, c.requests)
			}
			if rep.Budget != defaultBudget || rep.TimeoutSeconds != defaultTimeout.Seconds() {
				t.Errorf("budgets %d, %v s", rep.Budget, rep.TimeoutSeconds)
			}
		})
	}
}
