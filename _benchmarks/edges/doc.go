// Package edges measures what the limiter costs a request in the web frameworks it mounts in:
// gin (bare, ginlimit, and ulule/limiter's gin middleware) and echo (bare, and
// echo.WrapMiddleware(retryafter.Limit(...))). EDGES.md in the folder above holds the table and
// its commands.
package edges
