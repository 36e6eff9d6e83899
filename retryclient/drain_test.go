package retryclient

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// trickleBody is a response body that yields one byte per interval, for ever, until it is
// closed; a Read blocked on it returns as soon as it is closed.
type trickleBody struct {
	interval time.Duration
	closed   chan struct{}
	once     sync.Once
	read     atomic.Int64
}

func newTrickleBody(interval time.Duration) *trickleBody {
	return &trickleBody{interval: interval, closed: make(chan struct{})}
}

func (b *trickleBody) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	timer := time.NewTimer(b.interval)
	defer timer.Stop()
	select {
	case <-b.closed:
		return 0, errors.New("read on a closed body")
	case <-timer.C:
		p[0] = 'x'
		b.read.Add(1)
		return 1, nil
	}
}

func (b *trickleBody) Close() error {
	b.once.Do(func() { close(b.closed) })
	return nil
}

func (b *trickleBody) isClosed() bool {
	select {
	case <-b.closed:
		return true
	default:
		return false
	}
}

// TestTransportTrickleDoesNotHold answers 429 with Retry-After: 2 and a body that trickles a
// byte a second for ever, with no deadline on the request: the retry goes at exactly 2 s, the
// body having been drained during the wait and closed when it ended.
func TestTransportTrickleDoesNotHold(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		first := newTrickleBody(time.Second)
		start := time.Now()
		var tries []time.Duration
		base := transportFunc(func(req *http.Request) (*http.Response, error) {
			tries = append(tries, time.Since(start))
			if len(tries) == 1 {
				resp := answerTooMany(2)(time.Now())
				resp.Body = first
				return resp, nil
			}
			return respWith(http.StatusOK), nil
		})
		resp, err := (&Transport{Base: base}).RoundTrip(newTestRequest(t, http.MethodGet, nil))
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("RoundTrip = %v, %v; want 200", resp, err)
		}
		if want := []time.Duration{0, 2 * time.Second}; !sameDurations(tries, want) {
			t.Errorf("tries at %v, want %v", tries, want)
		}
		if !first.isClosed() {
			t.Error("the trickling body was not closed")
		}
		// Drained during the wait, not before it: about one byte a second of it.
		if n := first.read.Load(); n < 1 || n > 2 {
			t.Errorf("%d bytes drained in a wait of 2 s, want 1 or 2", n)
		}
	})
}

// TestTransportTrickleLoopback does the same over a real loopback server, with a 429 whose body
// trickles a byte every 5 ms for 2 s and a client whose own backoff waits 20 ms: the retry
// reaches the server before the first body has been sent whole, because the client closed it.
// Before, the drain read the whole body first, so the retry came only once it had ended.
func TestTransportTrickleLoopback(t *testing.T) {
	const bytes = 400
	var (
		tries       atomic.Int32
		sent        atomic.Int32 // bytes of the 429's body written
		sentAtRetry atomic.Int32
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if tries.Add(1) > 1 {
			sentAtRetry.Store(sent.Load())
			io.WriteString(w, "ok")
			return
		}
		w.WriteHeader(http.StatusTooManyRequests)
		flusher := w.(http.Flusher)
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for range bytes {
			select {
			case <-r.Context().Done():
				return
			case <-tick.C:
			}
			if _, err := w.Write([]byte{'x'}); err != nil {
				return
			}
			flusher.Flush()
			sent.Add(1)
		}
	}))
	defer srv.Close()
	base := &http.Transport{}
	defer base.CloseIdleConnections()
	tr := &Transport{Base: base, Backoff: &Backoff{Base: 20 * time.Millisecond, Max: 20 * time.Millisecond, Rand: constRand(1)}}
	req, err := http.NewRequest(http.MethodGet, srv.URL, nil) // no deadline
	if err != nil {
		t.Fatal(err)
	}
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || tries.Load() != 2 {
		t.Fatalf("status %d after %d tries; want 200 after 2", resp.StatusCode, tries.Load())
	}
	if n := sentAtRetry.Load(); n >= bytes {
		t.Errorf("the retry came once the 429's body had ended (%d of %d bytes sent): the drain held the request", n, bytes)
	}
}

// TestTransportDrainEndsWithContext cancels the request's context during the wait: RoundTrip
// returns at once and the trickling body is closed.
func TestTransportDrainEndsWithContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		body := newTrickleBody(time.Second)
		base := transportFunc(func(req *http.Request) (*http.Response, error) {
			resp := answerTooMany(60)(time.Now())
			resp.Body = body
			return resp, nil
		})
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			time.Sleep(3 * time.Second)
			cancel()
		}()
		start := time.Now()
		resp, err := (&Transport{Base: base}).RoundTrip(newTestRequest(t, http.MethodGet, nil).WithContext(ctx))
		if resp != nil || !errors.Is(err, context.Canceled) || time.Since(start) != 3*time.Second {
			t.Fatalf("RoundTrip = %v, %v after %v; want the context's error after 3s", resp, err, time.Since(start))
		}
		synctest.Wait()
		if !body.isClosed() {
			t.Error("the trickling body was not closed")
		}
	})
}
