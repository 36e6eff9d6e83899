package edges

import (
	"net/http"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/labstack/echo/v4"
	ulule "github.com/ulule/limiter/v3"
	mgin "github.com/ulule/limiter/v3/drivers/middleware/gin"
	"github.com/ulule/limiter/v3/drivers/store/memory"
	"golang.org/x/time/rate"

	"github.com/retryafter/retryafter"
	"github.com/retryafter/retryafter/ginlimit"
)

// A path is what the limiter answers every request of a benchmark: admitted (2^30 tokens an
// hour, bursts of 2^30) or refused (one an hour, spent by a first request before the timer).
type path struct {
	name  string
	n     int64 // requests an hour
	burst int
}

var paths = []path{{"admitted", 1 << 30, 1 << 30}, {"refused", 1, 1}}

func (p path) limit() rate.Limit { return rate.Every(time.Hour) * rate.Limit(p.n) }

// BenchmarkGin sends one request after another from one client through a gin engine whose
// route answers 200 with no body: bare, behind ginlimit (a TokenBucket, keyed by the peer's
// address) and behind ulule/limiter's gin middleware (its memory store, keyed by gin's
// ClientIP).
func BenchmarkGin(b *testing.B) {
	gin.SetMode(gin.ReleaseMode)
	for _, p := range paths {
		for _, lib := range []struct {
			name string
			mw   func(path) gin.HandlerFunc // nil: bare
		}{
			{"bare", nil},
			{"ginlimit", func(p path) gin.HandlerFunc {
				return ginlimit.New(retryafter.NewMiddleware(retryafter.NewTokenBucket(p.limit(), p.burst)))
			}},
			{"ulule", func(p path) gin.HandlerFunc {
				return mgin.NewMiddleware(ulule.New(memory.NewStore(), ulule.Rate{Period: time.Hour, Limit: p.n}))
			}},
		} {
			if lib.mw == nil && p.name == "refused" {
				continue
			}
			b.Run("path="+p.name+"/lib="+lib.name, func(b *testing.B) {
				r := gin.New()
				if lib.mw != nil {
					r.Use(lib.mw(p))
				}
				r.GET("/x", func(c *gin.Context) { c.Status(http.StatusOK) })
				run(b, r, p.name == "refused")
			})
		}
	}
}

// BenchmarkEcho is BenchmarkGin for echo: bare, retryafter.Limit mounted by
// echo.WrapMiddleware (lib=retryafter), and retryafter.Limit around the whole echo server, an
// http.Handler (lib=retryafter-outside).
func BenchmarkEcho(b *testing.B) {
	for _, p := range paths {
		for _, lib := range []string{"bare", "retryafter", "retryafter-outside"} {
			if lib == "bare" && p.name == "refused" {
				continue
			}
			b.Run("path="+p.name+"/lib="+lib, func(b *testing.B) {
				e := echo.New()
				var h http.Handler = e
				switch lib {
				case "retryafter":
					e.Use(echo.WrapMiddleware(retryafter.Limit(p.limit(), p.burst)))
				case "retryafter-outside":
					h = retryafter.Limit(p.limit(), p.burst)(e)
				}
				e.GET("/x", func(c echo.Context) error { return c.NoContent(http.StatusOK) })
				run(b, h, p.name == "refused")
			})
		}
	}
}

// run sends h b.N requests from one client, after a first one that spends the burst of a
// refused path, and fails unless each is answered as the path says.
func run(b *testing.B, h http.Handler, refused bool) {
	req, err := http.NewRequest(http.MethodGet, "http://api.test/x", nil)
	if err != nil {
		b.Fatal(err)
	}
	req.RemoteAddr = "203.0.113.7:50000"
	req.RequestURI = "/x"
	w := &writer{h: http.Header{}}
	want := http.StatusOK
	if refused {
		h.ServeHTTP(w, req)
		want = http.StatusTooManyRequests
	}
	b.ReportAllocs()
	for b.Loop() {
		clear(w.h)
		w.code = 0
		h.ServeHTTP(w, req)
	}
	if w.code != want {
		b.Fatalf("answered %d, want %d", w.code, want)
	}
}

// writer is a ResponseWriter that keeps the status and the header and drops the body, reused
// from one request to the next.
type writer struct {
	h    http.Header
	code int
}

func (w *writer) Header() http.Header  { return w.h }
func (w *writer) WriteHeader(code int) { w.code = code }
func (w *writer) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return len(b), nil
}
