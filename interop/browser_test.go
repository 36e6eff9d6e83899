//go:build unix

package interop

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/retryafter/retryafter"
)

// The browser test drives a real headless Chromium. The page, served from one loopback origin,
// runs its own JavaScript against APIs on others and posts what it saw back to its own origin:
// no DevTools protocol client is needed, only the browser's exit to be bounded. It waits for
// real time, once: the Retry-After of 1 s that the page reads and honours.

// browserPage is the page. Its script fetches each scenario's API burst+1 times with a custom
// header (so that every fetch is preflighted), reads Retry-After and Date from the refusal as a
// script can, waits what they say, retries, and reports it all.
var browserPage = template.Must(template.New("page").Parse(`<!doctype html>
<html><head><meta charset="utf-8"><title>retryafter in a browser</title></head><body>
<script id="cfg" type="application/json">{{.}}</script>
<script>
const cfg = JSON.parse(document.getElementById("cfg").textContent);

async function get(api) {
  try {
    const r = await fetch(api + "/thing", {headers: {"X-Test": "1"}, cache: "no-store"});
    return {status: r.status, retryAfter: r.headers.get("Retry-After"), date: r.headers.get("Date"), body: await r.text()};
  } catch (e) {
    return {error: e.name + ": " + e.message};
  }
}

async function scenario(api, burst) {
  const out = {tries: []};
  for (let i = 0; i <= burst; i++) out.tries.push(await get(api));
  const refused = out.tries[burst];
  if (refused.status !== 429 || refused.retryAfter === null || refused.date === null) return out;
  // The wait the server asked for: delay-seconds, or an HTTP-date measured against Date.
  out.dateParsed = !Number.isNaN(Date.parse(refused.date));
  out.waitMs = /^[0-9]+$/.test(refused.retryAfter)
    ? Number(refused.retryAfter) * 1000
    : Date.parse(refused.retryAfter) - Date.parse(refused.date);
  const start = performance.now();
  await new Promise(resolve => setTimeout(resolve, out.waitMs));
  out.retry = await get(api);
  out.waitedMs = performance.now() - start;
  return out;
}

(async () => {
  const results = {};
  for (const s of cfg.scenarios) results[s.name] = await scenario(s.api, cfg.burst);
  return results;
})().catch(e => ({error: String(e)})).then(results =>
  fetch("/report", {method: "POST", body: JSON.stringify({userAgent: navigator.userAgent, results})}));
</script></body></html>`))

// browserTry is what the page saw of one fetch.
type browserTry struct {
	Status     int     `json:"status"`
	RetryAfter *string `json:"retryAfter"`
	Date       *string `json:"date"`
	Body       string  `json:"body"`
	Error      string  `json:"error"`
}

// browserScenario is what the page saw of one API.
type browserScenario struct {
	Tries      []browserTry `json:"tries"`
	DateParsed bool         `json:"dateParsed"`
	WaitMs     float64      `json:"waitMs"`
	Retry      *browserTry  `json:"retry"`
	WaitedMs   float64      `json:"waitedMs"`
}

// stripExpose removes Access-Control-Expose-Headers from every response of h: the same API
// without the exposure, to show that the page's checks can fail.
func stripExpose(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(stripWriter{w}, r)
	})
}

type stripWriter struct{ http.ResponseWriter }

func (s stripWriter) WriteHeader(code int) {
	s.Header().Del("Access-Control-Expose-Headers")
	s.ResponseWriter.WriteHeader(code)
}

func (s stripWriter) Write(b []byte) (int, error) {
	s.Header().Del("Access-Control-Expose-Headers")
	return s.ResponseWriter.Write(b)
}

// chromium returns the path of the Chromium to drive, or skips the test (fails it under CI,
// where .ci/run installs it).
func chromium(t *testing.T) string {
	path, err := exec.LookPath("chromium")
	if err == nil {
		return path
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("chromium not found (%v): under CI=true the browser test must run; .ci/run installs the Debian package chromium", err)
	}
	t.Skipf("chromium not found (%v): the browser test needs a headless Chromium (Debian package chromium; .ci/run installs it)", err)
	return ""
}

// startChromium starts a headless Chromium with a fresh profile on url, and stops it, and every
// process it started, when the test ends. It returns the browser's standard error so far.
func startChromium(t *testing.T, path, url string) func() string {
	profile := t.TempDir()
	var stderr bytes.Buffer
	cmd := exec.Command(path, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir="+profile, url)
	cmd.Stdout, cmd.Stderr = io.Discard, &syncWriter{w: &stderr}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // its own group, to stop all of it
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", path, err)
	}
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		cmd.Wait()
	})
	return func() string {
		var keep []string
		for _, line := range strings.Split(stderr.String(), "\n") {
			if line != "" && !strings.Contains(line, "dbus") {
				keep = append(keep, line)
			}
		}
		return strings.Join(keep, "\n")
	}
}

type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// TestBrowserReadsRetryAfter drives a real headless Chromium: a page on one loopback origin
// fetches an API on another (chi, go-chi/cors, retryafter.Limit with one request a second and
// bursts of 2), with a custom header so that each fetch is preflighted. Its own JavaScript
// checks that, with CORS mounted before the limiter, after the 429 it can read Retry-After (1)
// and Date, waits that long, retries and gets through; that without Access-Control-Expose-Headers
// the same script reads neither; and that with the limiter mounted before CORS the preflights
// are still not counted (two fetches get through) but the 429 reaches the script as a network
// error, which the limiter reported as ErrCORSMountOrder.
func TestBrowserReadsRetryAfter(t *testing.T) {
	path := chromium(t)
	const burst = 2

	reports := make(chan []byte, 1)
	var cfg any // the page's configuration, which html/template writes out as JSON
	page := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/":
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			browserPage.Execute(w, cfg)
		case "/report":
			b, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
			select {
			case reports <- b:
			default:
			}
		default:
			http.NotFound(w, r)
		}
	}))
	defer page.Close()
	origin := "http://" + page.Listener.Addr().String()

	var corsFirstErrs, strippedErrs, limiterFirstErrs syncErrors
	apis := map[string]*httptest.Server{
		"cors first":           httptest.NewServer(corsAPI(origin, true, burst, nil, &corsFirstErrs)),
		"cors first, stripped": httptest.NewServer(stripExpose(corsAPI(origin, true, burst, nil, &strippedErrs))),
		"limiter first":        httptest.NewServer(corsAPI(origin, false, burst, nil, &limiterFirstErrs)),
	}
	type scenarioCfg struct {
		Name string `json:"name"`
		API  string `json:"api"`
	}
	var scenarios []scenarioCfg
	for _, name := range []string{"cors first", "cors first, stripped", "limiter first"} {
		defer apis[name].Close()
		scenarios = append(scenarios, scenarioCfg{name, apis[name].URL})
	}
	cfg = map[string]any{"burst": burst, "scenarios": scenarios}
	page.Start() // after cfg is written, which the page's handler reads

	stderr := startChromium(t, path, page.URL+"/")
	var report struct {
		UserAgent string                     `json:"userAgent"`
		Results   map[string]browserScenario `json:"results"`
		Error     string                     `json:"error"`
	}
	select {
	case b := <-reports:
		if err := json.Unmarshal(b, &report); err != nil || report.Error != "" || len(report.Results) != 3 {
			t.Fatalf("the page reported %s (%v)", b, err)
		}
	case <-time.After(90 * time.Second):
		t.Fatalf("no report from the page within 90 s; chromium said:\n%s", stderr())
	}
	t.Logf("%s", report.UserAgent)

	describe := func(s browserScenario) string { b, _ := json.Marshal(s); return string(b) }
	admittedBurst := func(name string, s browserScenario) {
		t.Helper()
		if len(s.Tries) != burst+1 {
			t.Fatalf("%s: %d tries: %s", name, len(s.Tries), describe(s))
		}
		for i, try := range s.Tries[:burst] {
			if try.Status != http.StatusOK || try.Body != "thing" {
				t.Errorf("%s: fetch %d got %+v; want 200 (a counted preflight would have spent the burst): %s", name, i+1, try, describe(s))
			}
		}
	}

	// CORS before the limiter: the script reads Retry-After and Date, waits, gets through.
	s := report.Results["cors first"]
	admittedBurst("cors first", s)
	refused := s.Tries[burst]
	switch {
	case refused.Status != http.StatusTooManyRequests || refused.RetryAfter == nil || *refused.RetryAfter != "1" ||
		refused.Date == nil || !s.DateParsed:
		t.Errorf("cors first: the script saw %+v; want 429 with Retry-After 1 and a Date it can parse: %s", refused, describe(s))
	case s.Retry == nil || s.Retry.Status != http.StatusOK || s.WaitMs != 1000 || s.WaitedMs < 1000:
		t.Errorf("cors first: after waiting %.0f ms of the %.0f asked, the retry got %+v; want 200: %s", s.WaitedMs, s.WaitMs, s.Retry, describe(s))
	}
	if errs := corsFirstErrs.list(); len(errs) != 0 {
		t.Errorf("cors first: the limiter reported %v", errs)
	}

	// The same without the exposure: the script sees the 429 but neither field.
	s = report.Results["cors first, stripped"]
	admittedBurst("cors first, stripped", s)
	if refused := s.Tries[burst]; refused.Status != http.StatusTooManyRequests || refused.RetryAfter != nil || refused.Date != nil {
		t.Errorf("without Access-Control-Expose-Headers the script saw %+v; want 429 with Retry-After and Date hidden", refused)
	}

	// The limiter before CORS: preflights still uncounted, but the 429 is hidden from the
	// script, and the limiter said why.
	s = report.Results["limiter first"]
	admittedBurst("limiter first", s)
	if refused := s.Tries[burst]; refused.Status != 0 || !strings.Contains(refused.Error, "Failed to fetch") {
		t.Errorf("limiter first: the script saw %+v; want the network error a refusal without CORS headers is", refused)
	}
	if errs := limiterFirstErrs.list(); len(errs) != 1 || !errors.Is(errs[0], retryafter.ErrCORSMountOrder) {
		t.Errorf("limiter first: the limiter reported %v; want ErrCORSMountOrder once", errs)
	}
	if t.Failed() {
		fmt.Fprintf(os.Stderr, "chromium said:\n%s\n", stderr())
	}
}
