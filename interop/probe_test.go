package interop

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/httprate"

	"github.com/retryafter/retryafter"
	"github.com/retryafter/retryafter/httpratestore"
)

// probeReport is what this test reads of retryafter-check's -json report.
type probeReport struct {
	Requests int     `json:"requests"`
	Seconds  float64 `json:"seconds"`
	Checks   []struct {
		Name   string `json:"name"`
		Result string `json:"result"`
		Seen   string `json:"seen"`
	} `json:"checks"`
	GaveUp string `json:"gave_up"`
	Exit   int    `json:"exit"`
}

func (r probeReport) verdicts() string {
	var parts []string
	for _, c := range r.Checks {
		parts = append(parts, c.Name+"="+c.Result)
	}
	return strings.Join(parts, " ")
}

// TestProbeHttprate runs retryafter-check, built from this repository, over loopback against
// go-chi/httprate as it is, whose Retry-After is always the whole window, and against the same
// sliding window through httpratestore, which tells the exact wait: the first must fail, the
// second pass. The probe waits as told on the real clock, so the two run side by side, 3
// requests a 4 s window each (about 10 s); -short skips it.
func TestProbeHttprate(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the probe runs on the real clock")
	}
	probe := buildProbe(t)
	byPeer := func(r *http.Request) (string, error) {
		host, _, err := net.SplitHostPort(r.RemoteAddr)
		return host, err
	}
	for _, c := range []struct {
		name    string
		limiter func() http.Handler
		exit    int
	}{
		{"httprate as it is", func() http.Handler { return httprate.LimitBy(3, 4*time.Second, byPeer)(ok) }, 1},
		{"httprate through httpratestore", func() http.Handler {
			return retryafter.LimitWith(httpratestore.New(3, 4*time.Second, nil))(ok)
		}, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(c.limiter())
			defer srv.Close()
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()
			out, err := exec.CommandContext(ctx, probe, "-json", "-timeout", "90s", srv.URL+"/").Output()
			var exit *exec.ExitError
			if err != nil && !errors.As(err, &exit) {
				t.Fatal(err)
			}
			var rep probeReport
			if err := json.Unmarshal(out, &rep); err != nil {
				t.Fatalf("%v:\n%s", err, out)
			}
			t.Logf("%s: %s, exit %d, %d requests in %.1f s", c.name, rep.verdicts(), rep.Exit, rep.Requests, rep.Seconds)
			if rep.Exit != c.exit || rep.GaveUp != "" {
				t.Errorf("exit %d (gave up %q), want %d:\n%s", rep.Exit, rep.GaveUp, c.exit, out)
			}
		})
	}
}

// buildProbe builds retryafter-check from this repository and returns its path. It skips, or
// fails under CI=true, when it cannot.
func buildProbe(t *testing.T) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("no go command to build retryafter-check with: %v", err)
		}
		t.Skipf("no go command to build retryafter-check with: %v", err)
	}
	out := filepath.Join(t.TempDir(), "retryafter-check")
	cmd := exec.Command(goBin, "build", "-o", out, "./cmd/retryafter-check")
	cmd.Dir = ".."
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("cannot build retryafter-check: %v\n%s", err, b)
	}
	return out
}
