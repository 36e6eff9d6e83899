// ginlimit/README.md's quick start, as a user builds it.
package main

import (
	"log"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/retryafter/retryafter"
	"github.com/retryafter/retryafter/ginlimit"
)

func main() {
	// snippet from ginlimit/README.md
	limiter := retryafter.NewTokenBucket(10, 20) // 10 requests a second per client, bursts of 20
	r := gin.New()
	r.Use(ginlimit.New(retryafter.NewMiddleware(limiter)))
	r.GET("/hello", func(c *gin.Context) { c.String(http.StatusOK, "hello") })
	// end of snippet
	log.Fatal(r.Run("127.0.0.1:8080"))
}
