// Package otelmetrics records what retryafter's middleware decides, and how its stores fare, as
// OpenTelemetry metrics: decisions by outcome, policy and route, the Retry-After sent, requests
// near their limit, and for the stores the decision latency, the down state, the answers of the
// local refusal memory and the local-fallback mode.
//
//	m, err := otelmetrics.New(meterProvider)
//	limit := retryafter.LimitWith(m.Limiter("redis", store), m.Option())
//
// A gRPC server's decisions are recorded on the same instruments by [Metrics.CallDecided], a
// hook for grpclimit.WithDecisionHook, the gRPC method in place of the route:
//
//	grpclimit.UnaryServerInterceptor(m.Limiter("redis", store), grpclimit.WithDecisionHook(m.CallDecided))
//
// Every attribute is bounded by construction: the outcome (six values), the policy name (at most
// [WithMaxPolicies] of them, the rest folded into "_OTHER"), the route pattern the mux matched or
// the gRPC method (at most [WithMaxRoutes]), and the name a program gives each Limiter it wraps.
// The key and the client's address are never recorded, since the client chooses them.
//
// The instruments, named as OpenTelemetry's semantic conventions name metrics (a namespace,
// units in UCUM, counts as annotations, no "total"):
//
//	retryafter.decisions              counter    {decision}  retryafter.outcome, retryafter.policy.name, http.route or rpc.method
//	retryafter.retry_after            histogram  s           retryafter.policy.name, http.route or rpc.method
//	retryafter.near_limit.decisions   counter    {decision}  retryafter.policy.name, http.route or rpc.method
//	retryafter.waited                 histogram  s           retryafter.policy.name, http.route or rpc.method
//	retryafter.limiter.duration       histogram  s           retryafter.limiter.name, error.type
//	retryafter.limiter.down           gauge      {limiter}   retryafter.limiter.name
//	retryafter.limiter.local_answers  counter    {decision}  retryafter.limiter.name
//	retryafter.limiter.local_fallback gauge      {limiter}   retryafter.limiter.name
//
// The first four come from the hooks of [Metrics.Option] and [Metrics.CallDecided], the rest
// from the Limiters wrapped by [Metrics.Limiter].
package otelmetrics
