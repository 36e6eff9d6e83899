package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/retryafter/retryafter"
)

// TestDebt checks the example's promise: an answer that costs more tokens than the key holds
// puts it into debt, and its next request is told exactly when the debt is repaid.
func TestDebt(t *testing.T) {
	api := newAPI(func(string) (string, int) { return "...", tokensPerMinute + 1000 })
	post := func(key string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("POST", "/v1/completions", strings.NewReader("hi"))
		r.Header.Set("Authorization", "Bearer "+key)
		w := httptest.NewRecorder()
		api.ServeHTTP(w, r)
		return w
	}
	if w := post("k"); w.Code != http.StatusOK {
		t.Fatalf("first request: %d", w.Code)
	}
	w := post("k")
	wait, ok := retryafter.ParseRetryAfter(w.Header(), time.Now())
	// 1,000 tokens of debt at 3,000 a minute: 20 s, rounded up.
	if w.Code != http.StatusTooManyRequests || !ok || wait != 20*time.Second {
		t.Fatalf("in debt: %d, Retry-After %q, want 429 and 20", w.Code, w.Header().Get("Retry-After"))
	}
	if w := post("other"); w.Code != http.StatusOK {
		t.Fatalf("another key: %d", w.Code)
	}
	if w := post(""); w.Code == http.StatusOK {
		t.Fatal("a request without an API key was admitted")
	}
}
