package retryaftercaddy

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"
)

// provision provisions h as Caddy does a handler of a loaded configuration, and fails the
// test on an error.
func provision(t testing.TB, h caddy.Provisioner) {
	t.Helper()
	if err := provisionErr(t, h); err != nil {
		t.Fatalf("Provision: %v", err)
	}
}

// provisionErr provisions h and returns its error; h is cleaned up, as Caddy cleans up the
// handlers of a configuration it unloads, when the test ends.
func provisionErr(t testing.TB, h caddy.Provisioner) error {
	t.Helper()
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	t.Cleanup(func() { cancel() })
	if c, ok := h.(caddy.CleanerUpper); ok {
		t.Cleanup(func() { c.Cleanup() })
	}
	err := h.Provision(ctx)
	// Without a configuration the context's logger is a development one, which writes
	// every debug entry to stderr; the tests that read the logs set their own.
	switch h := h.(type) {
	case *Limit:
		h.logger = zap.NewNop()
	case *Normalize:
		h.logger = zap.NewNop()
	}
	return err
}

// fromJSON decodes src into a new handler of type T as Caddy decodes a module's configuration:
// strictly, so that an unknown field is an error.
func fromJSON[T any](t testing.TB, src string) *T {
	t.Helper()
	h := new(T)
	if err := caddy.StrictUnmarshalJSON([]byte(src), h); err != nil {
		t.Fatalf("decoding %s: %v", src, err)
	}
	return h
}

// fromCaddyfile reads src, one directive and its block, into u.
func fromCaddyfile(src string, u caddyfile.Unmarshaler) error {
	return u.UnmarshalCaddyfile(caddyfile.NewTestDispenser(src))
}

// toJSON returns v as JSON, for messages.
func toJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// inCaddy returns an http.Handler that serves each request as a Caddy server with no trusted
// proxies would hand it to h: with a Replacer and the server's variables (client_ip among
// them), and next answering 200 "next".
func inCaddy(h caddyhttp.MiddlewareHandler) http.Handler {
	srv := new(caddyhttp.Server)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r = caddyhttp.PrepareRequest(r, caddy.NewReplacer(), w, srv)
		err := h.ServeHTTP(w, r, caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
			_, err := w.Write([]byte("next"))
			return err
		}))
		if err != nil {
			http.Error(w, err.Error(), http.StatusTeapot)
		}
	})
}
