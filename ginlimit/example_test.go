package ginlimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/gin-gonic/gin"
	"golang.org/x/time/rate"

	"github.com/retryafter/retryafter"
	"github.com/retryafter/retryafter/ginlimit"
)

// A gin engine that admits one request an hour per client: the second is refused with the
// exact wait, and gin's chain stops before the route.
func Example() {
	gin.SetMode(gin.ReleaseMode)
	limiter := retryafter.NewTokenBucket(rate.Every(time.Hour), 1)
	r := gin.New()
	r.Use(ginlimit.New(retryafter.NewMiddleware(limiter)))
	r.GET("/hello", func(c *gin.Context) { c.String(http.StatusOK, "hello") })

	for range 2 {
		w := httptest.NewRecorder()
		r.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/hello", nil))
		fmt.Printf("%d Retry-After: %q\n", w.Code, w.Header().Get("Retry-After"))
	}
	// Output:
	// 200 Retry-After: ""
	// 429 Retry-After: "3600"
}
