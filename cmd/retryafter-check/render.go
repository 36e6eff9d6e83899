package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"
)

// writeTable writes r for a person: what was probed, the first refusal (and whether the server
// was limited before the probe began), one line per check
// (its name, pass / FAIL / n/a, what was seen), how many requests were sent, and the verdict.
func writeTable(w io.Writer, r *Report) error {
	var b strings.Builder
	fmt.Fprintf(&b, "retryafter-check %s %s\n", r.Method, r.URL)
	if f := r.Refusal; f != nil {
		fmt.Fprintf(&b, "first refusal: request %d, %s\n", f.Request, statusText(f.Status))
		if f.AlreadyLimited {
			b.WriteString("already limited: the first request was refused, so earlier traffic had spent this quota; what other traffic spends meanwhile can make a retry fail\n")
		}
	}
	if len(r.Checks) > 0 {
		b.WriteByte('\n')
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "CHECK\tRESULT\tSEEN")
		for _, c := range r.Checks {
			result := string(c.Result)
			if c.Result == Fail {
				result = "FAIL"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\n", c.Name, result, c.Seen)
		}
		tw.Flush()
		b.WriteByte('\n')
	}
	fmt.Fprintf(&b, "%d %s sent in %s", r.Requests, plural(r.Requests, "request"), seconds(roundDuration(r.Elapsed)))
	if r.Budget > 0 {
		fmt.Fprintf(&b, " (-budget %d, -timeout %s)", r.Budget, r.Timeout)
	}
	fmt.Fprintf(&b, ", all to %s\n", r.URL)
	if r.FieldsCut > 0 {
		fmt.Fprintf(&b, "%d %s had more of the fields the checks read than the probe keeps (%d KB, %d KB a line): what was judged is what was kept\n",
			r.FieldsCut, plural(r.FieldsCut, "response"), keptBytes>>10, keptLine>>10)
	}
	if failed := r.failed(); len(failed) > 0 {
		fmt.Fprintf(&b, "FAIL: %s (exit %d)\n", strings.Join(failed, ", "), r.Exit)
	}
	if r.GaveUp != "" {
		fmt.Fprintf(&b, "gave up: %s (exit %d)\n", r.GaveUp, r.Exit)
	}
	if r.Exit == exitPass {
		fmt.Fprintf(&b, "pass: every check that applies passed (exit %d)\n", r.Exit)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func plural(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}

// writeJSON writes r as one indented JSON object.
func writeJSON(w io.Writer, r *Report) error {
	out := *r
	if out.Checks == nil {
		out.Checks = []Check{}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(&out)
}

// statusText is the status code with its reason phrase: "429 Too Many Requests".
func statusText(code int) string {
	if t := http.StatusText(code); t != "" {
		return fmt.Sprintf("%d %s", code, t)
	}
	return fmt.Sprint(code)
}

// seconds formats a wait for a person: "1 s", "1.5 s", "2h0m0s".
func seconds(d time.Duration) string {
	if d >= time.Hour {
		return roundDuration(d).String()
	}
	if d%time.Second == 0 {
		return fmt.Sprintf("%d s", d/time.Second)
	}
	return fmt.Sprintf("%.1f s", d.Seconds())
}

// roundDuration rounds d for a person: to the millisecond under a second, to a tenth of a
// second under a minute, else to the second.
func roundDuration(d time.Duration) time.Duration {
	switch {
	case d < time.Second && d > -time.Second:
		return d.Round(time.Millisecond)
	case d < time.Minute && d > -time.Minute:
		return d.Round(100 * time.Millisecond)
	}
	return d.Round(time.Second)
}
