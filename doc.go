// Package retryafter is HTTP middleware that tells clients the truth about when to come back.
//
//	r := chi.NewRouter()
//	r.Use(retryafter.Limit(rate.Every(200*time.Millisecond), 10)) // 5 req/s per client, bursts of 10
//
// [Limit] counts each client's requests in a [TokenBucket] and answers those over the limit with
// 429 Too Many Requests, a Retry-After in delay-seconds and a Date, both from one clock reading.
// Retry-After is the limiter's own wait, rounded up, never 0: a client that waits exactly that
// long and retries is admitted (unless something else spent its quota), and one that waits a
// second less may not be. A refused request costs no quota. [LimitWith] takes any [Limiter]
// (packages httpratestore and redisstore hold the others of this repository); [All], [Shared],
// [ChargedAfter] and [Peek] compose them, for the several limits of a real API. Options add the
// RateLimit fields, problem details, costs, plans per key that change live ([WithPolicyFunc]),
// a dry run to roll a limit out ([WithDryRun]), exemptions and hooks.
//
// [Maintenance] answers every request with 503 and a Retry-After counting down to the announced
// end of the work; package overload's Concurrency sheds overload with 503 and a wait measured
// from how fast requests complete. When many clients are refused for one reason at once, each is told a
// different, still honest wait ([Spread]), so that they come back at the rate the service takes.
//
// A client is its connection's address ([ClientIP]): forwarding headers count only from the
// proxies you name. A key function or a limiter that fails is never shown to the client
// ([WithErrorHook], [WithFailOpen]). A TokenBucket's memory is bounded ([WithMaxMemory]), and a
// flood of new clients never makes it forget one that is over its limit.
//
// # Browsers
//
// Mount CORS middleware before the limiter and the Maintenance switch: mounted after them, it
// never runs for their refusals, and the page sees a network error rather than 429 and its
// Retry-After ([ErrCORSMountOrder] reports that order). A CORS preflight that CORS middleware
// answers, on either side, is never counted or refused; a request only shaped as one is counted,
// takes a slot or is refused during maintenance as any other (package internal/door says how).
//
// # The other side
//
// [ParseRetryAfter] is the strict reader of Retry-After that this package's responses are held
// to. Package retryclient is the client side, package gateway repairs the Retry-After of
// upstreams behind a reverse proxy, and module traefik runs gateway and the maintenance 503 as
// Traefik plugins (this package does not run in Traefik's interpreter, Yaegi).
package retryafter
