// Command metrics serves a small API behind retryafter's limiter, instrumented with package
// otelmetrics, and exports the metrics as Prometheus text through the OpenTelemetry Prometheus
// exporter at /metrics: 1 request per second per client, bursts of 3.
//
//	go run ./_examples/metrics                        # serve on 127.0.0.1:8080 (-addr to change)
//	go run ./_examples/metrics -redis 127.0.0.1:6379  # count in Redis: its down state is exported too
//	go run ./_examples/metrics -demo                  # send itself a few requests, print the scrape, exit
//
// Each route is limited inside the mux, so that the middleware sees the route pattern the mux
// matched (r.Pattern, "GET /items/{id}") and records it as http.route: bounded by the routes
// written below, never the path or the client, which the client chooses. /metrics is outside
// the limiter, so that scraping is never refused; /healthz is exempt, and /beta/{id} is limited
// in a dry run, as a limit is rolled out.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/otlptranslator"
	"github.com/redis/go-redis/v9"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"golang.org/x/time/rate"

	"github.com/retryafter/retryafter"
	"github.com/retryafter/retryafter/otelmetrics"
	"github.com/retryafter/retryafter/redisstore"
)

// config is what the server is made of: the limiter, the name its metrics give it, and the
// options of its middleware beyond the metrics (a clock, in tests).
type config struct {
	limiter retryafter.Limiter
	name    string
	opts    []retryafter.Option
}

// newHandler returns the server's handler and a function that stops its meter provider.
func newHandler(c config) (http.Handler, func(context.Context) error, error) {
	reg := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(reg),
		otelprom.WithTranslationStrategy(otlptranslator.UnderscoreEscapingWithSuffixes))
	if err != nil {
		return nil, nil, err
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	m, err := otelmetrics.New(mp)
	if err != nil {
		return nil, nil, err
	}
	lim := m.Limiter(c.name, c.limiter) // times each decision, watches the store's state
	opts := append([]retryafter.Option{
		m.Option(),
		retryafter.WithExempt(func(r *http.Request) bool { return r.URL.Path == "/healthz" }),
		retryafter.WithErrorHook(func(r *http.Request, err error) { log.Printf("rate limit: %v", err) }),
	}, c.opts...)
	limit := retryafter.LimitWith(lim, opts...)
	dryRun := retryafter.LimitWith(lim, append(opts, retryafter.WithDryRun(true))...)

	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.Handle("GET /{$}", limit(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "hello")
	})))
	mux.Handle("GET /items/{id}", limit(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "item", r.PathValue("id"))
	})))
	mux.Handle("GET /beta/{id}", dryRun(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "beta", r.PathValue("id"))
	})))
	mux.Handle("GET /healthz", limit(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "ok")
	})))
	return mux, mp.Shutdown, nil
}

// newConfig returns the limiter of 1 request per second per client, bursts of 3: in memory, or
// in the Redis at redisAddr, with opts, when it is not empty.
func newConfig(redisAddr string, opts ...redisstore.Option) config {
	limit, burst := rate.Every(time.Second), 3
	if redisAddr == "" {
		return config{limiter: retryafter.NewTokenBucket(limit, burst), name: "memory"}
	}
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
	opts = append([]redisstore.Option{redisstore.WithPrefix("metrics-example:")}, opts...)
	return config{limiter: redisstore.New(rdb, limit, burst, opts...), name: "redis"}
}

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "address to listen on")
	redisAddr := flag.String("redis", "", "count requests in the Redis at this `ADDR` (host:port) instead of in memory")
	demo := flag.Bool("demo", false, "send a few requests to a server on a free loopback port, print the scrape and exit")
	flag.Parse()

	h, shutdown, err := newHandler(newConfig(*redisAddr))
	if err != nil {
		log.Fatal(err)
	}
	defer shutdown(context.Background())
	if *demo {
		if err := runDemo(h); err != nil {
			log.Fatal(err)
		}
		return
	}
	fmt.Printf(`listening on http://%[1]s — 1 request/s per client, bursts of 3. Try:
  for i in $(seq 5); do curl -s -o /dev/null -w '%%{http_code} ' http://%[1]s/items/$i; done; echo
  curl -s http://%[1]s/metrics | grep '^retryafter_'
`, *addr)
	srv := &http.Server{Addr: *addr, Handler: h, ReadHeaderTimeout: 5 * time.Second}
	log.Fatal(srv.ListenAndServe())
}

// demoPaths are the requests of the demo: the burst of 3, a refusal, a dry-run refusal and an
// exempt health check.
var demoPaths = []string{"/items/1", "/items/2", "/", "/items/3", "/beta/1", "/healthz"}

// runDemo serves h on a free loopback port, sends it demoPaths, and prints the statuses and
// the retryafter_ lines of the scrape.
func runDemo(h http.Handler) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	defer srv.Close()
	base := "http://" + ln.Addr().String()
	for _, p := range demoPaths {
		resp, err := http.Get(base + p)
		if err != nil {
			return err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		fmt.Printf("GET %-9s %d %s\n", p, resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if line := sc.Text(); strings.Contains(line, "retryafter_") {
			fmt.Println(line)
		}
	}
	return sc.Err()
}
