package retryafter

import (
	"errors"
	"log"
	"net/http"
	"strings"
	"sync/atomic"

	"github.com/retryafter/retryafter/internal/door"
	"github.com/retryafter/retryafter/internal/header"
)

// How the package names its fields for cross-origin scripts; the package doc's Browsers section
// says where to mount CORS middleware, and why.
//
// Retry-After, Date and the rate-limit fields are not CORS-safelisted response headers (Fetch
// standard), so on a request with an Origin the package names the ones it sets in
// Access-Control-Expose-Headers. CORS middleware that runs before the limiter sets its own
// headers first and the package merges into them: it never removes a name, never adds one twice
// (names compare case-insensitively) and adds nothing when "*" is already there, unless the
// response allows credentials, for which the Fetch standard reads "*" as a plain name. On an
// admitted request the fields are set before next runs, so a handler that then calls
// Header().Set("Access-Control-Expose-Headers", ...) replaces the package's names; one that
// calls Header().Add keeps them.

const (
	headerExpose      = "Access-Control-Expose-Headers"
	headerCredentials = "Access-Control-Allow-Credentials"
	headerAllowOrigin = "Access-Control-Allow-Origin"
)

// ErrCORSMountOrder reports CORS middleware mounted after the limiter (inside it): a response
// got Access-Control-Allow-Origin from a handler that the limiter calls, so the limiter's own
// refusals, which never reach that handler, go without it, and browsers hide them from the page
// (see the package doc's Browsers section). It goes to the hooks of [WithErrorHook].
//
// CORS middleware mounted before the limiter that sets its headers only when the response is
// written, through a ResponseWriter of its own, looks the same from inside and is reported too;
// go-chi/cors, which the tests use, sets them before calling next. On a request with an Origin
// the middleware names Retry-After, Date and the rate-limit fields in
// Access-Control-Expose-Headers, merging with what CORS middleware set there, so that a
// cross-origin script may read them.
var ErrCORSMountOrder = errors.New("retryafter: Access-Control-Allow-Origin is set inside the limiter, so its refusals go without it and browsers hide them from the page: mount CORS middleware before the limiter")

// A corsOrderWatch tells, once, that Access-Control-Allow-Origin was set inside the middleware.
// The zero value is ready to use.
type corsOrderWatch struct {
	told atomic.Bool
}

// serve calls next for r, a request with an Origin, and reports ErrCORSMountOrder to the hooks
// onError (none: the standard logger) if next set Access-Control-Allow-Origin that was not there
// before. Once told, it only calls next.
func (c *corsOrderWatch) serve(next http.Handler, w http.ResponseWriter, r *http.Request, onError []func(*http.Request, error)) {
	if c.told.Load() {
		next.ServeHTTP(w, r)
		return
	}
	h := w.Header()
	_, before := h[headerAllowOrigin]
	next.ServeHTTP(w, r)
	if _, after := h[headerAllowOrigin]; before || !after || c.told.Swap(true) {
		return
	}
	if len(onError) > 0 {
		for _, fn := range onError {
			fn(r, ErrCORSMountOrder)
		}
		return
	}
	log.Printf("%v (seen at %s %s from Origin %q)", ErrCORSMountOrder, r.Method, r.URL.Path, r.Header.Get(door.HeaderOrigin))
}

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

// expose adds to h's Access-Control-Expose-Headers the names of l that it does not list yet,
// taking a new value from lines (nil: allocated apart).
func (l *exposeList) expose(h http.Header, lines *header.Few) {
	if len(l.names) == 0 {
		return
	}
	have := h[headerExpose]
	if len(have) == 0 {
		h[headerExpose] = lines.Line(l.line)
		return
	}
	if door.ListHas(have, "*") && !credentialed(h) {
		return
	}
	var missing []string
	for _, name := range l.names {
		if !door.ListHas(have, name) {
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
