package retryafter

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/retryafter/retryafter/internal/door"
	"github.com/retryafter/retryafter/internal/header"
)

// ProblemDetails configures a [Responder] that answers with an RFC 9457 problem object
// (Content-Type application/problem+json) instead of plain text:
//
//	{"type":"about:blank","title":"Too Many Requests","status":429,
//	 "detail":"Too many requests from this client; retry in 8 seconds.","retry-after":8}
//
// retry-after is the Retry-After of the response in seconds, left out when it has none. The
// detail never holds an error's text. The zero value is ready to use: it sends problem details
// to a request whose Accept field accepts application/problem+json, by name or as application/*,
// with a weight (q) above 0 and at least that of text/plain, and plain text, as the default
// Responder does, to the others. A ProblemDetails is safe for concurrent use if its Type is.
type ProblemDetails struct {
	// Always sends problem details whatever the request's Accept field says, as a JSON API
	// whose clients send Accept: application/json (or nothing) may want.
	Always bool

	// AcceptAny counts */* (and a request with no Accept field, which means the same) as
	// accepting application/problem+json. By default it does not, so that browsers and tools
	// that send */* get plain text.
	AcceptAny bool

	// Type returns the problem type URI and its title for a status. If nil, or when it returns
	// "", the type is the [Refusal]'s: "about:blank", with the status's reason phrase as title,
	// as RFC 9457 §4.2.1 asks, for every refusal but the 503 of package overload's Concurrency
	// at its limit, which is [ProblemReducedCapacity]. A type such as "https://iana.org/assignments/http-problem-types#quota-exceeded"
	// (draft-ietf-httpapi-ratelimit-headers-11 §5.1, not yet registered) goes here.
	Type func(status int) (uri, title string)
}

// ProblemReducedCapacity is the problem type of a 503 from package overload's Concurrency at
// its limit, which [ProblemDetails] sends unless its Type names another (draft-ietf-httpapi-ratelimit-headers-11
// §5.2, not yet registered).
const ProblemReducedCapacity = "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity"

const mediaProblem = "application/problem+json"

const varyAccept = "Accept"

// problem is the JSON form of an RFC 9457 problem object.
type problem struct {
	Type       string   `json:"type"`
	Title      string   `json:"title"`
	Status     int      `json:"status"`
	Detail     string   `json:"detail"`
	RetryAfter int64    `json:"retry-after,omitempty"`
	Violated   []string `json:"violated-policies,omitempty"`
}

// Respond is a [Responder]: it writes the problem object of f, or plain text to a request that
// does not accept problem details (see [ProblemDetails]).
func (p ProblemDetails) Respond(w http.ResponseWriter, r *http.Request, f Refusal) {
	status := f.Status
	if !p.Always {
		h := w.Header()
		if !door.ListHas(h["Vary"], varyAccept) {
			h.Add("Vary", varyAccept)
		}
		if !acceptsProblem(r.Header["Accept"], p.AcceptAny) {
			writePlain(w, w.Header(), r, status, new(header.Few))
			return
		}
	}
	pr := problem{Type: "about:blank", Title: http.StatusText(status), Status: status}
	secs := int64(f.RetryAfter / time.Second)
	if secs > 0 {
		pr.RetryAfter = secs
	}
	pr.Detail = problemDetail(status, secs)
	pr.Violated = f.Violated
	switch f.Type {
	case "":
	case ProblemReducedCapacity:
		pr.Type, pr.Title = ProblemReducedCapacity, "Temporary Reduced Capacity"
		pr.Detail = "The service is at capacity" + retryIn(secs) + "."
	default:
		pr.Type = f.Type
	}
	if p.Type != nil {
		if uri, title := p.Type(status); uri != "" {
			pr.Type, pr.Title = uri, title
		}
	}
	body, err := json.Marshal(pr)
	if err != nil { // cannot happen for this struct; answer plain text rather than nothing
		writePlain(w, w.Header(), r, status, new(header.Few))
		return
	}
	h := w.Header()
	delete(h, "Content-Length")
	h[header.ContentType] = []string{mediaProblem}
	h["X-Content-Type-Options"] = []string{noSniff}
	w.WriteHeader(status)
	if r.Method != http.MethodHead {
		w.Write(append(body, '\n'))
	}
}

// problemDetail is the human-readable explanation of a refusal with status and a Retry-After
// of secs seconds (0: none).
func problemDetail(status int, secs int64) string {
	retry := retryIn(secs)
	switch status {
	case http.StatusTooManyRequests:
		if secs == 0 {
			return "This request can never be admitted: it costs more than this client's limit allows, or the limit does not refill. Do not retry it unchanged."
		}
		return "Too many requests from this client" + retry + "."
	case http.StatusServiceUnavailable:
		return "The service is unavailable" + retry + "."
	case http.StatusInternalServerError:
		return "The request could not be processed."
	}
	return http.StatusText(status) + retry + "."
}

// retryIn is the end of a detail that says to retry in secs seconds (0: nothing).
func retryIn(secs int64) string {
	if secs <= 0 {
		return ""
	}
	if secs == 1 {
		return "; retry in 1 second"
	}
	return "; retry in " + strconv.FormatInt(secs, 10) + " seconds"
}

// acceptsProblem reports whether the Accept field lines accept application/problem+json at
// least as much as text/plain (RFC 9110 §12.5.1: the most specific media range that matches
// gives a type its weight). */* counts for problem details only when anyOK; no Accept field is
// taken as */*.
func acceptsProblem(accept []string, anyOK bool) bool {
	if len(accept) == 0 {
		return anyOK
	}
	problemQ, problemSpec := 0, 0
	plainQ, plainSpec := 0, 0
	for _, line := range accept {
		for line != "" {
			var item string
			item, line, _ = strings.Cut(line, ",")
			mediaRange, params, _ := strings.Cut(item, ";")
			mediaRange = strings.Trim(mediaRange, " \t")
			if mediaRange == "" {
				continue
			}
			q, ok := weight(params)
			if !ok {
				continue
			}
			if s := specificity(mediaRange, "application", "problem+json"); s > problemSpec && (s > 1 || anyOK) {
				problemQ, problemSpec = q, s
			}
			if s := specificity(mediaRange, "text", "plain"); s > plainSpec {
				plainQ, plainSpec = q, s
			}
		}
	}
	return problemQ > 0 && problemQ >= plainQ
}

// specificity returns how closely mediaRange matches typ/sub: 3 for the type itself, 2 for
// typ/*, 1 for */*, 0 for no match. Case does not matter.
func specificity(mediaRange, typ, sub string) int {
	t, s, ok := strings.Cut(mediaRange, "/")
	if !ok {
		return 0
	}
	t, s = strings.Trim(t, " \t"), strings.Trim(s, " \t")
	switch {
	case t == "*" && s == "*":
		return 1
	case !strings.EqualFold(t, typ):
		return 0
	case s == "*":
		return 2
	case strings.EqualFold(s, sub):
		return 3
	}
	return 0
}

// weight returns the q parameter among params (";"-separated) in thousandths: 1000 when there
// is none, and false when it is not a qvalue (RFC 9110 §12.4.2).
func weight(params string) (int, bool) {
	for params != "" {
		var p string
		p, params, _ = strings.Cut(params, ";")
		name, value, _ := strings.Cut(strings.Trim(p, " \t"), "=")
		if !strings.EqualFold(strings.TrimRight(name, " \t"), "q") {
			continue
		}
		return qvalue(strings.Trim(value, " \t"))
	}
	return 1000, true
}

// qvalue parses ( "0" [ "." 0*3DIGIT ] ) / ( "1" [ "." 0*3("0") ] ) into thousandths.
func qvalue(v string) (int, bool) {
	if v == "" || (v[0] != '0' && v[0] != '1') {
		return 0, false
	}
	n := int(v[0]-'0') * 1000
	if len(v) == 1 {
		return n, true
	}
	if v[1] != '.' || len(v) > 5 {
		return 0, false
	}
	scale := 100
	for i := 2; i < len(v); i++ {
		if v[i] < '0' || v[i] > '9' {
			return 0, false
		}
		n += int(v[i]-'0') * scale
		scale /= 10
	}
	if n > 1000 {
		return 0, false
	}
	return n, true
}
