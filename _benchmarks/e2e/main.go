// Command e2e compares rate limiters end to end: the same chi server with no limiter (bare), the
// hand-written baseline (map[string]*rate.Limiter + sync.Mutex + Allow), retryafter.Limit,
// go-chi/httprate and sethvargo/go-limiter, each served by a process of its own on loopback and
// driven by a closed loop of net/http clients, each with one keep-alive connection. Under
// refused traffic, a server with no limiter that answers every request with a 429 like
// retryafter's shows what the response alone costs.
//
// Every subject is measured in a pair with a bare server: the two are loaded in turn, in short
// slices (bare, subject, bare, subject...), so that each slice of the subject comes right after
// one of the bare server and both meet the same spells of a busy machine. Each figure is the
// subject's divided by the bare server's. A pair whose subject is the bare server itself (the
// A/A control) shows how far two identical servers differ. The pairs run in a shuffled order,
// in rounds, for allowed traffic (plenty of quota) and refused traffic (an empty bucket: 429s).
// It measures the server process's CPU time per request (getrusage, which the server reports
// when asked on its stdin), requests per second, and the p50 and p99 latency the clients saw,
// and prints a Markdown table on stdout and its progress on stderr.
//
//	cd _benchmarks && go run ./e2e                       # about 4 minutes
//	go run ./e2e -rounds 3 -duration 1s                  # quicker, noisier
//	go run ./e2e -subjects retryafter,retryafter-defaultkey -traffic allowed -raw runs.csv
package main

import (
	"flag"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"time"
)

// config is one comparison's settings.
type config struct {
	exe      string // the program a server process runs, as "exe serve NAME TRAFFIC"
	subjects []string
	traffics []traffic
	rounds   int
	conns    int
	warmup   time.Duration // load on each server of a pair before its first slice
	slices   int           // slices of each server in a pair
	settle   time.Duration // load before each slice's measurement starts
	duration time.Duration // measured time of each server in a pair, over all its slices
	seed     uint64
	progress io.Writer // a line per pair; nil for none
	raw      io.Writer // a CSV line per server per pair; nil for none
}

func main() {
	log.SetFlags(0)
	log.SetPrefix("e2e: ")
	if serverMain() {
		return
	}

	subjectsFlag := flag.String("subjects", "baseline,retryafter,refusal,httprate,go-limiter",
		"comma-separated `subjects` besides the A/A control; also: retryafter-defaultkey")
	trafficFlag := flag.String("traffic", "allowed,refused", "comma-separated kinds of `traffic`: allowed, refused")
	rounds := flag.Int("rounds", 5, "rounds: each runs every pair once, in a new shuffled order")
	conns := flag.Int("conns", 8, "clients, each with one keep-alive connection and one request at a time")
	warmup := flag.Duration("warmup", 100*time.Millisecond, "load on each server of a pair before its first slice")
	nslices := flag.Int("slices", 8, "slices of each server in a pair")
	settle := flag.Duration("settle", 20*time.Millisecond, "load before each slice's measurement starts")
	duration := flag.Duration("duration", 2*time.Second, "measured time of each server in a pair, over all its slices")
	seed := flag.Uint64("seed", 0, "seed of the shuffles (0: from the clock)")
	rawFile := flag.String("raw", "", "write each server's figures in each pair, as CSV, to `file`")
	flag.Parse()
	if flag.NArg() > 0 {
		log.Fatalf("unexpected arguments %q", flag.Args())
	}

	exe, err := os.Executable()
	if err != nil {
		log.Fatal(err)
	}
	cfg := config{exe: exe, rounds: *rounds, conns: *conns, warmup: *warmup, slices: *nslices,
		settle: *settle, duration: *duration, seed: *seed, progress: os.Stderr}
	if cfg.seed == 0 {
		cfg.seed = uint64(time.Now().UnixNano())
	}
	if cfg.subjects, err = parseSubjects(*subjectsFlag); err != nil {
		log.Fatal(err)
	}
	if cfg.traffics, err = parseTraffic(*trafficFlag); err != nil {
		log.Fatal(err)
	}
	if cfg.rounds < 1 || cfg.conns < 1 || cfg.slices < 1 || cfg.duration < time.Duration(cfg.slices)*time.Millisecond || cfg.warmup < 0 || cfg.settle < 0 {
		log.Fatal("want -rounds, -conns and -slices of at least 1, a -duration of at least a millisecond a slice, and no negative -warmup or -settle")
	}
	if *rawFile != "" {
		f, err := os.Create(*rawFile)
		if err != nil {
			log.Fatal(err)
		}
		defer f.Close()
		cfg.raw = f
	}

	fmt.Fprintf(os.Stderr, "%d pairs: about %v; seed %d\n", cfg.pairs(), cfg.estimate().Round(time.Second), cfg.seed)
	start := time.Now()
	res, err := drive(cfg)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Fprintf(os.Stderr, "took %v\n", time.Since(start).Round(time.Second))
	res.markdown(os.Stdout, cfg)
}

// serverMain serves, and reports true, when this process is the server of a pair, started as
// "e2e serve SUBJECT TRAFFIC".
func serverMain() bool {
	if len(os.Args) != 4 || os.Args[1] != "serve" {
		return false
	}
	if err := serve(os.Args[2], traffic(os.Args[3]), os.Stdin, os.Stdout); err != nil {
		log.Fatal(err)
	}
	return true
}

// parseSubjects returns the subjects named in list, known and each once; the A/A control
// always runs, so "bare" is left out.
func parseSubjects(list string) ([]string, error) {
	var out []string
	for name := range strings.SplitSeq(list, ",") {
		if name = strings.TrimSpace(name); name == "" || name == "bare" || slices.Contains(out, name) {
			continue
		}
		if _, err := lookup(name); err != nil {
			return nil, err
		}
		out = append(out, name)
	}
	return out, nil
}

// parseTraffic returns the kinds of traffic named in list, each once; at least one.
func parseTraffic(list string) ([]traffic, error) {
	var out []traffic
	for t := range strings.SplitSeq(list, ",") {
		switch t := traffic(strings.TrimSpace(t)); t {
		case allowed, refused:
			if !slices.Contains(out, t) {
				out = append(out, t)
			}
		case "":
		default:
			return nil, fmt.Errorf("-traffic: %q is neither %s nor %s", t, allowed, refused)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("-traffic: none in %q", list)
	}
	return out, nil
}

// cells returns the rows of the table cfg runs, in its order: for each kind of traffic, the
// A/A control, then each subject that makes sense under it.
func (cfg config) cells() []cell {
	var cells []cell
	for _, t := range cfg.traffics {
		for _, name := range append([]string{"bare"}, cfg.subjects...) {
			if s, _ := lookup(name); s.only == "" || s.only == t {
				cells = append(cells, cell{t, name})
			}
		}
	}
	return cells
}

// pairs returns how many pairs cfg runs.
func (cfg config) pairs() int { return cfg.rounds * len(cfg.cells()) }

// estimate returns about how long cfg takes.
func (cfg config) estimate() time.Duration {
	const (
		start = 50 * time.Millisecond // a server process's start and stop, about
		turn  = 20 * time.Millisecond // starting and stopping a slice's clients, about
	)
	perServer := start + cfg.warmup + time.Duration(cfg.slices)*(turn+cfg.settle) + cfg.duration
	return time.Duration(cfg.pairs()) * 2 * perServer
}

// A cell is one row of the table: a subject under one kind of traffic.
type cell struct {
	t       traffic
	subject string
}

// results holds every pair, by cell, in the order they ran.
type results struct {
	pairs map[cell][]pair
}

// drive runs cfg's rounds: in each, every cell's pair once, in an order shuffled anew.
func drive(cfg config) (*results, error) {
	rng := rand.New(rand.NewPCG(cfg.seed, cfg.seed>>32))
	res := &results{pairs: map[cell][]pair{}}
	if cfg.raw != nil {
		fmt.Fprintln(cfg.raw, "round,order,traffic,subject,server,requests,seconds,server_cpu_ns,cpu_ns_per_request,requests_per_second,p50_ns,p99_ns")
	}
	for round := 1; round <= cfg.rounds; round++ {
		cells := cfg.cells()
		rng.Shuffle(len(cells), func(i, j int) { cells[i], cells[j] = cells[j], cells[i] })
		for i, c := range cells {
			p, err := runPair(cfg, c.subject, c.t)
			if err != nil {
				return nil, err
			}
			res.pairs[c] = append(res.pairs[c], p)
			if cfg.raw != nil {
				p.bare.csv(cfg.raw, round, i+1, c.t, c.subject, "bare")
				p.sub.csv(cfg.raw, round, i+1, c.t, c.subject, c.subject)
			}
			if cfg.progress != nil {
				fmt.Fprintf(cfg.progress, "round %d/%d, pair %d/%d, %s %s:", round, cfg.rounds, i+1, len(cells), c.t, c.subject)
				for _, m := range metrics {
					fmt.Fprintf(cfg.progress, " %s %s,", m.short, times(m.of(p.sub)/m.of(p.bare)))
				}
				fmt.Fprintf(cfg.progress, " bare: %s CPU/request, %s requests/s\n", micros(p.bare.cpuPerRequest()), thousands(p.bare.rps()))
			}
		}
	}
	return res, nil
}
