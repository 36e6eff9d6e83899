package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/retryafter/retryafter"
	"github.com/retryafter/retryafter/gateway"
)

func TestParseUpstream(t *testing.T) {
	for _, tt := range []struct {
		in string
		ok bool
	}{
		{"http://127.0.0.1:9090", true},
		{"https://api.example/v1", true},
		{"127.0.0.1:9090", false}, // no scheme
		{"ftp://example", false},
		{"http://", false},
		{"http://[::1", false},
	} {
		u, err := parseUpstream(tt.in)
		if (err == nil) != tt.ok || (tt.ok && u.String() != tt.in) {
			t.Errorf("parseUpstream(%q) = %v, %v; want ok %v", tt.in, u, err, tt.ok)
		}
	}
}

// TestProxyToUpstream stands the gateway in front of an upstream given by URL, with a base
// path, and checks that requests reach it with their path and query, that its answers come
// back, and that the Retry-After it gets wrong is repaired on the way.
func TestProxyToUpstream(t *testing.T) {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/limited" {
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		io.WriteString(w, r.URL.RequestURI())
	}))
	defer upstream.Close()
	target, err := parseUpstream(upstream.URL + "/v1")
	if err != nil {
		t.Fatal(err)
	}
	var repairs []gateway.Repair
	gw := httptest.NewServer(newProxy(target, &gateway.Normalizer{OnRepair: func(r gateway.Repair) { repairs = append(repairs, r) }}))
	defer gw.Close()
	client := gw.Client()
	client.Timeout = 5 * time.Second

	resp, err := client.Get(gw.URL + "/things?x=1")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(body) != "/v1/things?x=1" {
		t.Fatalf("GET /things?x=1: %d %q; want the upstream's 200 for /v1/things?x=1", resp.StatusCode, body)
	}
	resp, err = client.Get(gw.URL + "/limited")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if d, ok := retryafter.ParseRetryAfter(resp.Header, time.Now()); resp.StatusCode != http.StatusTooManyRequests || !ok || d != time.Second {
		t.Fatalf("GET /limited: %d, Retry-After %q; want 429 with 1", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if len(repairs) != 1 || repairs[0].Kind != gateway.RepairUnderstood || repairs[0].Leniency != gateway.LenientZero {
		t.Fatalf("repairs %+v; want the 0 understood as under a second", repairs)
	}
}

// TestDemoUpstream sends a request to each route of the -demo upstream through the gateway:
// every refusal comes back with a Retry-After that the strict reader reads as a wait of at
// least a second, and a Date.
func TestDemoUpstream(t *testing.T) {
	up := httptest.NewServer(demoUpstream())
	defer up.Close()
	target, _ := parseUpstream(up.URL)
	gw := httptest.NewServer(newProxy(target, &gateway.Normalizer{FillMissing: true}))
	defer gw.Close()
	client := gw.Client()
	client.Timeout = 5 * time.Second
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	for _, path := range []string{"/zero", "/utc", "/half", "/skewed", "/bare", "/day", "/garbage", "/reset", "/moved"} {
		resp, err := client.Get(gw.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		d, ok := retryafter.ParseRetryAfter(resp.Header, time.Now().Add(24*time.Hour))
		if !ok || d < time.Second || d > time.Hour || resp.Header.Get("Date") == "" ||
			strings.Trim(resp.Header.Get("Retry-After"), "0123456789") != "" {
			t.Errorf("%s: %d, Retry-After %q, Date %q; want delay-seconds in [1 s, 1 h] and a Date",
				path, resp.StatusCode, resp.Header.Get("Retry-After"), resp.Header.Get("Date"))
		}
	}
}
