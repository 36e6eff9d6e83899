package main

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"
)

// A proc is the process that serves one subject for a pair.
type proc struct {
	name string
	cmd  *exec.Cmd
	in   io.WriteCloser
	out  *bufio.Reader
	addr string
}

// startProc starts "exe serve NAME TRAFFIC" and reads the address it listens on.
func startProc(exe, name string, t traffic) (*proc, error) {
	p := &proc{name: name, cmd: exec.Command(exe, "serve", name, string(t))}
	p.cmd.Stderr = os.Stderr
	var err error
	if p.in, err = p.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	p.out = bufio.NewReader(out)
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	line, err := p.out.ReadString('\n')
	if err != nil {
		return nil, fmt.Errorf("%s server: no address: %w", name, firstErr(p.stop(), err))
	}
	p.addr = strings.TrimSpace(line)
	return p, nil
}

// cpu asks the server for its CPU time so far.
func (p *proc) cpu() (time.Duration, error) {
	if _, err := io.WriteString(p.in, "cpu\n"); err != nil {
		return 0, fmt.Errorf("%s server: %w", p.name, err)
	}
	line, err := p.out.ReadString('\n')
	if err != nil {
		return 0, fmt.Errorf("%s server: no CPU time: %w", p.name, err)
	}
	ns, err := strconv.ParseInt(strings.TrimSpace(line), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s server: CPU time: %w", p.name, err)
	}
	return time.Duration(ns), nil
}

// stop ends the server's stdin, which stops it, and waits for it to exit; after 5 seconds it
// kills it.
func (p *proc) stop() error {
	p.in.Close()
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("%s server: %w", p.name, err)
		}
		return nil
	case <-time.After(5 * time.Second):
		p.cmd.Process.Kill()
		<-done
		return fmt.Errorf("%s server: still running 5s after its stdin closed; killed", p.name)
	}
}

// A pair is what was measured of the bare server and of a subject, each in a process of its
// own, the two loaded in turn.
type pair struct{ bare, sub measurement }

// runPair starts a bare server and subject's, warms each up, then loads them in turn, cfg.slices
// times: bare, subject, bare, subject... measuring each for cfg.duration/cfg.slices after
// cfg.settle. It fails if any measured response has another status than the one its server
// owes t's traffic.
func runPair(cfg config, subject string, t traffic) (_ pair, err error) {
	bare, err := startProc(cfg.exe, "bare", t)
	if err != nil {
		return pair{}, err
	}
	defer func() { err = firstErr(err, bare.stop()) }()
	sub, err := startProc(cfg.exe, subject, t)
	if err != nil {
		return pair{}, err
	}
	defer func() { err = firstErr(err, sub.stop()) }()

	procs := []*proc{bare, sub}
	fleets := make([]*fleet, len(procs))
	tallies := make([]tally, len(procs))
	for i, p := range procs {
		fleets[i] = newFleet("http://"+p.addr+"/", cfg.conns)
		defer fleets[i].close()
		if _, err := fleets[i].slice(cfg.warmup, 0, nil); err != nil {
			return pair{}, fmt.Errorf("%s, %s traffic: %w", p.name, t, err)
		}
	}
	for range cfg.slices {
		for i, p := range procs {
			u, err := fleets[i].slice(cfg.settle, cfg.duration/time.Duration(cfg.slices), p.cpu)
			if err != nil {
				return pair{}, fmt.Errorf("%s, %s traffic: %w", p.name, t, err)
			}
			tallies[i].add(u)
		}
	}

	ms := make([]measurement, len(procs))
	for i, p := range procs {
		tl := tallies[i]
		want := wantStatus(p.name, t)
		if tl.n == 0 || tl.status[want] != tl.n {
			return pair{}, fmt.Errorf("%s, %s traffic: responses by status %v, want all %d", p.name, t, tl.status, want)
		}
		if n := fleets[i].dials.Load(); n > int64(cfg.conns) && cfg.progress != nil {
			fmt.Fprintf(cfg.progress, "%s, %s traffic: %d connections for %d clients: some were closed\n", p.name, t, n, cfg.conns)
		}
		slices.Sort(tl.lat)
		ms[i] = measurement{n: tl.n, wall: tl.wall, cpu: tl.cpu,
			p50: percentile(tl.lat, 0.50), p99: percentile(tl.lat, 0.99)}
	}
	return pair{bare: ms[0], sub: ms[1]}, nil
}

// wantStatus returns the status the server of subject name owes every measured request of t's
// traffic: 429 when a limiter meets refused traffic, 200 otherwise.
func wantStatus(name string, t traffic) int {
	if t == refused && name != "bare" {
		return http.StatusTooManyRequests
	}
	return http.StatusOK
}
