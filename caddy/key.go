package retryaftercaddy

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/retryafter/retryafter"
)

// checkKey returns an error if key names a placeholder that Caddy does not know for a request
// and that no matcher or handler sets while serving one (a name such as {client_addr}, where
// Caddy's is {http.vars.client_ip}), so that the mistake fails the load rather than every
// request.
func checkKey(key string) error {
	repl := caddy.NewReplacer()
	r, err := http.NewRequest(http.MethodGet, "http://localhost/", nil)
	if err != nil {
		return err
	}
	caddyhttp.PrepareRequest(r, repl, httptest.NewRecorder(), new(caddyhttp.Server))
	// The namespaces of the placeholders that matchers and handlers set while they serve a
	// request, which a key may name though Caddy does not know them before.
	setAtRunTime := []string{"http.regexp.", "http.matchers.", "http.auth.", "http.error.", "http.reverse_proxy.", "http.request.tls.client."}
	repl.Map(func(name string) (any, bool) {
		for _, ns := range setAtRunTime {
			if strings.HasPrefix(name, ns) {
				return "", true
			}
		}
		return nil, false
	})
	if _, err := repl.ReplaceOrErr(key, false, true); err != nil {
		return fmt.Errorf("retry_after_limit: key %s: %v", key, err)
	}
	return nil
}

// placeholderKey is the key function of a configured Key. A placeholder without a value for
// the request (a header it does not carry, a regexp that did not match) is empty, and a key
// that comes out empty is a key like any other: every such request counts against the one
// bucket of the empty key. The first of them is logged, once per configuration, as a warning.
func (h *Limit) placeholderKey(r *http.Request) (string, error) {
	repl, ok := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer)
	if !ok {
		return "", fmt.Errorf("retry_after_limit: the request has no replacer")
	}
	key := repl.ReplaceAll(h.Key, "")
	if key == "" {
		h.warnEmptyKey.Do(func() {
			if h.logger != nil {
				h.logger.Warn("retry_after_limit: a request's key is empty; every such request counts against one bucket, "+
					"so put a matcher on the directive to limit only the requests that carry the key", zap.String("key", h.Key))
			}
		})
	}
	if strings.Contains(h.Key, caddyhttp.ClientIPVarKey) {
		h.warnLeftmost(r)
	}
	return key, nil
}

// clientIPKey is the default key function: Caddy's client_ip, keyed as retryafter.ClientIP keys
// an address. Caddy's server keeps its trusted proxies to itself, so the walk of
// X-Forwarded-For is Caddy's.
func (h *Limit) clientIPKey(r *http.Request) (string, error) {
	s, _ := caddyhttp.GetVar(r.Context(), caddyhttp.ClientIPVarKey).(string)
	a, err := netip.ParseAddr(s)
	if err != nil {
		return "", fmt.Errorf("%w (Caddy's client_ip is %q)", retryafter.ErrNoClientIP, s)
	}
	h.warnLeftmost(r)
	return addrKey(a), nil
}

// addrKey formats a as retryafter.ClientIP does: an IPv4 address as itself, an IPv6 address as
// its /64, an IPv4-mapped IPv6 address as the IPv4 address, without a zone.
func addrKey(a netip.Addr) string {
	a = a.Unmap().WithZone("")
	if a.Is4() {
		return a.String()
	}
	p, _ := a.Prefix(64)
	return p.String()
}

// warnLeftmost logs once that the client address is the left-most of the client IP headers,
// which the client writes, when the request came from a trusted proxy of a server that is not
// in trusted_proxies_strict mode.
func (h *Limit) warnLeftmost(r *http.Request) {
	trusted, _ := caddyhttp.GetVar(r.Context(), caddyhttp.TrustedProxyVarKey).(bool)
	if !trusted {
		return
	}
	srv, _ := r.Context().Value(caddyhttp.ServerCtxKey).(*caddyhttp.Server)
	if srv == nil || srv.TrustedProxiesStrict > 0 {
		return
	}
	h.warnLeftXF.Do(func() {
		if h.logger != nil {
			h.logger.Warn("retry_after_limit: the client address is the left-most X-Forwarded-For entry, which a client can choose to get a fresh key; set trusted_proxies_strict in the server's options")
		}
	})
}
