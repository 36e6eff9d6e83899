package main

import (
	"math"
	"net/http"
	"slices"
	"strings"
)

// What the probe keeps of a response's fields: only those a check reads, and at most
// keptBytes of them, so that its memory stays bounded whatever a server sends (the transport
// reads up to its MaxResponseHeaderBytes, 10 MB by default, of each response, and lets it go).
const (
	keptBytes = 16 << 10 // the most bytes of names and values kept of one response
	keptLine  = 1 << 10  // the most bytes kept of one line; a longer one is cut, and ends in "…"
)

// keptPrefixes are the beginnings of the canonical names of the fields the checks read:
// Retry-After and the fields a client reads in its place (Retry-After-Ms, X-Ms-Retry-After-Ms,
// RateLimit, RateLimit-Policy, RateLimit-*, X-RateLimit-*, Anthropic's), Date, the CORS fields,
// and Location.
var keptPrefixes = []string{"Retry-After", "X-Ms-Retry-After", "Date", "Ratelimit", "X-Ratelimit-", "Anthropic-Ratelimit-", "Access-Control-", "Location"}

// keepFields returns the fields of h that a check reads, Retry-After and Date first and the
// first line of each before the further lines of any, cut to keptBytes in all, and whether any
// was cut or left out for that.
func keepFields(h http.Header) (http.Header, bool) {
	var names []string
	for name := range h {
		if kept(name) {
			names = append(names, name)
		}
	}
	slices.SortFunc(names, func(a, b string) int {
		if pa, pb := keepFirst(a), keepFirst(b); pa != pb {
			return pa - pb
		}
		return strings.Compare(a, b)
	})
	out := make(http.Header, len(names))
	left, cut := keptBytes, false
	// The first line of every field before the further lines of any, so that many lines of
	// one field leave room for the others.
	for _, lines := range [][2]int{{0, 1}, {1, math.MaxInt}} {
		for _, name := range names {
			vs := h[name]
			for _, v := range vs[min(lines[0], len(vs)):min(lines[1], len(vs))] {
				var c, ok bool
				left, c, ok = keepLine(out, name, v, left)
				cut = cut || c
				if !ok {
					break
				}
			}
		}
	}
	return out, cut
}

// keepLine adds v, a line of the field name, to out, cut to keptLine, when it fits in left
// bytes; it returns the bytes left, whether v was cut or left out, and whether it was kept.
func keepLine(out http.Header, name, v string, left int) (int, bool, bool) {
	cut := false
	if len(v) > keptLine {
		v, cut = v[:keptLine]+"…", true
	}
	if len(name)+len(v) > left {
		return left, true, false
	}
	out[name] = append(out[name], strings.Clone(v))
	return left - len(name) - len(v), cut, true
}

// kept reports whether a check reads the field name, canonical.
func kept(name string) bool {
	for _, p := range keptPrefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// keepFirst orders the fields kept: Retry-After and Date before the rest.
func keepFirst(name string) int {
	switch name {
	case "Retry-After":
		return 0
	case "Date":
		return 1
	}
	return 2
}
