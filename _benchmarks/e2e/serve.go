package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/httprate"
	"github.com/sethvargo/go-limiter/httplimit"
	"github.com/sethvargo/go-limiter/memorystore"
	"golang.org/x/time/rate"

	"github.com/retryafter/retryafter"
	benchmarks "github.com/retryafter/retryafter/_benchmarks"
)

// traffic names what the load generator's requests meet.
type traffic string

const (
	// allowed traffic has plenty of quota: every request is admitted.
	allowed traffic = "allowed"
	// refused traffic meets an empty bucket: every request after the first is refused (429).
	refused traffic = "refused"
)

// A policy is what every limiter is configured with, each in its own terms.
type policy struct {
	n     int           // requests per period
	per   time.Duration // the period
	burst int           // the token bucket's size, for the limiters that have one
}

func (p policy) limit() rate.Limit { return rate.Limit(float64(p.n) / p.per.Seconds()) }

// policyFor returns the policy of t: 2^30 requests an hour in bursts of 2^30 for allowed
// traffic, one an hour for refused traffic (no run lasts long enough to see a second one).
func policyFor(t traffic) policy {
	if t == refused {
		return policy{n: 1, per: time.Hour, burst: 1}
	}
	return policy{n: 1 << 30, per: time.Hour, burst: 1 << 30}
}

// A subject is one server the comparison measures: the same chi router and handler, behind
// middleware (none for bare).
type subject struct {
	name  string
	title string // the table's row
	// middleware returns the limiter for p and what releases it; nil for the bare server.
	middleware func(p policy) (mw func(http.Handler) http.Handler, close func(), err error)
	// only is the one kind of traffic the subject makes sense under; "" for both.
	only traffic
}

func none() {}

// subjects are every server the driver can measure, in the table's order. Every limiter
// names the client by hostKey, as in compare_test.go, except retryafter-defaultkey.
var subjects = []subject{
	{name: "bare", title: "bare chi server, again (A/A control)"},
	{name: "baseline", title: "**baseline**: `map[string]*rate.Limiter` + `sync.Mutex` + `Allow()`",
		middleware: func(p policy) (func(http.Handler) http.Handler, func(), error) {
			return func(next http.Handler) http.Handler {
				return benchmarks.NewBaseline(p.limit(), p.burst, hostKey, next)
			}, none, nil
		}},
	{name: "retryafter", title: "**retryafter** `Limit`",
		middleware: func(p policy) (func(http.Handler) http.Handler, func(), error) {
			return retryafter.Limit(p.limit(), p.burst, retryafter.WithKeyFunc(hostKey)), none, nil
		}},
	{name: "retryafter-defaultkey", title: "retryafter `Limit`, default key function (`ClientIP()`)",
		middleware: func(p policy) (func(http.Handler) http.Handler, func(), error) {
			return retryafter.Limit(p.limit(), p.burst), none, nil
		}},
	{name: "refusal", title: "no limiter: every request gets a 429 like retryafter's (the response alone)", only: refused,
		middleware: func(policy) (func(http.Handler) http.Handler, func(), error) {
			return func(http.Handler) http.Handler { return http.HandlerFunc(refuse) }, none, nil
		}},
	{name: "httprate", title: "go-chi/httprate v0.16.1",
		middleware: func(p policy) (func(http.Handler) http.Handler, func(), error) {
			return httprate.LimitBy(p.n, p.per, hostKey), none, nil
		}},
	{name: "go-limiter", title: "sethvargo/go-limiter v0.7.1 (memorystore)",
		middleware: func(p policy) (func(http.Handler) http.Handler, func(), error) {
			store, err := memorystore.New(&memorystore.Config{Tokens: uint64(p.n), Interval: p.per})
			if err != nil {
				return nil, nil, err
			}
			m, err := httplimit.NewMiddleware(store, httplimit.KeyFunc(hostKey))
			if err != nil {
				return nil, nil, err
			}
			return m.Handle, func() { store.Close(context.Background()) }, nil
		}},
}

// refuse answers as retryafter refuses a request: 429 with Date, Retry-After, Content-Type,
// X-Content-Type-Options and a short body.
func refuse(w http.ResponseWriter, _ *http.Request) {
	h := w.Header()
	h["Date"] = []string{time.Now().UTC().Format(http.TimeFormat)}
	h["Retry-After"] = []string{"3600"}
	http.Error(w, http.StatusText(http.StatusTooManyRequests), http.StatusTooManyRequests)
}

// lookup returns the subject called name.
func lookup(name string) (subject, error) {
	var names []string
	for _, s := range subjects {
		if s.name == name {
			return s, nil
		}
		names = append(names, s.name)
	}
	return subject{}, fmt.Errorf("no subject %q (there are %s)", name, strings.Join(names, ", "))
}

// hostKey names a client by RemoteAddr without its port.
func hostKey(r *http.Request) (string, error) {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	return host, err
}

// newHandler returns s's chi router for t's policy: GET / answers 200 "ok\n" once admitted.
func newHandler(s subject, t traffic) (http.Handler, func(), error) {
	r := chi.NewRouter()
	closeFn := none
	if s.middleware != nil {
		mw, c, err := s.middleware(policyFor(t))
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", s.name, err)
		}
		r.Use(mw)
		closeFn = c
	}
	r.Get("/", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") })
	return r, closeFn, nil
}

// serve is the server process of a pair: it serves subject name with t's policy on a loopback
// port, writes the address as one line to stdout, then answers each line of stdin with its own
// CPU time in nanoseconds (one line), and stops when stdin ends.
func serve(name string, t traffic, stdin io.Reader, stdout io.Writer) error {
	if t != allowed && t != refused {
		return fmt.Errorf("traffic %q: want %s or %s", t, allowed, refused)
	}
	s, err := lookup(name)
	if err != nil {
		return err
	}
	h, closeFn, err := newHandler(s, t)
	if err != nil {
		return err
	}
	defer closeFn()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	ended := make(chan error, 1)
	go func() { ended <- answerCPU(ln.Addr().String(), stdin, stdout) }()
	select {
	case err := <-served:
		return err
	case err := <-ended:
		if cerr := srv.Close(); cerr != nil && err == nil {
			err = cerr
		}
		return err
	}
}

// answerCPU writes addr, then answers every line of in with the process's CPU time.
func answerCPU(addr string, in io.Reader, out io.Writer) error {
	if _, err := fmt.Fprintln(out, addr); err != nil {
		return err
	}
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		cpu, err := cpuTime()
		if err != nil {
			return err
		}
		if _, err := fmt.Fprintln(out, cpu.Nanoseconds()); err != nil {
			return err
		}
	}
	return sc.Err()
}
