package main

import (
	"fmt"
	"strings"
)

// checkCORSExposure judges whether a script of origin, running in a browser, can read the
// Retry-After of the refusal e (Fetch standard, CORS protocol): the response must allow origin
// (Access-Control-Allow-Origin: * or origin itself), and name Retry-After in
// Access-Control-Expose-Headers, since it is not a CORS-safelisted response header; so must it
// name Date when Retry-After is a date, which a script measures against Date. A "*" exposes
// every field unless the response allows credentials. The probe's requests carried
// Origin: origin.
func checkCORSExposure(e *exchange, t told, origin string) Check {
	if origin == "" {
		return na(checkCORS, "no -origin given")
	}
	if !t.present {
		return na(checkCORS, "no Retry-After to expose")
	}
	c := Check{Name: checkCORS, Result: Fail}
	allow := strings.TrimSpace(strings.Join(e.header["Access-Control-Allow-Origin"], ","))
	credentials := strings.TrimSpace(e.header.Get("Access-Control-Allow-Credentials")) == "true"
	switch {
	case allow == "":
		c.Seen = "no Access-Control-Allow-Origin: a script of " + origin + " cannot read the response at all"
		return c
	case allow != "*" && allow != origin:
		c.Seen = fmt.Sprintf("Access-Control-Allow-Origin: %s, not %s or *", allow, origin)
		return c
	}
	exposeLines := e.header["Access-Control-Expose-Headers"]
	expose := strings.Join(exposeLines, ", ")
	wildcard := listHas(exposeLines, "*") && !credentials
	var missing []string
	if !wildcard && !listHas(exposeLines, "Retry-After") {
		missing = append(missing, "Retry-After")
	}
	if t.date && !wildcard && !listHas(exposeLines, "Date") {
		missing = append(missing, "Date (Retry-After is a date)")
	}
	seen := fmt.Sprintf("Access-Control-Allow-Origin: %s, Access-Control-Expose-Headers: %s", allow, orNone(expose))
	if len(missing) > 0 {
		c.Seen = seen + ": does not expose " + strings.Join(missing, " or ")
		return c
	}
	c.Result, c.Seen = Pass, seen
	return c
}

// listHas reports whether the comma-separated list in lines holds name, compared
// case-insensitively.
func listHas(lines []string, name string) bool {
	for _, line := range lines {
		for item := range strings.SplitSeq(line, ",") {
			if strings.EqualFold(strings.TrimSpace(item), name) {
				return true
			}
		}
	}
	return false
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}
