package main

import (
	"net/http"
	"strings"
	"testing"
)

// TestKeepFields checks what the probe keeps of a response's fields: the ones a check reads,
// Retry-After and Date first, lines cut at keptLine, at most keptBytes in all, and whether it
// cut anything.
func TestKeepFields(t *testing.T) {
	long := strings.Repeat("9", keptLine+1)
	h := http.Header{
		"Retry-After":                        {"5"},
		"Date":                               {date0},
		"X-Pad":                              {"unread"},
		"Ratelimit":                          {`"default";r=0;t=5`},
		"X-Ratelimit-Reset":                  {long},
		"Access-Control-Expose-Headers":      {"Retry-After"},
		"Location":                           {"/"},
		"Retry-After-Ms":                     {"5000"},
		"Anthropic-Ratelimit-Requests-Reset": {"2026-11-29T12:00:05Z"},
	}
	got, cut := keepFields(h)
	if !cut || len(got) != len(h)-1 || got["X-Pad"] != nil {
		t.Fatalf("kept %d fields (cut %v): %v", len(got), cut, got)
	}
	if v := got.Get("X-Ratelimit-Reset"); v != long[:keptLine]+"…" {
		t.Errorf("a long line kept as %d bytes, want it cut at %d", len(v), keptLine)
	}
	if _, cut := keepFields(http.Header{"Retry-After": {"5"}, "Date": {date0}}); cut {
		t.Errorf("nothing to cut, yet cut")
	}

	// A flood of rate-limit fields: Retry-After and Date are kept, and no more than keptBytes.
	flood := http.Header{"Retry-After": {"5"}, "Date": {date0}}
	for i := range 1000 {
		flood.Add("X-Ratelimit-"+strings.Repeat("n", i%50+1), strings.Repeat("v", 900))
	}
	got, cut = keepFields(flood)
	size := 0
	for name, lines := range got {
		for _, l := range lines {
			size += len(name) + len(l)
		}
	}
	if !cut || size > keptBytes || got.Get("Retry-After") != "5" || got.Get("Date") != date0 {
		t.Errorf("kept %d bytes (cut %v), Retry-After %q, Date %q", size, cut, got.Get("Retry-After"), got.Get("Date"))
	}
}
