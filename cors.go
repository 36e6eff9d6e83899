package retryafter

import (
	"net/http"
	"strings"

	"github.com/retryafter/retryafter/internal/header"
)

// Browsers let a cross-origin script read only the CORS-safelisted response headers (Fetch
// standard: Cache-Control, Content-Language, Content-Length, Content-Type, Expires,
// Last-Modified, Pragma) and those the response names in Access-Control-Expose-Headers.
// Retry-After, Date and the rate-limit fields are not safelisted, so on a request with an Origin
// the package names the ones it sets, merging with what CORS middleware already put there.
//
// What is supported: CORS middleware that runs before the limiter (mounted outside it, as
// chi's r.Use(cors) ahead of r.Use(retryafter.Limit(...)) does) sets its own headers first and
// the package merges into them; the package never removes a name, never adds one twice (names
// compare case-insensitively) and adds nothing when "*" is already there, unless the response
// allows credentials, for which the Fetch standard reads "*" as a plain name. On an admitted
// request the fields are set before next runs, so a handler (or CORS middleware mounted inside
// the limiter) that then calls Header().Set("Access-Control-Expose-Headers", ...) replaces the
// package's names; one that calls Header().Add keeps them. CORS middleware mounted inside the
// limiter does not run for a refused request at all, so a browser cannot read that response
// whatever it exposes: mount CORS outside the limiter.

const (
	headerExpose      = "Access-Control-Expose-Headers"
	headerCredentials = "Access-Control-Allow-Credentials"
	headerOrigin      = "Origin"
)

// An exposeList is a set of header names to expose, with the header value that names them all
// formatted ahead, so that a response with no Access-Control-Expose-Headers yet costs nothing.
type exposeList struct {
	names []string
	line  string // names joined with ", "
}

func newExposeList(names ...string) exposeList {
	if len(names) == 0 {
		return exposeList{}
	}
	return exposeList{names: names, line: strings.Join(names, ", ")}
}

// refusalExposed is what a refusal exposes when no rate-limit field is on: Retry-After, and Date,
// which a client needs to read a Retry-After in the HTTP-date form against the server's clock.
var refusalExposed = exposeList{names: []string{header.RetryAfter, header.Date}, line: "Retry-After, Date"}

// hasOrigin reports whether r is a cross-origin request as a browser sends it.
func hasOrigin(r *http.Request) bool {
	_, ok := r.Header[headerOrigin]
	return ok
}

// expose adds to h's Access-Control-Expose-Headers the names of l that it does not list yet.
func (l *exposeList) expose(h http.Header, lines *header.Lines) {
	if len(l.names) == 0 {
		return
	}
	have := h[headerExpose]
	if len(have) == 0 {
		h[headerExpose] = lines.Line(l.line)
		return
	}
	if listHas(have, "*") && !credentialed(h) {
		return
	}
	var missing []string
	for _, name := range l.names {
		if !listHas(have, name) {
			missing = append(missing, name)
		}
	}
	if len(missing) == 0 {
		return
	}
	var b strings.Builder
	for _, line := range have {
		if line = strings.Trim(line, " \t,"); line != "" {
			b.WriteString(line)
			b.WriteString(", ")
		}
	}
	b.WriteString(strings.Join(missing, ", "))
	h[headerExpose] = []string{b.String()}
}

// credentialed reports whether h allows credentials, in which case "*" in
// Access-Control-Expose-Headers is not a wildcard.
func credentialed(h http.Header) bool {
	v := h[headerCredentials]
	return len(v) > 0 && strings.TrimSpace(v[0]) == "true"
}

// listHas reports whether the comma-separated lines of a list-valued field hold name,
// compared case-insensitively, without allocating.
func listHas(lines []string, name string) bool {
	for _, line := range lines {
		for line != "" {
			var item string
			item, line, _ = strings.Cut(line, ",")
			if strings.EqualFold(strings.Trim(item, " \t"), name) {
				return true
			}
		}
	}
	return false
}
