// Command gateway is a reverse proxy on 127.0.0.1:8080 that repairs the Retry-After of a
// deliberately misbehaving upstream, which it starts itself on 127.0.0.1:8081:
//
//	/ok       200, passed on untouched
//	/zero     429 with Retry-After: 0
//	/utc      503 with a Retry-After date formatted with time.RFC1123 ("UTC", not an HTTP-date)
//	/skewed   503 from a clock an hour fast: an RFC 850 Retry-After date and a Date to match
//	/bare     503 with neither Date nor Retry-After
//	/day      429 with Retry-After: 86400, above the gateway's cap of an hour
//	/moved    307 with an HTTP-date Retry-After: wait before following the redirect
//
// Run it, then compare what the upstream sends with what clients of the gateway get:
//
//	go run ./_examples/gateway
//	go run ./_examples/gateway -raw   # the same proxy without the normalizer: the "before"
package main

import (
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"time"

	"github.com/retryafter/retryafter/gateway"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "address of the gateway")
	upstreamAddr := flag.String("upstream", "127.0.0.1:8081", "address of the misbehaving upstream")
	raw := flag.Bool("raw", false, "proxy without the normalizer, to see what the upstream sends")
	flag.Parse()

	ln, err := net.Listen("tcp", *upstreamAddr)
	if err != nil {
		log.Fatal(err)
	}
	go func() {
		srv := &http.Server{Handler: upstream(), ReadHeaderTimeout: 5 * time.Second}
		log.Fatal(srv.Serve(ln))
	}()

	target := &url.URL{Scheme: "http", Host: ln.Addr().String()}
	proxy := &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) {
		r.SetURL(target)
		r.SetXForwarded()
	}}
	mode := "repairing Retry-After"
	if *raw {
		mode = "passing the upstream's headers on as they are (-raw)"
	} else {
		proxy.ModifyResponse = (&gateway.Normalizer{
			FillMissing: true, // a 503 without Retry-After gets the fallback too
			OnRepair: func(r gateway.Repair) {
				log.Printf("repaired (%s) %d from %s: upstream sent Retry-After %q, Date %q; client got Retry-After %d",
					r.Kind, r.Status, r.Request.URL, r.UpstreamRetryAfter, r.UpstreamDate,
					int64(r.ClientRetryAfter/time.Second))
			},
		}).ModifyResponse
	}

	fmt.Printf(`gateway on http://%[1]s, %[3]s, in front of the upstream on http://%[2]s. Try:
  curl -i http://%[1]s/zero
  curl -i http://%[1]s/utc
  curl -i http://%[1]s/skewed
  curl -i http://%[1]s/bare
  curl -i http://%[1]s/day
  curl -i http://%[1]s/moved
  curl -i http://%[1]s/ok
`, *addr, ln.Addr(), mode)
	srv := &http.Server{Addr: *addr, Handler: proxy, ReadHeaderTimeout: 5 * time.Second}
	log.Fatal(srv.ListenAndServe())
}

// upstream returns the handler of a service that gets Retry-After wrong in every way the
// normalizer repairs.
func upstream() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/ok", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "hello")
	})
	mux.HandleFunc("/zero", func(w http.ResponseWriter, r *http.Request) {
		// A wait of 400 ms, truncated to whole seconds.
		w.Header().Set("Retry-After", "0")
		http.Error(w, "slow down", http.StatusTooManyRequests)
	})
	mux.HandleFunc("/utc", func(w http.ResponseWriter, r *http.Request) {
		// time.RFC1123 prints "UTC": not an HTTP-date, so strict clients cannot read it.
		w.Header().Set("Retry-After", time.Now().UTC().Add(2*time.Minute).Format(time.RFC1123))
		http.Error(w, "maintenance", http.StatusServiceUnavailable)
	})
	mux.HandleFunc("/skewed", func(w http.ResponseWriter, r *http.Request) {
		// A clock an hour fast, and the obsolete RFC 850 format, which recipients must accept.
		now := time.Now().UTC().Add(time.Hour)
		w.Header().Set("Date", now.Format(http.TimeFormat))
		w.Header().Set("Retry-After", now.Add(90*time.Second).Format("Monday, 02-Jan-06 15:04:05 GMT"))
		http.Error(w, "maintenance", http.StatusServiceUnavailable)
	})
	mux.HandleFunc("/bare", func(w http.ResponseWriter, r *http.Request) {
		w.Header()["Date"] = nil // RFC 9110 allows a 5xx without Date; net/http would add one
		http.Error(w, "overloaded", http.StatusServiceUnavailable)
	})
	mux.HandleFunc("/day", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "86400")
		http.Error(w, "quota exhausted", http.StatusTooManyRequests)
	})
	mux.HandleFunc("/moved", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", time.Now().UTC().Add(10*time.Second).Format(http.TimeFormat))
		http.Redirect(w, r, "/ok", http.StatusTemporaryRedirect)
	})
	return mux
}
