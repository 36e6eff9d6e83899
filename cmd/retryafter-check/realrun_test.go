package main

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// TestRealRunAgainstChiServer builds the command and _examples/chi-server (1 request a second
// per client, bursts of 5), starts the server on a free loopback port, and runs the built
// command against it over the real network, as a user does. It skips, or fails under CI=true,
// when the two cannot be built.
func TestRealRunAgainstChiServer(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: no real run")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		cannotRun(t, "no go command to build with: %v", err)
	}
	dir := t.TempDir()
	check, server := filepath.Join(dir, "retryafter-check"), filepath.Join(dir, "chi-server")
	for _, b := range []struct{ out, dir, pkg string }{
		{check, ".", "."},
		{server, filepath.Join("..", "..", "_examples"), "./chi-server"},
	} {
		cmd := exec.Command(goBin, "build", "-o", b.out, b.pkg)
		cmd.Dir = b.dir
		if out, err := cmd.CombinedOutput(); err != nil {
			cannotRun(t, "cannot build %s in %s: %v\n%s", b.pkg, b.dir, err, out)
		}
	}

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()

	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	logFile, err := os.Create(filepath.Join(dir, "chi-server.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	serverLog := func() string { b, _ := os.ReadFile(logFile.Name()); return string(b) }
	srv := exec.CommandContext(ctx, server, "-addr", addr, "-admin", "")
	srv.Stdout, srv.Stderr = logFile, logFile // a file: no copying goroutine to race with
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		srv.Process.Kill()
		srv.Wait()
	})
	// Wait, at most 20 s, until it accepts connections; a dial sends no request, so it spends
	// none of the probe's quota.
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("chi-server on %s does not accept connections: %v\n%s", addr, err, serverLog())
		}
		time.Sleep(10 * time.Millisecond)
	}

	url := "http://" + addr + "/"
	out, err := exec.CommandContext(ctx, check, "-json", "-timeout", "1m", url).Output()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatal(err)
	}
	var rep Report
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	t.Logf("%s", out)
	// 1 request a second answers Retry-After: 1, a wait whose tightness cannot be judged; the
	// server sends the RateLimit fields.
	want := "retry-after=pass date=pass obey=pass tight=n/a refusal-free=pass head=pass cors=n/a ratelimit=pass"
	if got := verdicts(&rep); got != want || rep.Exit != exitPass || exit != nil {
		t.Errorf("verdicts %s, exit %d (%v); want %s, exit 0\nchi-server's log:\n%s", got, rep.Exit, err, want, serverLog())
	}
	if rep.Requests < 8 || rep.Requests > defaultBudget || rep.Refusal == nil || rep.Refusal.Status != 429 {
		t.Errorf("requests %d, refusal %+v", rep.Requests, rep.Refusal)
	}
}

// cannotRun skips the test, or fails it under CI=true, because what it needs is missing.
func cannotRun(t *testing.T, format string, args ...any) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf(format+" (CI=true: the real run is required)", args...)
	}
	t.Skipf(format, args...)
}
