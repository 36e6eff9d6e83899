package interop

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The test below runs curl and urllib3, as people run them, against an upstream on 127.0.0.1
// that refuses as OpenAI, Anthropic or GitHub do, behind the gateway and straight. They sleep
// for real, so the upstream's quota comes back 2 s after its first request, and what is checked
// is the number of tries that reached the upstream, never how long they took.

// apiWindow is how long after its first request an API upstream admits again.
const apiWindow = 2 * time.Second

// An apiRefusal is how an API refuses a request while its quota is spent.
type apiRefusal struct {
	name string
	skew time.Duration // of the API's clock, ahead of the real one
	// refuse sets the refusal's fields, given the API's clock and its reset, and returns the
	// status.
	refuse func(h http.Header, now, reset time.Time) int
}

// The refusals of issue 45, with the documented fields only: no Retry-After (Anthropic sends
// one beside its resets, which the gateway would read first).
var (
	openAIRefusal = apiRefusal{"OpenAI 429, x-ratelimit-reset-requests only", 0,
		func(h http.Header, now, reset time.Time) int {
			h.Set("X-Ratelimit-Reset-Requests", reset.Sub(now).String()) // "2s"
			return http.StatusTooManyRequests
		}}
	anthropicRefusal = apiRefusal{"Anthropic 429, RFC 3339 resets, Date 1 h ahead", time.Hour + 300*time.Millisecond,
		func(h http.Header, now, reset time.Time) int {
			h.Set("Anthropic-Ratelimit-Requests-Remaining", "12")
			h.Set("Anthropic-Ratelimit-Requests-Reset", now.Add(time.Second).UTC().Format(time.RFC3339))
			h.Set("Anthropic-Ratelimit-Tokens-Remaining", "0")
			h.Set("Anthropic-Ratelimit-Tokens-Reset", reset.UTC().Format(time.RFC3339)) // cut to the second
			return http.StatusTooManyRequests
		}}
	gitHubRefusal = apiRefusal{"GitHub 403, x-ratelimit-remaining 0, epoch reset, Date 2 h behind", -2*time.Hour + 300*time.Millisecond,
		func(h http.Header, now, reset time.Time) int {
			h.Set("X-Ratelimit-Limit", "60")
			h.Set("X-Ratelimit-Remaining", "0")
			h.Set("X-Ratelimit-Reset", strconv.FormatInt(reset.Unix(), 10))
			return http.StatusForbidden
		}}
)

// An apiUpstream refuses as its API does from its first request until apiWindow later, then
// answers 200, and counts the requests it gets.
type apiUpstream struct {
	refusal apiRefusal

	mu    sync.Mutex
	reset time.Time
	tries int
}

func (u *apiUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	now := time.Now().Add(u.refusal.skew)
	u.mu.Lock()
	u.tries++
	if u.reset.IsZero() {
		u.reset = now.Add(apiWindow)
	}
	reset := u.reset
	u.mu.Unlock()
	w.Header().Set("Date", now.UTC().Format(http.TimeFormat))
	if now.Before(reset) {
		w.WriteHeader(u.refusal.refuse(w.Header(), now, reset))
		return
	}
	io.WriteString(w, "ok")
}

// runAPI starts an upstream that refuses as a, behind the gateway or not, lets c send one GET,
// and returns the tries that reached the upstream and the final status c printed.
func runAPI(c realClient, a apiRefusal, behindGateway bool) (tries int, final string) {
	up := &apiUpstream{refusal: a}
	upstream := httptest.NewServer(up)
	defer upstream.Close()
	front := frontFor(upstream, behindGateway)
	defer front.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	final, err := c.get(ctx, front.URL)
	if err != nil && final == "" {
		final = err.Error()
		if e, ok := err.(*exec.ExitError); ok && len(e.Stderr) > 0 {
			final += ": " + strings.TrimSpace(string(e.Stderr))
		}
	}
	up.mu.Lock()
	defer up.mu.Unlock()
	return up.tries, final
}

// An apiOutcome is what a client is expected to end with.
type apiOutcome int

const (
	throughOnFirstRetry apiOutcome = iota // 2 tries, the second admitted
	notOnFirstRetry                       // anything else: too early, gave up, or no Retry-After
	notRetried                            // 1 try, whose refusal the client returned
	onItsOwnClock                         // shown, not checked: the client's own backoff decides
)

func (o apiOutcome) String() string {
	return [...]string{"through on its first retry", "not through on its first retry", "the refusal, not retried", "on its own clock"}[o]
}

// holds reports whether a client that made tries and printed final ended as o says.
func (o apiOutcome) holds(tries int, final string) bool {
	first := tries == 2 && final == "200"
	switch o {
	case throughOnFirstRetry:
		return first
	case notOnFirstRetry:
		return !first
	case onItsOwnClock:
		return true
	}
	return tries == 1 && final != "200"
}

// needTool skips the test when the tool that has is false is missing, and fails it under
// CI=true, where .ci/run installs it.
func needTool(t *testing.T, tool string, has bool) {
	t.Helper()
	if has {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s is not installed: under CI=true the real clients must run; .ci/run installs it", tool)
	}
	t.Skipf("%s is not installed: the real clients' rows need it", tool)
}

// TestRealClientsAPIResets runs curl and urllib3 with their defaults against upstreams that
// refuse as OpenAI, Anthropic and GitHub do, on the real clock, behind the gateway and
// straight. Behind the gateway, which turns the APIs' reset fields into Retry-After, both get
// through on their first retry after OpenAI's and Anthropic's 429; straight, they cannot read
// those fields and retry too early or not at all. GitHub's 403 stays a 403 with Retry-After,
// which neither retries by default (curl's --retry and urllib3's Retry-After statuses are 408,
// 413, 429, 5xx): urllib3 told to retry 403 then waits the Retry-After and gets through on its
// first retry, while curl, even with --retry-all-errors, retries a 403 on its own backoff.
// Where curl's own backoff (1 s, 2 s, ...) races the upstream's 2 s, the row is shown and not
// checked: on a loaded machine either may win.
func TestRealClientsAPIResets(t *testing.T) {
	needTool(t, "curl", exec.Command("curl", "--version").Run() == nil)
	needTool(t, "python3 with urllib3", exec.Command("python3", "-c", "import urllib3").Run() == nil)
	py, _ := filepath.Abs("testdata/realclients/client.py")
	curlRetry := realClient{"curl --retry 4", "", curl("--retry", "4")}
	curlAllErrors := realClient{"curl -f --retry 4 --retry-all-errors", "", curl("-f", "--retry", "4", "--retry-all-errors")}
	urllib3 := realClient{"urllib3 Retry(3)", "", command("python3", py)}
	urllib3On403 := realClient{"urllib3 Retry(3, status_forcelist=[403])", "", command("python3", py, "403")}
	tests := []struct {
		api              apiRefusal
		client           realClient
		behind, straight apiOutcome
	}{
		{openAIRefusal, curlRetry, throughOnFirstRetry, onItsOwnClock},
		{openAIRefusal, urllib3, throughOnFirstRetry, notOnFirstRetry},
		{anthropicRefusal, curlRetry, throughOnFirstRetry, onItsOwnClock},
		{anthropicRefusal, urllib3, throughOnFirstRetry, notOnFirstRetry},
		{gitHubRefusal, curlRetry, notRetried, notRetried},
		{gitHubRefusal, urllib3, notRetried, notRetried},
		{gitHubRefusal, urllib3On403, throughOnFirstRetry, notOnFirstRetry},
		{gitHubRefusal, curlAllErrors, onItsOwnClock, onItsOwnClock},
	}
	cells := make([][2]string, len(tests))
	var (
		wg  sync.WaitGroup
		sem = make(chan struct{}, 8)
	)
	for i, tt := range tests {
		for j, behind := range []bool{true, false} {
			want := tt.straight
			if behind {
				want = tt.behind
			}
			wg.Go(func() {
				sem <- struct{}{}
				tries, final := runAPI(tt.client, tt.api, behind)
				<-sem
				cells[i][j] = fmt.Sprintf("%d tries, ended %s", tries, final)
				if !want.holds(tries, final) {
					t.Errorf("%s, %s, behind the gateway %t: %d tries, ended %s; want %v", tt.api.name, tt.client.name, behind, tries, final, want)
				}
			})
		}
	}
	wg.Wait()
	var table strings.Builder
	table.WriteString("| API | client | behind the gateway | straight to the upstream |\n| --- | --- | --- | --- |\n")
	for i, tt := range tests {
		fmt.Fprintf(&table, "| %s | %s | %s | %s |\n", tt.api.name, tt.client.name, cells[i][0], cells[i][1])
	}
	t.Logf("tries at the upstream, per API and client (it admits %v after its first request):\n%s", apiWindow, table.String())
}
