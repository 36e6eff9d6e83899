package main

import (
	"expvar"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
)

// TestCountsAreBounded sends refused requests to many distinct paths under one route, as a
// client that wants to grow /debug/vars would, and checks that the counts hold one entry per
// route, whatever the paths.
func TestCountsAreBounded(t *testing.T) {
	h := handler()
	before := len(keys(limitedRoutes))
	for i := range 2000 {
		r := httptest.NewRequest("GET", "/items/"+strconv.Itoa(i), nil)
		r.RemoteAddr = "192.0.2.1:1"
		h.ServeHTTP(httptest.NewRecorder(), r)
	}
	if limited.Value() < 1990 {
		t.Fatalf("%d requests limited, want all but the burst of 3", limited.Value())
	}
	if got := len(keys(limitedRoutes)) - before; got != 1 {
		t.Fatalf("2000 refused paths added %d entries to the counts, want 1 (the route): %s", got, limitedRoutes)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", "/debug/vars", nil))
	if w.Code != http.StatusOK || len(w.Body.String()) > 64<<10 {
		t.Fatalf("/debug/vars: %d, %d bytes", w.Code, w.Body.Len())
	}
}

func keys(m *expvar.Map) []string {
	var ks []string
	m.Do(func(kv expvar.KeyValue) { ks = append(ks, kv.Key) })
	return ks
}
