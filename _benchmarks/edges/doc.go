// Package edges measures what the limiter costs a request in the web frameworks it mounts in:
// gin (bare, ginlimit, and ulule/limiter's gin middleware), echo (bare, and retryafter.Limit
// mounted two ways) and Connect (a bare handler, and connectlimit). EDGES.md in the folder above
// holds the tables and their commands.
package edges
