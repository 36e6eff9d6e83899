// Command chi-server is a small chi service behind retryafter's limiter: 1 request per second
// per client, with bursts of 5, so that 50 quick requests from one client see 429s.
//
//	go run ./_examples/chi-server
//	go run ./_examples/chi-server -addr 127.0.0.1:9090
//	go run ./_examples/chi-server -addr 127.0.0.1:8081 -redis 127.0.0.1:6379  # replicas share one limit
package main

import (
	"flag"
	"fmt"
	"log"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"golang.org/x/time/rate"

	"github.com/retryafter/retryafter"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "address to listen on")
	redisAddr := flag.String("redis", "", "count requests in the Redis at this `ADDR` (host:port), shared by every replica, instead of in memory")
	flag.Parse()

	r := chi.NewRouter()
	r.Use(middleware.Logger)
	r.Use(retryafter.LimitWith(newLimiter(*redisAddr, rate.Every(time.Second), 5), retryafter.WithErrorHook(logLimitError)))
	r.Get("/", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "hello")
	})

	fmt.Printf(`listening on http://%[1]s — 1 request/s per client, bursts of 5. Try:
  curl -i http://%[1]s/
  for i in $(seq 50); do curl -s -o /dev/null -w '%%{http_code} ' http://%[1]s/; done; echo
  curl -si http://%[1]s/ | grep -Ei '^(HTTP|Retry-After|Date)'
`, *addr)
	srv := &http.Server{Addr: *addr, Handler: r, ReadHeaderTimeout: 5 * time.Second}
	log.Fatal(srv.ListenAndServe())
}
