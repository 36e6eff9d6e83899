package edge

// A Layer is one limit of a request that the root package's All decides in several Limiters:
// a Limiter, the key it counts the request against, and when it is charged. Its Shared and
// ChargedAfter make layers; All takes them apart into this form for the Limiters that decide
// several layers at once ([Combiner]).
type Layer struct {
	// Limiter decides the layer.
	Limiter Limiter

	// Key returns the key the layer counts a request of key k against. If nil, it is k.
	Key func(k string) string

	// Deferred marks a layer that admits a request while its key is not in debt, deciding at
	// cost 0, and is charged the request's real cost afterwards (the root package's
	// ChargedAfter).
	Deferred bool
}

// A Combiner is a Limiter that can decide several layers of its own kind in one atomic step:
// all admit and each spends, or none spends. The root package's All uses it: its TokenBucket
// combines with the other TokenBuckets of the process, and redisstore with the Stores of the
// same Redis, in one script. Implementing it is for Limiters that keep their counts where one
// step can reach them all.
type Combiner interface {
	Limiter

	// Combine returns a Limiter that decides a request in every one of layers, all or nothing,
	// in one atomic step, with the Decision of the layer that binds ([Binding]); ok is false
	// when it cannot take them all (a layer of another kind or another store). Its Decide must
	// keep the contract of [Limiter] for the request as a whole.
	Combine(layers []Layer) (l Limiter, ok bool)
}

// A Composite is a Limiter that decides through others: what the root package's All, Shared,
// ChargedAfter and Peek return. An edge sees the layers of a Composite, so a Limiter that wraps
// another to observe it (package otelmetrics) wraps those a Composite is made of, not the
// Composite.
type Composite interface {
	Limiter

	// Unwrap returns, in a new slice, the Limiters it decides through, in order.
	Unwrap() []Limiter
}
