package main

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// A recorder serves what next serves and records, for every request, when it came and what it
// carried.
type recorder struct {
	next http.Handler
	mu   sync.Mutex
	seen []recorded
}

type recorded struct {
	at                          time.Time
	method, auth, origin, agent string
	body                        string
}

func (rec *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	rec.mu.Lock()
	rec.seen = append(rec.seen, recorded{at: time.Now(), method: r.Method, auth: r.Header.Get("Authorization"),
		origin: r.Header.Get("Origin"), agent: r.Header.Get("User-Agent"), body: string(b)})
	rec.mu.Unlock()
	rec.next.ServeHTTP(w, r)
}

// TestPaceAndRequests checks that the probe seeks a refusal no faster than its pace, and sends
// the method, headers, body and Origin it is given with every request (no body with HEAD).
func TestPaceAndRequests(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{next: ours()}
		n := serve(t, rec)
		defer n.close()
		start := time.Now()
		p := Probe{URL: testURL, Transport: n.tr, Pace: 200 * time.Millisecond, Origin: testOrigin,
			Header: http.Header{"Authorization": {"Bearer t0ken"}}, Body: []byte(`{"q":1}`)}
		rep := p.Run(t.Context())
		if rep.Exit != exitPass {
			t.Fatalf("exit %d: %s", rep.Exit, verdicts(rep))
		}
		if len(rec.seen) != rep.Requests {
			t.Fatalf("served %d, reported %d", len(rec.seen), rep.Requests)
		}
		// 1 request a second, bursts of 5: at 200 ms apart the sixth, at 1 s, finds 1 token
		// back, and the refusal comes at 1.2 s.
		for i := range 7 {
			if got, want := rec.seen[i].at.Sub(start), time.Duration(i)*200*time.Millisecond; got != want {
				t.Errorf("request %d at %v, want %v", i+1, got, want)
			}
		}
		if rep.Refusal.Request != 7 {
			t.Errorf("first refusal at request %d, want 7", rep.Refusal.Request)
		}
		for i, s := range rec.seen {
			wantBody := `{"q":1}`
			if s.method == http.MethodHead {
				wantBody = ""
			}
			if s.auth != "Bearer t0ken" || s.origin != testOrigin || s.agent != "retryafter-check" || s.body != wantBody {
				t.Errorf("request %d (%s): Authorization %q, Origin %q, User-Agent %q, body %q", i+1, s.method, s.auth, s.origin, s.agent, s.body)
			}
		}
		if last := rec.seen[len(rec.seen)-1]; last.method != http.MethodHead {
			t.Errorf("the last request is a %s, want the HEAD", last.method)
		}
	})
}

// TestSenderBudgets checks each way the sender refuses to send.
func TestSenderBudgets(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := serve(t, hello())
		defer n.close()
		s := &sender{rt: n.tr, target: testURL, method: http.MethodGet, header: http.Header{},
			budget: 2, pace: time.Second, timeout: 10 * time.Second, start: time.Now(), now: time.Now, sleep: sleepContext}
		ctx := t.Context()

		// A wait that reaches the end of the time budget is refused before it starts.
		var tb *timeBudgetError
		if _, err := s.sendAt(ctx, time.Now().Add(10*time.Second), http.MethodGet); !errors.As(err, &tb) {
			t.Fatalf("sendAt at the deadline: %v, want a time budget error", err)
		}
		if s.sent != 0 || time.Since(s.start) != 0 {
			t.Fatalf("sent %d, slept %v: nothing should have happened", s.sent, time.Since(s.start))
		}
		// sendAt waits until its instant; one in the past goes at once.
		e, err := s.sendAt(ctx, time.Now().Add(3*time.Second), http.MethodGet)
		if err != nil || e.sent.Sub(s.start) != 3*time.Second || e.n != 1 {
			t.Fatalf("sendAt +3s: %+v, %v", e, err)
		}
		if e, err = s.sendAt(ctx, s.start, http.MethodGet); err != nil || e.sent.Sub(s.start) != 3*time.Second {
			t.Fatalf("sendAt in the past: %+v, %v", e, err)
		}
		// The request budget.
		if _, err := s.send(ctx, http.MethodGet); !errors.Is(err, errRequestBudget) {
			t.Fatalf("third request: %v, want the request budget", err)
		}
		if s.sent != 2 || len(n.served()) != 2 {
			t.Fatalf("sent %d, served %d", s.sent, len(n.served()))
		}

		// A cancelled context stops a wait.
		s2 := *s
		s2.sent, s2.budget = 0, 10
		cctx, cancel := context.WithCancel(ctx)
		time.AfterFunc(time.Second, cancel)
		if _, err := s2.sendAt(cctx, time.Now().Add(5*time.Second), http.MethodGet); !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled: %v", err)
		}
	})
}

// TestProbeInterrupted checks that a probe whose context ends reports what it had.
func TestProbeInterrupted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := serve(t, withCORS("", newSlidingWindow(5, 10*time.Second)))
		defer n.close()
		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(5*time.Second, cancel) // during the 10 s wait of the obey check
		rep := Probe{URL: testURL, Transport: n.tr}.Run(ctx)
		if rep.GaveUp != "interrupted" || rep.Exit != exitGaveUp {
			t.Fatalf("gave up %q, exit %d", rep.GaveUp, rep.Exit)
		}
		if c := rep.check(checkObey); c == nil || c.Result != NA || !strings.Contains(c.Seen, "not checked") {
			t.Fatalf("obey: %+v", c)
		}
		if c := rep.check(checkRetryAfter); c == nil || c.Result != Pass {
			t.Fatalf("retry-after: %+v", c)
		}
	})
}

// TestProbeCouldNotRun checks the report of a probe that got no response at all.
func TestProbeCouldNotRun(t *testing.T) {
	down := roundTripFunc(func(*http.Request) (*http.Response, error) { return nil, errors.New("connection refused") })
	rep := Probe{URL: testURL, Transport: down}.Run(t.Context())
	if want := "could not run: request 1 (GET): connection refused"; rep.GaveUp != want || rep.Exit != exitGaveUp || rep.Requests != 1 {
		t.Fatalf("gave up %q (want %q), exit %d, requests %d", rep.GaveUp, want, rep.Exit, rep.Requests)
	}
	rep = Probe{URL: "ftp://api.test/", Transport: down}.Run(t.Context())
	if !strings.HasPrefix(rep.GaveUp, "could not run: ") || rep.Requests != 0 {
		t.Fatalf("ftp: gave up %q, requests %d", rep.GaveUp, rep.Requests)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
