// Command smoke is the helper of traefik/ci.sh, the CI step that runs a real Traefik with this
// module's plugins. It talks to loopback addresses only.
//
//	smoke port                      print a loopback TCP port that is free now
//	smoke upstream -addr-file F     serve the upstream on 127.0.0.1, its address in F
//	smoke repaired UPSTREAM PLAIN NORMALIZED
//	                                check what clients get, directly and through Traefik's
//	                                routers without and with retryAfterNormalize
//
// The upstream answers, by path:
//
//	/httprate/...  go-chi/httprate, 1 request per 500 ms for each path: 429 with Retry-After: 0,
//	               the window's length truncated to whole seconds
//	/utc           429 with Retry-After 30 s after its Date, formatted with time.RFC1123 (zone
//	               UTC, not an HTTP-date), as sethvargo/go-limiter sends it
//	/down/...      for 3 s after the first request to each path, 503 without Retry-After, as a
//	               service that restarts; then 200
//	anything else  200
//
// It stops by itself after -for, or on SIGINT or SIGTERM. repaired exits 1 if a check fails.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-chi/httprate"

	"github.com/retryafter/retryafter"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "port":
		err = port()
	case "upstream":
		err = upstream(os.Args[2:])
	case "repaired":
		if len(os.Args) != 5 {
			usage()
		}
		err = repaired(os.Args[2], os.Args[3], os.Args[4])
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "smoke:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: smoke port | smoke upstream -addr-file FILE [-for D] | smoke repaired UPSTREAM_URL PLAIN_URL NORMALIZED_URL")
	os.Exit(2)
}

// port prints a loopback TCP port that nothing listens on.
func port() error {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer l.Close()
	fmt.Println(l.Addr().(*net.TCPAddr).Port)
	return nil
}

// upstream serves the upstream until its time is up or it is told to stop.
func upstream(args []string) error {
	fs := flag.NewFlagSet("upstream", flag.ExitOnError)
	addrFile := fs.String("addr-file", "", "write the address served to this `file`")
	lifetime := fs.Duration("for", 10*time.Minute, "stop after this long")
	_ = fs.Parse(args)
	if *addrFile == "" {
		return errors.New("upstream: -addr-file is required")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok\n") })
	byPath := httprate.LimitBy(1, 500*time.Millisecond, func(r *http.Request) (string, error) { return r.URL.Path, nil })
	mux := http.NewServeMux()
	mux.Handle("/httprate/", byPath(ok))
	mux.HandleFunc("/utc", func(w http.ResponseWriter, r *http.Request) {
		now := time.Now().UTC()
		w.Header().Set("Date", now.Format(http.TimeFormat))
		w.Header().Set("Retry-After", now.Add(30*time.Second).Format(time.RFC1123))
		http.Error(w, "Too Many Requests", http.StatusTooManyRequests)
	})
	var mu sync.Mutex
	first := map[string]time.Time{}
	mux.HandleFunc("/down/", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		since, seen := first[r.URL.Path]
		if !seen {
			since = time.Now()
			first[r.URL.Path] = since
		}
		mu.Unlock()
		if time.Since(since) < 3*time.Second {
			http.Error(w, "Service Unavailable", http.StatusServiceUnavailable)
			return
		}
		ok(w, r)
	})
	mux.Handle("/", ok)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	if err := os.WriteFile(*addrFile, []byte(l.Addr().String()), 0o644); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, *lifetime)
	defer cancel()
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	if err := srv.Serve(l); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// get sends GET url and returns the response, its body read and closed.
func get(client *http.Client, url string) (*http.Response, error) {
	resp, err := client.Get(url)
	if err != nil {
		return nil, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp, nil
}

// firstRefusal sends GET url until a response is 429, at most 20 times, and returns it.
func firstRefusal(client *http.Client, url string) (*http.Response, error) {
	for i := 0; i < 20; i++ {
		resp, err := get(client, url)
		if err != nil {
			return nil, err
		}
		if resp.StatusCode == http.StatusTooManyRequests {
			return resp, nil
		}
	}
	return nil, fmt.Errorf("%s: no 429 in 20 requests", url)
}

// show prints what a client got from url.
func show(what, url string, resp *http.Response) {
	fmt.Printf("%-22s %s: %d, Retry-After %q, Date %q\n", what, url, resp.StatusCode, resp.Header.Get("Retry-After"), resp.Header.Get("Date"))
}

// delaySeconds checks that resp has delay-seconds from lo to hi and a Date, which a strict
// parser reads as such a wait.
func delaySeconds(resp *http.Response, lo, hi int) error {
	ra, dateText := resp.Header.Get("Retry-After"), resp.Header.Get("Date")
	date, err := http.ParseTime(dateText)
	if err != nil {
		return fmt.Errorf("the Date %q is not an HTTP-date", dateText)
	}
	if n, err := strconv.Atoi(ra); err != nil || n < lo || n > hi || strconv.Itoa(n) != ra {
		return fmt.Errorf("Retry-After %q: want delay-seconds from %d to %d", ra, lo, hi)
	}
	if wait, ok := retryafter.ParseRetryAfter(resp.Header, date); !ok || wait < time.Duration(lo)*time.Second {
		return fmt.Errorf("Retry-After %q does not parse strictly as a wait of at least %ds", ra, lo)
	}
	return nil
}

// repaired checks, for each defect of the upstream, that Traefik's router without the plugin
// passes it on as it is and the router with retryAfterNormalize repairs it.
func repaired(upstreamURL, plainURL, normURL string) error {
	client := &http.Client{Timeout: 10 * time.Second}
	up, plain, norm := strings.TrimSuffix(upstreamURL, "/"), strings.TrimSuffix(plainURL, "/"), strings.TrimSuffix(normURL, "/")
	if err := repairsZero(client, up, plain, norm); err != nil {
		return err
	}
	if err := repairsUTCDate(client, plain, norm); err != nil {
		return err
	}
	return fillsMissing(client, plain, norm)
}

// repairsZero checks go-chi/httprate's Retry-After: 0, passed on as it is by the upstream and
// the plain router, and made 1 second by the normalizing one.
func repairsZero(client *http.Client, up, plain, norm string) error {
	for _, base := range []string{up, plain} {
		resp, err := firstRefusal(client, base+"/httprate/zero")
		if err != nil {
			return err
		}
		show("httprate, as it is", base, resp)
		if got := resp.Header.Get("Retry-After"); got != "0" {
			return fmt.Errorf("%s: 429 with Retry-After %q, want the 0 that httprate sends", base, got)
		}
	}
	resp, err := firstRefusal(client, norm+"/httprate/zero")
	if err != nil {
		return err
	}
	show("httprate, repaired", norm, resp)
	if err := delaySeconds(resp, 1, 1); err != nil {
		return fmt.Errorf("httprate through retryAfterNormalize: %v", err)
	}
	return nil
}

// repairsUTCDate checks a date in zone UTC, 30 s after the upstream's Date: passed on as it is
// by the plain router, and read as the end of its second by the normalizing one.
func repairsUTCDate(client *http.Client, plain, norm string) error {
	resp, err := get(client, plain+"/utc")
	if err != nil {
		return err
	}
	show("UTC date, as it is", plain, resp)
	if !strings.HasSuffix(resp.Header.Get("Retry-After"), " UTC") {
		return fmt.Errorf("%s/utc: Retry-After %q, want the upstream's date in UTC", plain, resp.Header.Get("Retry-After"))
	}
	if resp, err = get(client, norm+"/utc"); err != nil {
		return err
	}
	show("UTC date, repaired", norm, resp)
	if err := delaySeconds(resp, 31, 31); err != nil {
		return fmt.Errorf("a UTC date through retryAfterNormalize: %v", err)
	}
	return nil
}

// fillsMissing checks a 503 without Retry-After: passed on bare by the plain router, and given
// the fallback by the normalizing one, with fillMissing.
func fillsMissing(client *http.Client, plain, norm string) error {
	resp, err := get(client, plain+"/down/missing")
	if err != nil {
		return err
	}
	show("503 bare, as it is", plain, resp)
	if resp.StatusCode != http.StatusServiceUnavailable || len(resp.Header.Values("Retry-After")) != 0 {
		return fmt.Errorf("%s/down/missing: %d, Retry-After %q; want 503 without one", plain, resp.StatusCode, resp.Header.Values("Retry-After"))
	}
	if resp, err = get(client, norm+"/down/missing-too"); err != nil {
		return err
	}
	show("503 bare, repaired", norm, resp)
	if resp.StatusCode != http.StatusServiceUnavailable {
		return fmt.Errorf("%s/down/missing-too: %d, want 503", norm, resp.StatusCode)
	}
	if err := delaySeconds(resp, 5, 5); err != nil {
		return fmt.Errorf("a 503 without Retry-After through retryAfterNormalize: %v", err)
	}
	return nil
}
