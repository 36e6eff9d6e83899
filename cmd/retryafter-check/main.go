// Command retryafter-check tells whether an API's Retry-After can be trusted.
//
//	go run github.com/retryafter/retryafter/cmd/retryafter-check@latest https://api.example.test/v1/things
//
// It sends requests to that one URL, no closer together than -pace, until one is refused with
// 429 Too Many Requests or 503 Service Unavailable, and then checks what the refusal told, as
// a client that obeys it would experience it:
//
//	retry-after   Retry-After is present, delay-seconds (1*DIGIT) or an IMF-fixdate, and never
//	              a wait of 0: neither "0" nor a date at or before Date
//	date          Date is present, an IMF-fixdate, and within a minute of the probe's clock
//	obey          waiting exactly what Retry-After said, a retry is admitted; a date is obeyed
//	              at its instant by the probe's clock, as clients obey it, corrected only by a
//	              skew that Date proves
//	tight         a retry one second earlier is refused: the wait is not padded (a wait of one
//	              second cannot be judged: one second earlier is at once); again in a later
//	              round, with the quota spent later in a window (see below). The retry is aimed
//	              0.1 s earlier still, and judged by when it went: admitted less than a second
//	              early, as the probe's own lateness can make it, it is n/a, since a limiter
//	              that rounds its wait up may admit it
//	refusal-free  that refused early retry cost nothing: waiting the rest is then admitted
//	head          HEAD, right after a refused GET, is refused alike, with a wait that agrees;
//	              a HEAD answered 405 or 501 is not served, and says nothing, nor does one
//	              that went after the wait GET told had run out (a tarpit's slow refusal)
//	cors          with -origin, a browser script of that origin can read Retry-After
//	ratelimit     the RateLimit and RateLimit-Policy fields, if any, parse (RFC 9651 Lists,
//	              draft-ietf-httpapi-ratelimit-headers) and agree with Retry-After; so do the
//	              RateLimit-Limit, -Remaining and -Reset of its drafts up to 06; the
//	              X-RateLimit-* fields of no standard are shown, and their Reset (an epoch
//	              time, seconds or a date) must agree with Retry-After where the quota is spent
//
// The retry-after, date, cors and ratelimit checks judge every refusal of the run, those of the
// retries and of HEAD too; the report shows the first that failed, and how many did.
//
// A retry is admitted when it is answered 2xx, or 4xx other than a refusal; a 3xx or a 5xx
// other than a refusal is neither, and leaves its check n/a. A retry that goes more than half a
// second after its instant is judged by when it went: obey fails when the refusal it obeys held
// it back (a server that trickles the body of a refusal holds a client back alike), and is n/a
// when the probe itself went late; tight and refusal-free are n/a.
//
// The later round: where the quota runs out at the start of a window, as it does at the
// probe's pace, the whole window is the wait, and a limiter that always tells the whole window
// passes tight. So after tight passed on a refusal that spent a quota (a 429, or a 503 after
// admissions) whose first wait was 3 s or more (6 s for a date), the probe waits half that
// wait past the last admission, spends the quota again, and retries a second before the wait
// then told. That costs the quota again plus two requests, and about one and a half times the
// first wait; -skip-later skips it. When it would pass -timeout or -budget, the probe gives up
// (exit 3) rather than pass a wait it did not check; when it cannot judge (no admission to
// start from, a 5xx, its own retry late), tight is n/a.
//
// A 503 of a maintenance window, refused from the first request, is checked the same way, but
// for the later round; point the probe at one while it is on and give -timeout room for the
// window to end.
//
// It prints a table, or with -json one JSON object, and says how many requests it sent, in how
// long, against which budgets. A first request already refused with 429 is reported too:
// earlier traffic had spent the quota, and what it still spends can make a retry fail. It
// never sends more than -budget requests nor runs much past -timeout, sends every request to
// the URL given, and follows no redirect, to another host or any other. Of each response it
// keeps only the fields a check reads, at most 16 KB of them, so that its memory stays bounded
// whatever a server sends. Against a fixed window of 3 requests per 10 s, a run sends 16
// requests in 30 s, of which the later round 4 in 9 s; against 5 requests and then 1 a second,
// 12 requests in 2.4 s, with no later round (go test -v -run 'TestPaddedWait|TestProbe/ours$'
// ./cmd/retryafter-check prints each run's report).
//
// Exit codes: 0 every check that applies passed; 1 a check failed; 2 the command line is wrong;
// 3 the probe could not run or gave up (no refusal within the budgets, a redirect, a network
// error), and no check failed.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strings"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr, nil)
	stop()
	os.Exit(code)
}

// headerFlags collects -H flags.
type headerFlags http.Header

func (h headerFlags) String() string { return "" }

func (h headerFlags) Set(v string) error {
	name, value, ok := strings.Cut(v, ":")
	name = strings.TrimSpace(name)
	if !ok || name == "" || strings.ContainsAny(name, " \t") {
		return fmt.Errorf("want Name: value, got %q", v)
	}
	http.Header(h).Add(name, strings.TrimSpace(value))
	return nil
}

// run is the command with its arguments and outputs; rt sends the requests (nil: the default
// transport). It returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, rt http.RoundTripper) int {
	fs := flag.NewFlagSet("retryafter-check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: retryafter-check [flags] URL\n\n"+
			"Sends requests to URL until one is refused with 429 or 503, then checks its Retry-After.\n"+
			"Exit codes: 0 passed, 1 a check failed, 2 usage, 3 could not run or gave up.\n\nflags:\n")
		fs.PrintDefaults()
	}
	p := Probe{Header: make(http.Header)}
	fs.StringVar(&p.Method, "X", "GET", "the request `method`")
	fs.Var(headerFlags(p.Header), "H", "a request header, `Name: value` (repeatable)")
	body := fs.String("d", "", "the request `body`, or @file to read it from a file")
	fs.StringVar(&p.Origin, "origin", "", "send Origin: `ORIGIN` and check that a browser script of it can read Retry-After")
	fs.IntVar(&p.Budget, "budget", defaultBudget, "the most `requests` to send")
	fs.DurationVar(&p.Pace, "pace", defaultPace, "the least `time` between requests while seeking a refusal")
	fs.DurationVar(&p.Timeout, "timeout", defaultTimeout, "the time budget of the whole run")
	fs.BoolVar(&p.SkipLater, "skip-later", false, "skip the later round, which spends the quota again later in a window to find a padded wait")
	jsonOut := fs.Bool("json", false, "print one JSON object instead of a table")

	// Flags may come before or after the URL.
	if err := fs.Parse(args); err != nil {
		return parseExit(err)
	}
	rest := fs.Args()
	if len(rest) > 0 {
		p.URL = rest[0]
		if err := fs.Parse(rest[1:]); err != nil {
			return parseExit(err)
		}
		rest = fs.Args()
	}
	switch {
	case p.URL == "" || len(rest) > 0:
		fs.Usage()
		return exitUsage
	case p.Budget < 1:
		return usageError(stderr, "-budget must be at least 1")
	case p.Pace <= 0:
		return usageError(stderr, "-pace must be above 0")
	case p.Timeout <= 0:
		return usageError(stderr, "-timeout must be above 0")
	}
	if err := p.validate(); err != nil {
		return usageError(stderr, err.Error())
	}
	if name, ok := strings.CutPrefix(*body, "@"); ok {
		b, err := os.ReadFile(name)
		if err != nil {
			return usageError(stderr, err.Error())
		}
		p.Body = b
	} else if *body != "" {
		p.Body = []byte(*body)
	}
	p.Transport = rt

	rep := p.Run(ctx)
	write := writeTable
	if *jsonOut {
		write = writeJSON
	}
	if err := write(stdout, rep); err != nil {
		fmt.Fprintln(stderr, "retryafter-check:", err)
		return exitGaveUp
	}
	return rep.Exit
}

// parseExit is the exit code after the flags failed to parse: 0 when help was asked for.
func parseExit(err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return exitPass
	}
	return exitUsage
}

func usageError(stderr io.Writer, msg string) int {
	fmt.Fprintln(stderr, "retryafter-check:", msg)
	return exitUsage
}
