package interop

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-retryablehttp"
	"github.com/sethvargo/go-limiter/httplimit"
	"github.com/sethvargo/go-limiter/memorystore"
	"github.com/ulule/limiter/v3"
	"github.com/ulule/limiter/v3/drivers/middleware/stdlib"
	"github.com/ulule/limiter/v3/drivers/store/memory"

	"github.com/retryafter/retryafter/gateway"
	"github.com/retryafter/retryafter/retryclient"
)

// A realClient is a retrying HTTP client as people run it, with its defaults: it sends one GET
// to url and returns the final status as it printed it (or why it gave up).
type realClient struct {
	name string
	cmd  string // the command line, for the table; "" for one that runs in this process
	get  func(ctx context.Context, url string) (string, error)
}

// A realUpstream is a limiter that nobody here wrote, serving on the real clock.
type realUpstream struct {
	name  string
	limit int
	// start returns the upstream's handler and a function that releases what it holds.
	start func() (http.Handler, func(), error)
}

var realUpstreams = []realUpstream{
	{"ulule/limiter 3 per 10s", 3, func() (http.Handler, func(), error) {
		store := memory.NewStoreWithOptions(limiter.StoreOptions{Prefix: "interop", CleanUpInterval: 0})
		l := limiter.New(store, limiter.Rate{Period: 10 * time.Second, Limit: 3})
		return stdlib.NewMiddleware(l).Handler(ok), func() {}, nil
	}},
	{"go-limiter 3 per 10s", 3, func() (http.Handler, func(), error) {
		store, err := memorystore.New(&memorystore.Config{Tokens: 3, Interval: 10 * time.Second})
		if err != nil {
			return nil, nil, err
		}
		mw, err := httplimit.NewMiddleware(store, httplimit.IPKeyFunc())
		if err != nil {
			return nil, nil, err
		}
		return mw.Handle(ok), func() { store.Close(context.Background()) }, nil
	}},
}

// realClients returns the clients that this machine has: the two Go ones always, curl and
// urllib3 when installed, got, ky and axios-retry when INTEROP_NODE_DIR names a folder whose
// node_modules holds them.
func realClients(t *testing.T) []realClient {
	goClient := func(c *http.Client) func(ctx context.Context, url string) (string, error) {
		return func(ctx context.Context, url string) (string, error) {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
			if err != nil {
				return "", err
			}
			resp, err := c.Do(req)
			if err != nil {
				return "", err
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			return fmt.Sprint(resp.StatusCode), nil
		}
	}
	clients := []realClient{
		{"retryclient.Transport", "", goClient(&http.Client{Transport: &retryclient.Transport{Base: &http.Transport{}}})},
		{"go-retryablehttp v0.7.8", "", func(ctx context.Context, url string) (string, error) {
			c := retryablehttp.NewClient() // RetryMax 4, waits 1 s to 30 s, DefaultBackoff
			c.Logger = nil
			return goClient(c.StandardClient())(ctx, url)
		}},
	}
	if _, err := exec.LookPath("curl"); err == nil {
		clients = append(clients, realClient{"curl --retry 4", "curl -s -o FILE -w %{http_code} --retry 4 URL", curl("--retry", "4")})
	} else {
		t.Log("curl is not installed: its row is left out")
	}
	py, _ := filepath.Abs("testdata/realclients/client.py")
	if exec.Command("python3", "-c", "import urllib3").Run() == nil {
		clients = append(clients, realClient{"urllib3 (Retry(3))", "python3 testdata/realclients/client.py URL", command("python3", py)})
	} else {
		t.Log("python3 with urllib3 is not installed: its row is left out")
	}
	dir := os.Getenv("INTEROP_NODE_DIR")
	if dir == "" {
		t.Log("INTEROP_NODE_DIR is not set: the rows of got, ky and axios-retry are left out")
		return clients
	}
	script, err := os.ReadFile("testdata/realclients/client.mjs")
	if err != nil {
		t.Fatal(err)
	}
	// ES modules resolve bare imports from the script's own folder, not from NODE_PATH.
	at := filepath.Join(dir, "retryafter-interop-client.mjs")
	if err := os.WriteFile(at, script, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"got", "ky", "axios-retry"} {
		clients = append(clients, realClient{name + " " + nodeVersion(dir, name), "node testdata/realclients/client.mjs " + name + " URL",
			command("node", at, name)})
	}
	return clients
}

// command returns a get that runs name with args and the URL last, and returns what it printed
// to its standard output, trimmed.
func command(name string, args ...string) func(ctx context.Context, url string) (string, error) {
	return func(ctx context.Context, url string) (string, error) {
		out, err := exec.CommandContext(ctx, name, append(args, url)...).Output()
		return strings.TrimSpace(string(out)), err
	}
}

// curl returns a get that runs curl -s with args, writing the body into a file of its own, and
// returns the final status code it printed.
func curl(args ...string) func(ctx context.Context, url string) (string, error) {
	return func(ctx context.Context, url string) (string, error) {
		// Into a file: before a retry curl truncates what it wrote of the refused body, which it
		// cannot do to /dev/null or a pipe (it then stops with exit status 23).
		f, err := os.CreateTemp("", "retryafter-interop-curl-")
		if err != nil {
			return "", err
		}
		f.Close()
		defer os.Remove(f.Name())
		return command("curl", append([]string{"-s", "-o", f.Name(), "-w", "%{http_code}"}, args...)...)(ctx, url)
	}
}

// nodeVersion returns the version of the npm package name installed under dir.
func nodeVersion(dir, name string) string {
	b, err := os.ReadFile(filepath.Join(dir, "node_modules", name, "package.json"))
	if err != nil {
		return "?"
	}
	_, v, _ := strings.Cut(string(b), `"version": "`)
	v, _, _ = strings.Cut(v, `"`)
	return "v" + v
}

// A realRun is what the front server saw of one client's request after the quota was spent.
type realRun struct {
	tries   int
	final   string
	elapsed time.Duration // from the first try to the last
}

// runReal starts u on loopback, behind the gateway or not, spends its quota, then lets c send
// one GET, and returns what the server in front saw.
func runReal(c realClient, u realUpstream, behindGateway bool) (realRun, error) {
	h, stop, err := u.start()
	if err != nil {
		return realRun{}, err
	}
	defer stop()
	upstream := httptest.NewServer(h)
	defer upstream.Close()
	front := frontFor(upstream, behindGateway)
	defer front.Close()
	var (
		mu       sync.Mutex
		counting bool
		at       []time.Time
	)
	inner := front.Config.Handler
	front.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		if counting {
			at = append(at, time.Now())
		}
		mu.Unlock()
		inner.ServeHTTP(w, r)
	})
	for range u.limit {
		resp, err := http.Get(front.URL)
		if err != nil {
			return realRun{}, err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return realRun{}, fmt.Errorf("%s: %d while spending the quota", u.name, resp.StatusCode)
		}
	}
	mu.Lock()
	counting = true
	mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	final, err := c.get(ctx, front.URL)
	if err != nil && final == "" {
		final = err.Error()
	}
	mu.Lock()
	defer mu.Unlock()
	r := realRun{tries: len(at), final: final}
	if len(at) > 0 {
		r.elapsed = at[len(at)-1].Sub(at[0])
	}
	return r, nil
}

// frontFor returns the server on loopback that clients reach upstream by: a gateway with the
// Normalizer's defaults in front of it, or upstream itself. Closing it twice is harmless.
func frontFor(upstream *httptest.Server, behindGateway bool) *httptest.Server {
	if !behindGateway {
		return upstream
	}
	target, _ := url.Parse(upstream.URL)
	return httptest.NewServer(&httputil.ReverseProxy{
		Rewrite:        func(r *httputil.ProxyRequest) { r.SetURL(target) },
		ModifyResponse: new(gateway.Normalizer).ModifyResponse,
	})
}

// TestRealClientsBehindGateway runs retrying clients as people run them (curl, urllib3,
// go-retryablehttp, got, ky, axios-retry, and retryclient beside them) against upstreams on
// ulule/limiter and sethvargo/go-limiter, over loopback and on the real clock, behind the
// gateway and straight, and logs a table of tries per client and upstream. Every client behind
// the gateway must get through on its first retry. It takes about two minutes of real time, so
// it runs only when INTEROP_REAL_CLIENTS=1; interop/README.md gives the commands and the figures.
func TestRealClientsBehindGateway(t *testing.T) {
	if os.Getenv("INTEROP_REAL_CLIENTS") != "1" {
		t.Skip("set INTEROP_REAL_CLIENTS=1 to run real clients for about two minutes (see interop/README.md)")
	}
	const runs = 3
	clients := realClients(t)
	type cell struct {
		c       realClient
		u       realUpstream
		behind  bool
		results []realRun
	}
	var cells []*cell
	for _, c := range clients {
		for _, u := range realUpstreams {
			for _, behind := range []bool{true, false} {
				cells = append(cells, &cell{c: c, u: u, behind: behind})
			}
		}
	}
	var (
		wg  sync.WaitGroup
		mu  sync.Mutex
		sem = make(chan struct{}, 8)
	)
	for _, cl := range cells {
		for range runs {
			wg.Go(func() {
				sem <- struct{}{}
				defer func() { <-sem }()
				r, err := runReal(cl.c, cl.u, cl.behind)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				cl.results = append(cl.results, r)
				mu.Unlock()
			})
		}
	}
	wg.Wait()

	summary := func(rs []realRun) string {
		var tries []int
		through := 0
		var took []time.Duration
		var finals []string
		for _, r := range rs {
			tries = append(tries, r.tries)
			if r.final == "200" {
				through++
				took = append(took, r.elapsed.Round(100*time.Millisecond))
				continue
			}
			f := r.final
			if _, after, ok := strings.Cut(f, "giving up after "); ok { // go-retryablehttp's error
				f = "gave up after " + after
			}
			if !slices.Contains(finals, f) {
				finals = append(finals, f)
			}
		}
		lo, hi := slices.Min(tries), slices.Max(tries)
		s := fmt.Sprint(lo)
		if hi != lo {
			s = fmt.Sprintf("%d–%d", lo, hi)
		}
		s += fmt.Sprintf(" tries, %d/%d through", through, len(rs))
		if len(took) > 0 {
			s += fmt.Sprintf(" after %v–%v", slices.Min(took), slices.Max(took))
		}
		if len(finals) > 0 {
			s += " (else " + strings.Join(finals, ", ") + ")"
		}
		return s
	}
	var table strings.Builder
	table.WriteString("| client | upstream | behind the gateway | straight to the upstream |\n| --- | --- | --- | --- |\n")
	for i := 0; i < len(cells); i += 2 {
		behind, straight := cells[i], cells[i+1]
		fmt.Fprintf(&table, "| %s | %s | %s | %s |\n", behind.c.name, behind.u.name, summary(behind.results), summary(straight.results))
		for _, r := range behind.results {
			if r.tries != 2 || r.final != "200" {
				t.Errorf("%s behind the gateway to %s: %d tries, ended %s; want through on the first retry", behind.c.name, behind.u.name, r.tries, r.final)
			}
		}
	}
	var cmds strings.Builder
	for _, c := range clients {
		if c.cmd != "" {
			fmt.Fprintf(&cmds, "  %s: %s\n", c.name, c.cmd)
		}
	}
	t.Logf("tries per client and upstream, %d runs each:\n%s\ncommands:\n%s", runs, table.String(), cmds.String())
}
