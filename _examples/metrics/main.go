// Command metrics counts what retryafter's limiter refuses with expvar, from the standard
// library, and serves the counts at /debug/vars: 1 request per second per client, bursts of 3.
//
//	go run ./_examples/metrics                 # serve on 127.0.0.1:8080 (-addr to change)
//	go run ./_examples/metrics -demo           # send itself 10 quick requests, print the counts, exit
//
// The hooks run on the request's goroutine, so what they do must be cheap and safe for
// concurrent use: expvar's Int and Map are. What they count by must be bounded: the route
// pattern the request matched (r.Pattern, "GET /items/{id}"), never the path or the client key,
// which the client chooses: a client sending refused requests to 60,000 paths would otherwise
// add 60,000 entries to /debug/vars.
package main

import (
	"expvar"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"time"

	"golang.org/x/time/rate"

	"github.com/retryafter/retryafter"
)

var (
	limited       = expvar.NewInt("ratelimit_limited_total")
	limitedRoutes = expvar.NewMap("ratelimit_limited_by_route")
	neverAdmit    = expvar.NewInt("ratelimit_never_admitted_total")
	limiterErrs   = expvar.NewInt("ratelimit_errors_total")
)

func handler() http.Handler {
	limit := retryafter.Limit(rate.Every(time.Second), 3,
		retryafter.WithLimitedHook(func(r *http.Request, key string, d retryafter.Decision) {
			limited.Add(1)
			// By the route the mux matched: bounded by the routes you wrote. Not by
			// r.URL.Path, nor by key: the client chooses those.
			limitedRoutes.Add(r.Pattern, 1)
			if d.RetryAfter == rate.InfDuration {
				neverAdmit.Add(1)
			}
		}),
		retryafter.WithErrorHook(func(r *http.Request, err error) { limiterErrs.Add(1) }),
	)

	mux := http.NewServeMux()
	mux.Handle("GET /debug/vars", expvar.Handler()) // outside the limiter: scraping is never refused
	mux.Handle("GET /{$}", limit(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "hello")
	})))
	mux.Handle("GET /items/{id}", limit(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "item", r.PathValue("id"))
	})))
	return mux
}

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "address to listen on")
	demo := flag.Bool("demo", false, "send 10 requests to a server on a free loopback port, print the counters and exit")
	flag.Parse()

	if *demo {
		runDemo()
		return
	}
	fmt.Printf(`listening on http://%[1]s — 1 request/s per client, bursts of 3. Try:
  for i in $(seq 10); do curl -s -o /dev/null -w '%%{http_code} ' http://%[1]s/; done; echo
  curl -s http://%[1]s/debug/vars | grep ratelimit
`, *addr)
	srv := &http.Server{Addr: *addr, Handler: handler(), ReadHeaderTimeout: 5 * time.Second}
	log.Fatal(srv.ListenAndServe())
}

func runDemo() {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	srv := &http.Server{Handler: handler(), ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	defer srv.Close()

	base := "http://" + ln.Addr().String()
	for range 10 {
		resp, err := http.Get(base + "/")
		if err != nil {
			log.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if ra := resp.Header.Get("Retry-After"); ra != "" {
			fmt.Println(resp.StatusCode, "Retry-After:", ra)
		} else {
			fmt.Println(resp.StatusCode)
		}
	}
	fmt.Println("ratelimit_limited_total =", limited.Value())
	fmt.Println("ratelimit_limited_by_route =", limitedRoutes.String())
	fmt.Println("ratelimit_errors_total =", limiterErrs.Value())
}
