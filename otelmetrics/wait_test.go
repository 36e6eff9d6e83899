package otelmetrics

import (
	"net/http"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/retryafter/retryafter"
)

// TestWaited: requests that wait for their place, through a wrapped TokenBucket, are counted as
// waited, apart from the admitted, and the time each waited is recorded.
func TestWaited(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rd := newReader(t)
		m := rd.m
		lim := m.Limiter("memory", retryafter.NewTokenBucket(10, 1))
		h := retryafter.LimitWith(lim, m.Option(), retryafter.WithWait(time.Second))(ok)
		const route = "/items/{id}"
		var wg sync.WaitGroup
		codes := make([]int, 3)
		for i := range codes {
			wg.Go(func() { codes[i] = serve(h, request("/items/7", "GET "+route)).Code })
		}
		wg.Wait()
		for _, c := range codes {
			if c != http.StatusOK {
				t.Fatalf("codes %v, want three 200s", codes)
			}
		}
		s := rd.collect()
		want(t, s, 1, "retryafter.decisions", decisions(retryafter.Admitted, "default", route)...)
		want(t, s, 2, "retryafter.decisions", decisions(retryafter.Waited, "default", route)...)
		want(t, s, 2, "retryafter.waited", quota("default", route)...)
		if p, _ := s.at("retryafter.waited", quota("default", route)...); p.sum < 0.2999 || p.sum > 0.3 {
			t.Fatalf("waited sum %v s, want the 0.1 + 0.2 s waited", p.sum)
		}
	})
}
