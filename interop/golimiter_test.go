package interop

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sethvargo/go-limiter"
	"github.com/sethvargo/go-limiter/httplimit"
	"github.com/sethvargo/go-limiter/memorystore"
)

// go-limiter's memorystore reads its clock through a //go:linkname to the runtime's time.now,
// which a synctest bubble does not fake (only time.Now and timers are), so inside a bubble its
// buckets would run on the real clock while everything else runs on the fake one. bubbleStore
// is memorystore's bucket transcribed from go-limiter v0.7.1 (memorystore/store.go: newBucket,
// take, tick, availableTokens), reading time.Now instead; the middleware in front of it, which
// writes the 429 and its Retry-After, is go-limiter's own httplimit. TestBubbleStoreIsMemorystore
// holds the transcription to the real store's answers.
type bubbleStore struct {
	tokens   uint64
	interval time.Duration

	mu   sync.Mutex
	data map[string]*bubbleBucket
}

var _ limiter.Store = (*bubbleStore)(nil)

type bubbleBucket struct {
	startTime       uint64 // ns since the epoch when the bucket was made
	maxTokens       uint64
	interval        time.Duration
	fillRate        float64
	availableTokens uint64
	lastTick        uint64
}

func newBubbleStore(tokens uint64, interval time.Duration) *bubbleStore {
	return &bubbleStore{tokens: tokens, interval: interval, data: map[string]*bubbleBucket{}}
}

func nowNano() uint64 { return uint64(time.Now().UnixNano()) }

func (s *bubbleStore) Take(_ context.Context, key string) (tokens, remaining, reset uint64, ok bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, found := s.data[key]
	if !found {
		b = &bubbleBucket{startTime: nowNano(), maxTokens: s.tokens, availableTokens: s.tokens,
			interval: s.interval, fillRate: float64(s.interval) / float64(s.tokens)}
		s.data[key] = b
	}
	now := nowNano()
	currTick := (now - b.startTime) / uint64(b.interval)
	tokens = b.maxTokens
	reset = b.startTime + (currTick+1)*uint64(b.interval)
	if b.lastTick < currTick {
		b.availableTokens = min(uint64(float64(currTick-b.lastTick)*b.fillRate), b.maxTokens)
		b.lastTick = currTick
	}
	if b.availableTokens > 0 {
		b.availableTokens--
		ok = true
		remaining = b.availableTokens
	}
	return tokens, remaining, reset, ok, nil
}

func (s *bubbleStore) Get(context.Context, string) (uint64, uint64, error) { return 0, 0, nil }

func (s *bubbleStore) Set(context.Context, string, uint64, time.Duration) error { return nil }

func (s *bubbleStore) Burst(context.Context, string, uint64) error { return nil }

func (s *bubbleStore) Close(context.Context) error { return nil }

// TestBubbleStoreIsMemorystore sends the same requests through go-limiter's httplimit to the
// real memorystore and to bubbleStore, on the real clock, and compares their answers where the
// clock cannot make them differ: with a window of an hour, the burst is admitted, the rest refused
// with the same headers, and the 429's Retry-After is the reset instant in time.RFC1123 ("UTC"),
// cut to the second; with a window of 10 ms, once at least two windows have passed since the
// last request (a lower bound only, so that a loaded machine cannot turn it), the bucket is
// whole again. That part waits 20 ms of real time.
func TestBubbleStoreIsMemorystore(t *testing.T) {
	const tokens = 3
	take := func(h http.Handler) *httptest.ResponseRecorder {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = "192.0.2.1:1234"
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	answer := func(w *httptest.ResponseRecorder) string {
		return fmt.Sprintf("%d remaining %s of %s", w.Code, w.Header().Get("X-RateLimit-Remaining"), w.Header().Get("X-RateLimit-Limit"))
	}
	for _, window := range []time.Duration{time.Hour, 10 * time.Millisecond} {
		real, err := memorystore.New(&memorystore.Config{Tokens: tokens, Interval: window})
		if err != nil {
			t.Fatal(err)
		}
		defer real.Close(context.Background())
		answers := map[string][]string{}
		for name, store := range map[string]limiter.Store{"memorystore": real, "bubbleStore": newBubbleStore(tokens, window)} {
			mw, err := httplimit.NewMiddleware(store, httplimit.IPKeyFunc())
			if err != nil {
				t.Fatal(err)
			}
			h := mw.Handle(ok)
			if window == time.Hour {
				for range tokens + 2 {
					start := time.Now()
					w := take(h)
					answers[name] = append(answers[name], answer(w))
					if w.Code != http.StatusTooManyRequests {
						continue
					}
					ra := w.Header().Get("Retry-After")
					at, err := time.Parse(time.RFC1123, ra)
					if err != nil || !strings.HasSuffix(ra, " UTC") || at.Before(start.Truncate(time.Second)) || at.After(start.Add(window)) {
						t.Fatalf("%s: Retry-After %q, want the reset within the hour in time.RFC1123, cut to the second (%v)", name, ra, err)
					}
				}
				continue
			}
			for range tokens + 1 {
				take(h) // spend the bucket, whatever the ticks do meanwhile
			}
			last := time.Now()
			for time.Since(last) < 2*window {
				time.Sleep(window)
			}
			answers[name] = append(answers[name], answer(take(h)))
		}
		if got, want := strings.Join(answers["bubbleStore"], ", "), strings.Join(answers["memorystore"], ", "); got != want {
			t.Fatalf("window %v: bubbleStore answered\n%s\nmemorystore answered\n%s", window, got, want)
		}
		t.Logf("window %v: both answered %s", window, strings.Join(answers["memorystore"], ", "))
	}
}
