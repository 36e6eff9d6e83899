// Command gateway is a reverse proxy on 127.0.0.1:8080 that repairs the Retry-After of the
// upstream it stands in front of: every client gets delay-seconds and the gateway's Date, and
// each value the upstream got wrong is logged with what the gateway understood of it.
//
//	go run ./_examples/gateway -upstream http://127.0.0.1:9090   # a real upstream
//	go run ./_examples/gateway -demo                             # the misbehaving one below
//	go run ./_examples/gateway -demo -raw   # the same proxy without the normalizer: the "before"
//
// With -demo it starts, on 127.0.0.1:8081 (-demo-addr), an upstream that gets Retry-After wrong
// in every way the normalizer repairs:
//
//	/ok       200, passed on untouched
//	/zero     429 with Retry-After: 0, a wait under a second truncated (go-chi/httprate's
//	          answer for a window under a second): clients get 1
//	/utc      429 with a Retry-After date in time.RFC1123, "UTC" (sethvargo/go-limiter's)
//	/half     429 with Retry-After: 1.5
//	/skewed   503 from a clock an hour fast: an RFC 850 Retry-After date and a Date to match
//	/bare     503 with neither Date nor Retry-After
//	/day      429 with Retry-After: 86400, above the gateway's cap of an hour
//	/garbage  503 with Retry-After: soon, which means nothing: clients get the fallback
//	/reset    429 with no Retry-After, only X-RateLimit-Reset, a Unix time 10 s on
//	          (ulule/limiter's answer): clients get Retry-After from it
//	/moved    307 with an HTTP-date Retry-After: wait before following the redirect
package main

import (
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"strconv"
	"time"

	"github.com/retryafter/retryafter/gateway"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "address of the gateway")
	upstreamURL := flag.String("upstream", "", "`URL` of the upstream to proxy, such as http://127.0.0.1:9090")
	demo := flag.Bool("demo", false, "start a deliberately misbehaving upstream and proxy it")
	demoAddr := flag.String("demo-addr", "127.0.0.1:8081", "address of the -demo upstream")
	raw := flag.Bool("raw", false, "proxy without the normalizer, to see what the upstream sends")
	exact := flag.Bool("exact-dates", false, "read the upstream's Retry-After dates as exact instants (for upstreams that round them up)")
	flag.Parse()

	var target *url.URL
	switch {
	case *demo && *upstreamURL != "":
		usage("give -upstream or -demo, not both")
	case *demo:
		ln, err := net.Listen("tcp", *demoAddr)
		if err != nil {
			log.Fatal(err)
		}
		go func() {
			srv := &http.Server{Handler: demoUpstream(), ReadHeaderTimeout: 5 * time.Second}
			log.Fatal(srv.Serve(ln))
		}()
		target = &url.URL{Scheme: "http", Host: ln.Addr().String()}
	case *upstreamURL != "":
		var err error
		if target, err = parseUpstream(*upstreamURL); err != nil {
			usage(err.Error())
		}
	default:
		usage("give the -upstream URL to proxy, or -demo")
	}

	var n *gateway.Normalizer
	mode := "passing the upstream's headers on as they are (-raw)"
	if !*raw {
		mode = "repairing Retry-After"
		n = &gateway.Normalizer{
			FillMissing: true, // a 503 without Retry-After gets the fallback too
			ExactDates:  *exact,
			OnRepair: func(r gateway.Repair) {
				log.Printf("repaired (%s, %s) %d from %s: upstream sent Retry-After %q, Date %q; read %v from %s; client got Retry-After %d",
					r.Kind, r.Leniency, r.Status, r.Request.URL, r.UpstreamRetryAfter, r.UpstreamDate,
					r.Understood, orNone(r.Field), int64(r.ClientRetryAfter/time.Second))
			},
		}
	}

	fmt.Printf("gateway on http://%s, %s, in front of %s\n", *addr, mode, target)
	if *demo {
		fmt.Printf(`Try:
  curl -i http://%[1]s/zero
  curl -i http://%[1]s/utc
  curl -i http://%[1]s/half
  curl -i http://%[1]s/skewed
  curl -i http://%[1]s/bare
  curl -i http://%[1]s/day
  curl -i http://%[1]s/garbage
  curl -i http://%[1]s/reset
  curl -i http://%[1]s/moved
  curl -i http://%[1]s/ok
`, *addr)
	}
	srv := &http.Server{Addr: *addr, Handler: newProxy(target, n), ReadHeaderTimeout: 5 * time.Second}
	log.Fatal(srv.ListenAndServe())
}

// orNone returns s, or "no field" when it is empty.
func orNone(s string) string {
	if s == "" {
		return "no field"
	}
	return s
}

func usage(msg string) {
	fmt.Fprintf(flag.CommandLine.Output(), "gateway: %s\n", msg)
	flag.Usage()
	os.Exit(2)
}

// parseUpstream parses the URL of an upstream: absolute, http or https, with a host.
func parseUpstream(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return nil, fmt.Errorf("-upstream %q: %v", s, err)
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, fmt.Errorf("-upstream %q: want an http or https URL, such as http://127.0.0.1:9090", s)
	case u.Host == "":
		return nil, errors.New("-upstream " + s + ": no host")
	}
	return u, nil
}

// newProxy returns a reverse proxy to target whose responses go through n (none when nil).
// Requests keep their path and query, appended to target's path, and carry X-Forwarded-*.
func newProxy(target *url.URL, n *gateway.Normalizer) http.Handler {
	proxy := &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) {
		r.SetURL(target)
		r.SetXForwarded()
	}}
	if n != nil {
		proxy.ModifyResponse = n.ModifyResponse
	}
	return proxy
}

// demoUpstream returns the handler of a service that gets Retry-After wrong in every way the
// normalizer repairs.
func demoUpstream() http.Handler {
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
		http.Error(w, "slow down", http.StatusTooManyRequests)
	})
	mux.HandleFunc("/half", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "1.5")
		http.Error(w, "slow down", http.StatusTooManyRequests)
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
	mux.HandleFunc("/garbage", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "soon")
		http.Error(w, "overloaded", http.StatusServiceUnavailable)
	})
	mux.HandleFunc("/reset", func(w http.ResponseWriter, r *http.Request) {
		// No Retry-After: the window's end as a Unix time, cut to the second, as ulule/limiter,
		// GitHub and Tyk send it.
		w.Header().Set("X-RateLimit-Reset", strconv.FormatInt(time.Now().Add(10*time.Second).Unix(), 10))
		http.Error(w, "Limit exceeded", http.StatusTooManyRequests)
	})
	mux.HandleFunc("/moved", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", time.Now().UTC().Add(10*time.Second).Format(http.TimeFormat))
		http.Redirect(w, r, "/ok", http.StatusTemporaryRedirect)
	})
	return mux
}
