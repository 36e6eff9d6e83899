package main

import (
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"
)

// A measurement is what was measured of one server in a pair, over all its slices.
type measurement struct {
	n        int           // requests completed while measuring
	wall     time.Duration // how long it was measured
	cpu      time.Duration // the server process's CPU time meanwhile
	p50, p99 time.Duration // latency, as the clients saw it
}

// cpuPerRequest returns the server's CPU time per request, in nanoseconds.
func (m measurement) cpuPerRequest() float64 { return float64(m.cpu) / float64(m.n) }

// rps returns the requests completed per second.
func (m measurement) rps() float64 { return float64(m.n) / m.wall.Seconds() }

func (m measurement) csv(w io.Writer, round, order int, t traffic, subject, server string) {
	fmt.Fprintf(w, "%d,%d,%s,%s,%s,%d,%.3f,%d,%.0f,%.0f,%d,%d\n", round, order, t, subject, server,
		m.n, m.wall.Seconds(), m.cpu.Nanoseconds(), m.cpuPerRequest(), m.rps(), m.p50.Nanoseconds(), m.p99.Nanoseconds())
}

// metrics are the table's columns.
var metrics = []struct {
	title, short string
	of           func(measurement) float64
}{
	{"server CPU / request", "CPU", measurement.cpuPerRequest},
	{"requests / s", "req/s", measurement.rps},
	{"p50 latency", "p50", func(m measurement) float64 { return float64(m.p50) }},
	{"p99 latency", "p99", func(m measurement) float64 { return float64(m.p99) }},
}

// markdown writes the table: for every cell and metric, the median over the rounds of the
// subject's figure divided by the bare server's in the same pair, and their range; then the
// bare server's own figures.
func (r *results) markdown(w io.Writer, cfg config) {
	fmt.Fprintf(w, "Machine: %s, %s/%s, %d cores, %s. %d clients, one keep-alive connection each; %d rounds; in each pair, %v of warm-up for each server, then %d slices of each, %v of load and %v measured.\n\n",
		cpuModel(), runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.Version(),
		cfg.conns, cfg.rounds, cfg.warmup, cfg.slices, cfg.settle, cfg.duration/time.Duration(cfg.slices))
	fmt.Fprint(w, "| traffic | server |")
	for _, m := range metrics {
		fmt.Fprintf(w, " %s |", m.title)
	}
	fmt.Fprint(w, "\n| --- | --- |")
	for range metrics {
		fmt.Fprint(w, " --: |")
	}
	fmt.Fprintln(w)
	for _, t := range cfg.traffics {
		for _, s := range subjects {
			ps, ok := r.pairs[cell{t, s.name}]
			if !ok {
				continue
			}
			fmt.Fprintf(w, "| %s | %s |", t, s.title)
			for _, m := range metrics {
				ratios := make([]float64, len(ps))
				for i, p := range ps {
					ratios[i] = m.of(p.sub) / m.of(p.bare)
				}
				fmt.Fprintf(w, " %s |", spread(ratios))
			}
			fmt.Fprintln(w)
		}
	}
	fmt.Fprint(w, "\nThe bare chi server itself, medians over the pairs:\n\n")
	for _, t := range cfg.traffics {
		var bare []measurement
		for c, ps := range r.pairs {
			if c.t == t {
				for _, p := range ps {
					bare = append(bare, p.bare)
				}
			}
		}
		of := func(f func(measurement) float64) float64 {
			v := make([]float64, len(bare))
			for i, m := range bare {
				v[i] = f(m)
			}
			return median(v)
		}
		fmt.Fprintf(w, "- %s traffic (%d pairs): %s of server CPU per request, %s requests/s, p50 %s, p99 %s.\n",
			t, len(bare), micros(of(metrics[0].of)), thousands(of(metrics[1].of)), micros(of(metrics[2].of)), micros(of(metrics[3].of)))
	}
}

// percentile returns the p-th quantile of sorted, by the nearest rank; 0 if it is empty.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(float64(len(sorted))*p)) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// median returns the median of v (the mean of the middle two when their number is even), or
// NaN if v is empty. It sorts v.
func median(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	slices.Sort(v)
	n := len(v)
	if n%2 == 0 {
		return (v[n/2-1] + v[n/2]) / 2
	}
	return v[n/2]
}

// spread formats ratios as their median and range: "1.02× (0.97–1.10)". It sorts ratios.
func spread(ratios []float64) string {
	m := times(median(ratios))
	if len(ratios) < 2 {
		return m
	}
	return fmt.Sprintf("%s (%.2f–%.2f)", m, ratios[0], ratios[len(ratios)-1])
}

// times formats a ratio as "1.02×"; a ratio that could not be taken is "–".
func times(x float64) string {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return "–"
	}
	return fmt.Sprintf("%.2f×", x)
}

// micros formats nanoseconds as microseconds.
func micros(ns float64) string {
	if ns < 100_000 {
		return fmt.Sprintf("%.1f µs", ns/1e3)
	}
	return fmt.Sprintf("%.0f µs", ns/1e3)
}

// thousands formats x rounded to a whole number, with a comma between thousands.
func thousands(x float64) string {
	s := fmt.Sprintf("%.0f", x)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// cpuModel returns the first model name in /proc/cpuinfo, or "unknown CPU".
func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err == nil {
		for line := range strings.Lines(string(b)) {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				return strings.TrimSpace(v)
			}
		}
	}
	return "unknown CPU"
}
