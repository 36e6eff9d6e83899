// Package retryaftercaddy brings retryafter into Caddy: two HTTP handler modules, each with a
// Caddyfile directive that needs no order line.
//
//   - retry_after_limit (http.handlers.retry_after_limit) limits requests per key with the root
//     package's token bucket and answers 429 with an exact, rounded-up Retry-After and a Date
//     from the same clock reading; it can also answer 503 for a maintenance window and send the
//     RateLimit fields. It runs before basic_auth, so that every request is counted before
//     any work is done for it.
//   - retry_after_normalize (http.handlers.retry_after_normalize) repairs the Retry-After of
//     responses coming back through reverse_proxy with the gateway package's Normalizer. It
//     runs before invoke, handle, route and every directive that answers, reverse_proxy among
//     them, and after the ones that wrap the response (encode, intercept, templates).
//   - admin.api.retry_after_maintenance turns the maintenance switches of retry_after_limit on
//     and off on Caddy's admin endpoint, without a reload (see [MaintenanceAdmin]).
//
// Import it for its side effect, in the main package of a Caddy build:
//
//	import _ "github.com/retryafter/retryafter/caddy"
package retryaftercaddy
