// Command smoke is the helper of caddy/ci.sh, the CI step that runs a real Caddy built with
// this module. It talks to loopback addresses only.
//
//	smoke port                        print a loopback TCP port that is free now
//	smoke upstream -addr-file F       serve an httprate upstream on 127.0.0.1, its address in F
//	smoke repaired UPSTREAM GATEWAY   check that the gateway repairs the upstream's Retry-After: 0
//
// The upstream is go-chi/httprate limiting all its clients to 1 request per 500 ms, which answers
// 429 with Retry-After: 0, the window's length truncated to whole seconds. It stops by itself
// after -for, or on SIGINT or SIGTERM.
//
// repaired sends requests, at most 20 to each, first to the upstream until one is refused and
// checks that it says Retry-After: 0, then to the gateway, which proxies to the upstream, until
// one is refused and checks that the client gets a Retry-After of at least 1 second, in
// delay-seconds, and a Date. It exits 1 if a check fails.
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
		if len(os.Args) != 4 {
			usage()
		}
		err = repaired(os.Args[2], os.Args[3])
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "smoke:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: smoke port | smoke upstream -addr-file FILE [-for D] | smoke repaired UPSTREAM_URL GATEWAY_URL")
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

// upstream serves the httprate upstream until its time is up or it is told to stop.
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
	// One counter for every request: the step is the upstream's only client, directly and
	// through Caddy alike.
	h := httprate.LimitBy(1, 500*time.Millisecond, httprate.Key("*"))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok\n")
	}))
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
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

// firstRefusal sends GET url until a response is 429, at most 20 times, and returns it.
func firstRefusal(client *http.Client, url string) (*http.Response, error) {
	for i := 0; i < 20; i++ {
		resp, err := client.Get(url)
		if err != nil {
			return nil, err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusTooManyRequests {
			return resp, nil
		}
	}
	return nil, fmt.Errorf("%s: no 429 in 20 requests", url)
}

// repaired checks that the upstream sends Retry-After: 0 and the gateway in front of it turns
// that into a usable Retry-After with a Date.
func repaired(upstreamURL, gatewayURL string) error {
	client := &http.Client{Timeout: 10 * time.Second}
	resp, err := firstRefusal(client, upstreamURL)
	if err != nil {
		return err
	}
	if got := resp.Header.Get("Retry-After"); got != "0" {
		return fmt.Errorf("the upstream itself: 429 with Retry-After %q, want the 0 it is here to send", got)
	}
	fmt.Printf("upstream %s: 429, Retry-After %q, Date %q\n", upstreamURL, resp.Header.Get("Retry-After"), resp.Header.Get("Date"))

	resp, err = firstRefusal(client, gatewayURL)
	if err != nil {
		return err
	}
	ra, dateText := resp.Header.Get("Retry-After"), resp.Header.Get("Date")
	fmt.Printf("gateway  %s: 429, Retry-After %q, Date %q\n", gatewayURL, ra, dateText)
	date, err := http.ParseTime(dateText)
	if err != nil {
		return fmt.Errorf("the gateway's Date %q is not an HTTP-date", dateText)
	}
	if n, err := strconv.Atoi(ra); err != nil || n < 1 || strconv.Itoa(n) != ra {
		return fmt.Errorf("the gateway's Retry-After %q: want delay-seconds of at least 1", ra)
	}
	if wait, ok := retryafter.ParseRetryAfter(resp.Header, date); !ok || wait < time.Second {
		return fmt.Errorf("the gateway's Retry-After %q does not parse strictly as a wait of at least 1s", ra)
	}
	return nil
}
