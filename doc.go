// Package retryafter is HTTP middleware that tells clients the truth about when to come back.
//
//	r := chi.NewRouter()
//	r.Use(retryafter.Limit(rate.Every(200*time.Millisecond), 10)) // 5 req/s per client, bursts of 10
//
// # Refusals
//
// [Limit] counts each client's requests in a [TokenBucket] and answers those over the limit with
// 429 Too Many Requests, a Retry-After in delay-seconds and a Date, both from one clock reading.
// Retry-After is the limiter's own wait, rounded up, never 0: a client that waits exactly that
// long and retries is admitted (unless something else spent its quota), and one that waits a
// second less may not be. A refused request costs no quota. [LimitWith] takes any [Limiter]:
// packages httpratestore (go-chi/httprate's counters) and redisstore (several replicas, one
// limit) are the others of this repository. Options add the RateLimit fields
// ([WithRateLimitFields]), RFC 9457 problem details ([WithProblemDetails]), costs ([WithCost])
// and hooks for logs and metrics.
//
// Real APIs have several limits: [All] admits a request only when every one of its limiters
// does, and a refusal by any spends nothing in any, with the exact wait until all admit. A layer
// can count every client against one key ([Shared], for a whole service or a route) or be
// charged what a request really cost once it ran ([ChargedAfter] and [Charge], for tokens a
// model produced). A cost of 0 is a peek: the quota of a key, for a status endpoint, spending
// nothing; [Peek] puts it in the rate-limit fields of routes that are not limited. A handler
// that limits by something only it knows uses a [Middleware]'s Allow, and answers with the same
// 429.
//
// [Maintenance] is the 503 form: a switch that answers every request with Service Unavailable
// and a Retry-After that counts down to the announced end of the work.
//
// # Overload
//
// [Concurrency] lets at most so many requests run at once, may queue a few for a while, and
// sheds the rest with 503 and a Retry-After measured from how fast requests complete. When many
// clients are refused for one reason at once (that limit, the end of a maintenance with a
// ReturnRate, a [Shared] layer behind [Spread]), each is told a different, still honest wait, so
// that they come back at the rate the service can take rather than all in the same second.
//
// # Turning a limit on
//
// A key's plan can change while the server runs ([WithPolicyFunc]: free, pro, a customer's
// contract), and the RateLimit fields name it. Roll a limit out in three steps: run it with
// [WithDryRun], which refuses nothing and tells the hooks of [WithLimitedHook] and
// [WithDecisionHook] of each request it would have refused; watch them; then enforce. Health
// checks and internal traffic stay out with [WithExempt].
//
// # Errors
//
// A key function or a limiter that fails is never shown to the client: the request is answered
// 500 (key) or 503 with Retry-After: 1 (limiter), or admitted uncounted with [WithFailOpen], and
// the error goes to [WithErrorHook].
//
// # Client keys
//
// By default a client is its address, [ClientIP] with no trusted proxy: forwarding headers,
// which the client writes, play no part, and an IPv6 client is its /64. Behind proxies, name
// them: ClientIP(netip.MustParsePrefix("10.0.0.0/8")); behind a CDN or a proxy that writes
// Forwarded, name its field too ([ClientIPFrom]).
//
// # Memory
//
// A [TokenBucket] keeps every client until it needs the room, so that a client that comes back
// finds its bucket, and holds at most [WithMaxMemory] bytes (192 MiB by default, about a
// million IPv4 clients), whatever its keys weigh, without a goroutine. At the bound, clients
// whose bucket has refilled make room; a flood of new clients is refused, never admitted by
// forgetting one that is over its limit.
//
// # Browsers
//
// A cross-origin script reads a response only when it carries Access-Control-Allow-Origin,
// which CORS middleware sets, and then only the headers the response names in
// Access-Control-Expose-Headers. So mount CORS middleware before the limiter and the
// [Maintenance] switch (outside them: with chi, r.Use(cors.Handler(...)) first): mounted after
// them, it never runs for their refusals, and the page sees a network error rather than 429 and
// Retry-After. The middleware reports that order once ([ErrCORSMountOrder]), and on a request
// with an Origin names Retry-After, Date and the rate-limit fields in
// Access-Control-Expose-Headers, merging with what the CORS middleware set there.
//
// A CORS preflight (OPTIONS with Origin and Access-Control-Request-Method) is not the request
// it asks about: answered by CORS middleware on either side of the limiter, a [Concurrency] or
// a [Maintenance], it is never counted or refused. A request shaped as one that no CORS
// middleware answers, behind a handler that serves every method, is counted, takes a slot or is
// refused during maintenance as any other, and reaches the handler only when admitted. They are
// told apart by what next has answered before, by one rule for the three; preflight.go says
// how, and what a router with CORS middleware on some routes only costs.
//
// # Traefik
//
// Traefik runs its plugins in Yaegi, an interpreter of Go source. Package gateway and the
// maintenance 503 run there, as the plugins retryAfterNormalize and retryAfterMaintenance
// (module github.com/retryafter/retryafter/traefik); this package does not: Yaegi v0.16.1
// lacks atomic.Pointer[T], the min and max builtins and range over an int, and mis-assigns a
// pointer passed as an interface beside variadic arguments (in Limit). In Traefik, use its own
// RateLimit middleware, or this middleware in the service behind it.
//
// # The other side
//
// [ParseRetryAfter] is the strict reader of Retry-After that this package's own responses are
// held to. Package retryclient is the client side (a Backoff and a retrying Transport that read
// what servers send generously), package gateway repairs the Retry-After of upstreams behind a
// reverse proxy.
package retryafter
