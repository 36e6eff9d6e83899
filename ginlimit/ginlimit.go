package ginlimit

import (
	"net/http"
	"sync"

	"github.com/gin-gonic/gin"

	"github.com/retryafter/retryafter"
)

// New returns a gin handler that asks m about each request, through m's Handler: an admitted
// request continues gin's chain (with the request the Middleware passes on, in c.Request), and
// a refused one is answered as m answers it and the chain is aborted. Use it with r.Use, or in
// front of a group or a route. It panics if m is nil.
func New(m *retryafter.Middleware) gin.HandlerFunc {
	if m == nil {
		panic("ginlimit: nil Middleware")
	}
	h := m.Handler(http.HandlerFunc(next))
	return func(c *gin.Context) {
		w := carriers.Get().(*carrier)
		w.ResponseWriter, w.c = c.Writer, c
		h.ServeHTTP(w, c.Request)
		passed := w.passed
		*w = carrier{}
		carriers.Put(w)
		if !passed {
			c.Abort()
		}
	}
}

// A carrier is the ResponseWriter the Middleware is handed: gin's, carrying the gin.Context so
// that next, which the Middleware calls with what it was handed or a wrapper of it, finds it.
type carrier struct {
	gin.ResponseWriter
	c      *gin.Context
	passed bool // next ran: the Middleware admitted the request
}

// carriers holds carriers between requests, so that an admitted request allocates nothing here.
var carriers = sync.Pool{New: func() any { return new(carrier) }}

// Unwrap returns gin's ResponseWriter, for [http.ResponseController].
func (w *carrier) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// next continues gin's chain for a request the Middleware admitted. When the Middleware passes
// on a wrapper of the carrier (it holds back the answer to a request shaped as a CORS preflight
// until it shows what it is), the rest of the chain writes through that wrapper.
func next(w http.ResponseWriter, r *http.Request) {
	cw := carrierOf(w)
	cw.passed = true
	c := cw.c
	c.Request = r
	if w == http.ResponseWriter(cw) {
		c.Next()
		return
	}
	gw := c.Writer
	c.Writer = &through{ResponseWriter: gw, w: w}
	defer func() { c.Writer = gw }()
	c.Next()
}

// carrierOf returns the carrier that w is or wraps. It panics when there is none: the Middleware
// passed on a writer that hides what it wraps, and gin's chain cannot go on.
func carrierOf(w http.ResponseWriter) *carrier {
	for {
		switch x := w.(type) {
		case *carrier:
			return x
		case interface{ Unwrap() http.ResponseWriter }:
			w = x.Unwrap()
		default:
			panic("ginlimit: the Middleware passed on a ResponseWriter that does not unwrap to gin's")
		}
	}
}

// A through is gin's ResponseWriter with the response written through w, a wrapper of it that
// the Middleware passed on.
type through struct {
	gin.ResponseWriter
	w http.ResponseWriter
}

func (t *through) Header() http.Header               { return t.w.Header() }
func (t *through) WriteHeader(code int)              { t.w.WriteHeader(code) }
func (t *through) Write(b []byte) (int, error)       { return t.w.Write(b) }
func (t *through) WriteString(s string) (int, error) { return t.w.Write([]byte(s)) }
func (t *through) Flush()                            { _ = http.NewResponseController(t.w).Flush() }
func (t *through) Unwrap() http.ResponseWriter       { return t.w }

// WriteHeaderNow writes the status gin holds through w, which decides whether it may go out.
func (t *through) WriteHeaderNow() {
	if !t.ResponseWriter.Written() {
		t.w.WriteHeader(t.ResponseWriter.Status())
	}
	t.ResponseWriter.WriteHeaderNow()
}
