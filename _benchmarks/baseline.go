package benchmarks

import (
	"net/http"
	"sync"

	"golang.org/x/time/rate"
)

// Baseline is the hand-written limiter every ratio in this folder is taken against: one
// [rate.Limiter] per key in a map behind one [sync.Mutex], asked [rate.Limiter.Allow]. A
// refused request gets a bare 429 status line. It is safe for concurrent use.
type Baseline struct {
	mu    sync.Mutex
	keys  map[string]*rate.Limiter
	limit rate.Limit
	burst int
	key   func(*http.Request) (string, error)
	next  http.Handler
}

// NewBaseline returns a Baseline that lets each client, named by key, make requests at limit
// per second with bursts of up to burst, and passes them to next.
func NewBaseline(limit rate.Limit, burst int, key func(*http.Request) (string, error), next http.Handler) *Baseline {
	return &Baseline{keys: make(map[string]*rate.Limiter), limit: limit, burst: burst, key: key, next: next}
}

// ServeHTTP answers 500 when key fails, 429 when the client's limiter refuses, and passes the
// request to next otherwise.
func (b *Baseline) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key, err := b.key(r)
	if err != nil {
		http.Error(w, "no key", http.StatusInternalServerError)
		return
	}
	b.mu.Lock()
	lim, ok := b.keys[key]
	if !ok {
		lim = rate.NewLimiter(b.limit, b.burst)
		b.keys[key] = lim
	}
	b.mu.Unlock()
	if !lim.Allow() {
		w.WriteHeader(http.StatusTooManyRequests)
		return
	}
	b.next.ServeHTTP(w, r)
}
