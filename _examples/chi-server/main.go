// Command chi-server is a small chi service behind retryafter's limiter: 1 request per second
// per client, with bursts of 5, so that 50 quick requests from one client see 429s. A client
// that sends a known API key (X-API-Key: demo-pro) is on the pro plan instead: 10 a second,
// bursts of 20. With -dry-run nothing is refused: each request that would have been is logged.
//
// HEAD is served wherever GET is (chi's middleware.GetHead), so that a HEAD probe sees what a
// GET would: 200, 429 or 503, never 405.
//
// It can be put into maintenance at run time through an admin endpoint that listens on loopback
// only (-admin, default 127.0.0.1:8081; an empty value turns it off). While in maintenance every
// request but /healthz gets 503 with a Retry-After counting down to the announced end.
//
//	go run ./_examples/chi-server
//	go run ./_examples/chi-server -dry-run                # log what the limit would refuse
//	go run ./_examples/chi-server -max-concurrent 10      # /work takes 100 ms; at most 10 at once
//	curl -i -H 'X-API-Key: demo-pro' http://127.0.0.1:8080/ # the pro plan: "pro";q=20;w=2
//	go run ./_examples/chi-server -addr 127.0.0.1:9090 -admin 127.0.0.1:9091
//
//	curl -X POST 'http://127.0.0.1:8081/maintenance?for=15m'                   # the next 15 minutes
//	curl -X POST 'http://127.0.0.1:8081/maintenance?until=2026-11-30T14:00:00Z' # until 14:00 UTC
//	curl -X POST 'http://127.0.0.1:8081/maintenance'                           # end unknown
//	curl 'http://127.0.0.1:8081/maintenance'                                   # the state
//	curl -X DELETE 'http://127.0.0.1:8081/maintenance'                         # back to normal
//
// It counts in memory and compiles nothing but chi, x/time and retryafter, so that it starts
// quickly from a cold module cache. Replicas that share one limit through Redis are the
// README's "several replicas" section, and `go run ./_examples/metrics -redis ADDR`.
package main

import (
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"net/netip"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"golang.org/x/time/rate"

	"github.com/retryafter/retryafter"
	"github.com/retryafter/retryafter/overload"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "address to listen on")
	admin := flag.String("admin", "127.0.0.1:8081", "loopback address of the maintenance admin endpoint (empty: none)")
	dryRun := flag.Bool("dry-run", false, "refuse nothing: log each request that the limit would have refused")
	maxConcurrent := flag.Int("max-concurrent", 0, "let at most `N` requests run at once and shed the rest with 503 and a measured Retry-After (0: no such limit)")
	flag.Parse()

	maintenance := &retryafter.Maintenance{
		Exempt: func(r *http.Request) bool { return r.URL.Path == "/healthz" },
	}

	r := chi.NewRouter()
	r.Use(middleware.Logger)
	if *maxConcurrent > 0 {
		// Outside the rate limit: a request shed for want of a slot costs no quota.
		r.Use((&overload.Concurrency{Max: *maxConcurrent, Queue: 10 * *maxConcurrent, ServiceTime: 100 * time.Millisecond}).Handler)
	}
	r.Mount("/", newRouter(maintenance, newLimiter(rate.Every(time.Second), 5),
		retryafter.WithDryRun(*dryRun), retryafter.WithLimitedHook(logLimited)))

	if *admin != "" {
		if !isLoopback(*admin) {
			log.Fatalf("-admin %s: the admin endpoint has no authentication; bind it to a loopback address", *admin)
		}
		adm := &http.Server{Addr: *admin, Handler: adminHandler(maintenance), ReadHeaderTimeout: 5 * time.Second}
		go func() { log.Fatal(adm.ListenAndServe()) }()
	}

	fmt.Printf(`listening on http://%[1]s — 1 request/s per client, bursts of 5. Try:
  curl -i http://%[1]s/
  for i in $(seq 50); do curl -s -o /dev/null -w '%%{http_code} ' http://%[1]s/; done; echo
  curl -si http://%[1]s/ | grep -Ei '^(HTTP|Retry-After|Date)'
`, *addr)
	if *admin != "" {
		fmt.Printf(`maintenance admin on http://%[1]s:
  curl -X POST 'http://%[1]s/maintenance?for=15m'
  curl -X POST 'http://%[1]s/maintenance?until=%[2]s'
  curl -X DELETE 'http://%[1]s/maintenance'
`, *admin, time.Now().UTC().Add(time.Hour).Truncate(time.Hour).Format(time.RFC3339))
	}
	srv := &http.Server{Addr: *addr, Handler: r, ReadHeaderTimeout: 5 * time.Second}
	log.Fatal(srv.ListenAndServe())
}

// logLimited logs a request the limiter refused, or would have in a dry run.
func logLimited(r *http.Request, key string, d retryafter.Decision) {
	log.Printf("limited %s %s (%s plan): retry after %v", r.Method, r.URL.Path, d.Policy.Name, d.RetryAfter.Round(time.Millisecond))
}

// isLoopback reports whether addr (host:port) names a loopback address.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.IsLoopback()
}

// adminHandler serves the maintenance switch:
//
//	POST   /maintenance?for=15m                    on, ending 15 minutes from now
//	POST   /maintenance?until=2026-11-30T14:00:00Z on, ending then (RFC 3339)
//	POST   /maintenance                            on, end unknown
//	DELETE /maintenance                            off
//	GET    /maintenance                            the state
//
// POST again to announce a new end while the work runs late.
func adminHandler(m *retryafter.Maintenance) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /maintenance", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		forArg, untilArg := q.Get("for"), q.Get("until")
		var until time.Time
		switch {
		case forArg != "" && untilArg != "":
			http.Error(w, "give for or until, not both", http.StatusBadRequest)
			return
		case forArg != "":
			d, err := time.ParseDuration(forArg)
			if err != nil || d <= 0 {
				http.Error(w, "for: want a positive duration such as 15m or 2h30m", http.StatusBadRequest)
				return
			}
			until = time.Now().Add(d)
		case untilArg != "":
			t, err := time.Parse(time.RFC3339, untilArg)
			if err != nil {
				http.Error(w, "until: want an RFC 3339 time such as 2026-11-30T14:00:00Z", http.StatusBadRequest)
				return
			}
			if !t.After(time.Now()) {
				http.Error(w, "until: that time has passed", http.StatusBadRequest)
				return
			}
			until = t
		}
		m.Start(until)
		log.Printf("maintenance on, %s", describe(until))
		writeState(w, m)
	})
	mux.HandleFunc("DELETE /maintenance", func(w http.ResponseWriter, r *http.Request) {
		m.Stop()
		log.Print("maintenance off")
		writeState(w, m)
	})
	mux.HandleFunc("GET /maintenance", func(w http.ResponseWriter, r *http.Request) {
		writeState(w, m)
	})
	return mux
}

func writeState(w http.ResponseWriter, m *retryafter.Maintenance) {
	until, on := m.Until()
	if !on {
		fmt.Fprintln(w, "maintenance off")
		return
	}
	fmt.Fprintf(w, "maintenance on, %s\n", describe(until))
}

func describe(until time.Time) string {
	if until.IsZero() {
		return "end unknown"
	}
	return fmt.Sprintf("announced end %s (in %s)", until.UTC().Format(time.RFC3339), time.Until(until).Round(time.Second))
}
