// Command table renders benchstat's CSV for the comparison benchmarks as the README's
// Markdown table: time per request as a ratio to the hand-written baseline, allocations per
// request, and heap bytes per client.
//
//	benchstat -format csv -row /lib -col .name bench.txt | go run ./table -raw bench.txt
package main

import (
	"bufio"
	"encoding/csv"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"runtime"
	"strconv"
	"strings"
)

// scenarios are the benchmark names, in the table's order, with their column titles.
var scenarios = []struct{ name, title string }{
	{"Allowed", "allowed"},
	{"Rejected", "rejected (429)"},
	{"Keys10k", "10k keys"},
	{"Parallel1k", "parallel, 1k keys"},
}

// libs are the rows, in order, with what each row is.
var libs = []struct{ name, title string }{
	{"bare", "bare handler (no limiter)"},
	{"baseline", "**baseline**: `map[string]*rate.Limiter` + `sync.Mutex` + `Allow()`"},
	{"retryafter", "**retryafter** `Limit`"},
	{"baseline-defaultkey", "baseline keyed by `retryafter.ClientIP()`"},
	{"retryafter-defaultkey", "retryafter `Limit`, default key function (`ClientIP()`)"},
	{"httprate", "go-chi/httprate v0.16.1"},
	{"tollbooth", "didip/tollbooth v7.0.2"},
	{"ulule", "ulule/limiter v3.11.2 (memory)"},
	{"sethvargo", "sethvargo/go-limiter v0.7.1 (memorystore)"},
	{"throttled", "throttled/throttled v2.15.0 (memstore)"},
}

func main() {
	raw := flag.String("raw", "", "the go test -bench output, for its goos/goarch/cpu lines")
	flag.Parse()
	log.SetFlags(0)

	// values[unit][benchmark][lib] is benchstat's centre (the median).
	values := map[string]map[string]map[string]float64{}
	r := csv.NewReader(os.Stdin)
	r.FieldsPerRecord = -1
	var names, units []string
	header := true // the next row with a blank first cell names the benchmarks
	for {
		rec, err := r.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			log.Fatal(err)
		}
		switch {
		case len(rec) < 2:
			// goos, goarch, pkg and cpu lines
		case rec[0] == "" && header:
			names, header = fill(rec), false
		case rec[0] == "":
			units = rec
		default:
			header = true
			for i := 1; i < len(rec) && i < len(names) && i < len(units); i++ {
				if units[i] == "CI" || units[i] == "vs base" || units[i] == "P" || units[i] == "" {
					continue
				}
				v, err := strconv.ParseFloat(rec[i], 64)
				if err != nil {
					continue
				}
				u, bench := units[i], names[i]
				if values[u] == nil {
					values[u] = map[string]map[string]float64{}
				}
				if values[u][bench] == nil {
					values[u][bench] = map[string]float64{}
				}
				values[u][bench][rec[0]] = v
			}
		}
	}
	if len(values) == 0 {
		log.Fatal("table: no benchstat CSV on stdin")
	}

	fmt.Printf("Machine: %s, %d cores, %s.\n\n", machine(*raw), runtime.NumCPU(), runtime.Version())
	for _, t := range []struct{ unit, what string }{
		{"cpu-sec/op", "CPU time per request (getrusage), as a ratio to the baseline"},
		{"sec/op", "Wall time per request, as a ratio to the baseline"},
	} {
		if values[t.unit] == nil {
			continue
		}
		fmt.Printf("%s:\n\n", t.what)
		fmt.Print("| | ")
		for _, s := range scenarios {
			fmt.Printf("%s | ", s.title)
		}
		fmt.Print("allocs allowed / rejected | B/key |\n|---|")
		for range scenarios {
			fmt.Print("--:|")
		}
		fmt.Println("--:|--:|")
		for _, l := range libs {
			fmt.Printf("| %s | ", l.title)
			for _, s := range scenarios {
				fmt.Printf("%s | ", ratio(values[t.unit][s.name], l.name))
			}
			fmt.Printf("%s / %s | %s |\n",
				count(values["allocs/op"]["Allowed"], l.name),
				count(values["allocs/op"]["Rejected"], l.name),
				count(values["B/key"]["BytesPerKey"], l.name))
		}
		fmt.Print("\nBaseline per request: ")
		for i, s := range scenarios {
			if i > 0 {
				fmt.Print(", ")
			}
			fmt.Printf("%s %s", s.title, ns(values[t.unit][s.name]["baseline"]))
		}
		fmt.Print(".\n\n")
		if ra, base := values[t.unit]["Allowed"]["retryafter-defaultkey"], values[t.unit]["Allowed"]["baseline-defaultkey"]; ra > 0 && base > 0 {
			fmt.Printf("With the default key function on both sides, an allowed request costs %.2f× the baseline (%s against %s).\n\n", ra/base, ns(ra), ns(base))
		}
		if one, many := values[t.unit]["Allowed"]["retryafter"], values[t.unit]["Keys10k"]["retryafter"]; one > 0 && many > 0 {
			fmt.Printf("retryafter with 10k keys against one key: %.2f× (%s against %s).\n\n", many/one, ns(many), ns(one))
		}
	}
}

// fill returns the header row with each blank cell naming the column to its left.
func fill(rec []string) []string {
	out := make([]string, len(rec))
	for i, v := range rec {
		if v == "" && i > 0 {
			v = out[i-1]
		}
		out[i] = v
	}
	return out
}

func ratio(m map[string]float64, lib string) string {
	v, ok := m[lib]
	base := m["baseline"]
	if !ok || base == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f×", v/base)
}

func count(m map[string]float64, lib string) string {
	v, ok := m[lib]
	if !ok {
		return "–"
	}
	return strconv.FormatFloat(max(v, 0), 'f', 0, 64)
}

func ns(sec float64) string { return fmt.Sprintf("%.0f ns", sec*1e9) }

// machine returns the cpu line of the raw benchmark output, with goos/goarch.
func machine(raw string) string {
	if raw == "" {
		return runtime.GOOS + "/" + runtime.GOARCH
	}
	f, err := os.Open(raw)
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	cpu := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "cpu: "); ok {
			cpu = v
			break
		}
	}
	return strings.TrimSpace(cpu + " " + runtime.GOOS + "/" + runtime.GOARCH)
}
