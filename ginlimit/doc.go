// Package ginlimit mounts a [retryafter.Middleware] in gin: a refused request is answered with
// the limiter's exact wait in Retry-After, and Date, as [retryafter.Limit] answers it, and gin's
// chain stops there.
//
//	limiter := retryafter.NewTokenBucket(10, 20) // 10 requests a second per client, bursts of 20
//	r := gin.New()
//	r.Use(ginlimit.New(retryafter.NewMiddleware(limiter)))
//
// Every option of the Middleware works, the key function included. The key is the key
// function's, read from the request: the default, [retryafter.ClientIP] with no trusted proxy,
// is the peer's address. gin's ClientIP, its trusted proxies and its RemoteIPHeaders play no
// part, so a client cannot choose its key by sending X-Forwarded-For or X-Real-IP, which gin
// believes from any peer by default. Behind a proxy, say so to the key function:
// retryafter.WithKeyFunc(retryafter.ClientIP(proxyPrefix)).
package ginlimit
