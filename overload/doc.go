// Package overload sheds the load a server cannot take, with the same honest wait as the root
// package's rate limits: [Concurrency] lets at most Max requests run at once, queues a bounded
// few for a bounded time, and answers the rest 503 Service Unavailable with a Retry-After
// measured from how fast requests complete, and a Date from the same clock reading.
//
// It mounts beside the root package's Limit, in either order, and behind its Maintenance.
package overload
