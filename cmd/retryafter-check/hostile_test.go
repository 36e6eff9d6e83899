package main

import (
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/retryafter/retryafter"
)

// Servers that answer to mislead the probe: a refusal whose body trickles, a 5xx or a redirect
// where an admission is due, a HEAD unlike its GET, megabytes of header fields on a refusal.

// An editor lets edit change the status and the header fields of each response of next, before
// they are written.
type editor struct {
	next http.Handler
	edit func(r *http.Request, status int, h http.Header) int
}

func (e editor) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	e.next.ServeHTTP(&editingWriter{ResponseWriter: w, r: r, edit: e.edit}, r)
}

type editingWriter struct {
	http.ResponseWriter
	r    *http.Request
	edit func(r *http.Request, status int, h http.Header) int
	done bool
}

func (w *editingWriter) WriteHeader(code int) {
	if !w.done {
		w.done = true
		code = w.edit(w.r, code, w.Header())
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *editingWriter) Write(b []byte) (int, error) {
	if !w.done {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(b)
}

// trickled sends the body of every 429 of next a byte a second.
func trickled(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next.ServeHTTP(&tricklingWriter{ResponseWriter: w}, r)
	})
}

type tricklingWriter struct {
	http.ResponseWriter
	status int
}

func (w *tricklingWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

func (w *tricklingWriter) Write(b []byte) (int, error) {
	if w.status != http.StatusTooManyRequests {
		return w.ResponseWriter.Write(b)
	}
	rc := http.NewResponseController(w.ResponseWriter)
	for i := range b {
		if _, err := w.ResponseWriter.Write(b[i : i+1]); err != nil {
			return i, err
		}
		rc.Flush()
		time.Sleep(time.Second)
	}
	return len(b), nil
}

// answersAfterRefusal answers the request after each refusal of next with status (a redirect
// to the same URL for a 3xx), without asking next.
func answersAfterRefusal(status int, next http.Handler) http.Handler {
	var mu sync.Mutex
	refused := false
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		after := refused
		refused = false
		mu.Unlock()
		if after {
			if status >= 300 && status < 400 {
				w.Header().Set("Location", r.URL.String())
			}
			http.Error(w, http.StatusText(status), status)
			return
		}
		next.ServeHTTP(editingFunc(w, r, func(_ *http.Request, code int, _ http.Header) int {
			mu.Lock()
			refused = code == http.StatusTooManyRequests
			mu.Unlock()
			return code
		}), r)
	})
}

func editingFunc(w http.ResponseWriter, r *http.Request, edit func(*http.Request, int, http.Header) int) http.ResponseWriter {
	return &editingWriter{ResponseWriter: w, r: r, edit: edit}
}

// limit3 is this package's middleware at 1 request a second with bursts of 3.
func limit3() http.Handler { return retryafter.Limit(1, 3)(hello()) }

// padding is the size of the fields hugeFields adds to a refusal.
const padding = 4 << 20

// hugeFields adds padding bytes of fields to every refusal of next: 4096 fields of 1 KiB that
// no check reads, and one X-RateLimit-Note of 1 MiB, which is one of the rate-limit fields.
func hugeFields(next http.Handler) http.Handler {
	kib := strings.Repeat("x", 1<<10)
	return editor{next: next, edit: func(_ *http.Request, status int, h http.Header) int {
		if status == http.StatusTooManyRequests {
			for i := range (padding - 1<<20) >> 10 {
				h["X-Pad-"+strconv.Itoa(i)] = []string{kib}
			}
			h["X-Ratelimit-Note"] = []string{strings.Repeat("y", 1<<20)}
		}
		return status
	}}
}

var hostileCases = []probeCase{
	{
		// 3 requests a 10.4 s window, always told 2 s, each refusal's 18-byte body sent a byte
		// a second: the obeying retry, due 2 s after the refusal, can go only 18 s after, and
		// HEAD, due right after a refused GET, as late.
		name: "trickled body, retry due before the body ends", noOrig: true,
		server: func() http.Handler {
			return trickled(&fixedWindow{limit: 3, window: 10400 * time.Millisecond, says: func(_, _ time.Duration) string { return "2" }})
		},
		want: "retry-after=pass date=pass obey=fail tight=n/a refusal-free=n/a head=n/a cors=n/a ratelimit=n/a",
		seen: map[string]string{
			checkObey:  `told Retry-After "2", the retry went 18 s after the refusal: it went 16 s late, the body of request 4 having taken 18 s to read; then: admitted (200 OK): a retry more than 0.5 s late shows nothing of obeying`,
			checkTight: "the early retry went 17.1 s late, the body of request 8 having taken 18 s to read, which tells nothing of a second early",
			checkHEAD:  "the body of GET's refusal took 18 s to read",
		},
		exit: exitFail,
	},
	{
		name: "500 after each refusal", noOrig: true,
		server: func() http.Handler { return answersAfterRefusal(http.StatusInternalServerError, limit3()) },
		want:   "retry-after=pass date=pass obey=n/a tight=n/a refusal-free=n/a head=n/a cors=n/a ratelimit=n/a",
		seen: map[string]string{
			checkObey: "waited 1 s as told, then retried: answered 500 Internal Server Error, neither admitted nor refused: obeying cannot be judged",
			checkHEAD: "HEAD answered 500 Internal Server Error, neither admitted nor refused",
		},
	},
	{
		name: "502 after each refusal", noOrig: true,
		server: func() http.Handler { return answersAfterRefusal(http.StatusBadGateway, limit3()) },
		want:   "retry-after=pass date=pass obey=n/a tight=n/a refusal-free=n/a head=n/a cors=n/a ratelimit=n/a",
		seen:   map[string]string{checkObey: "then retried: answered 502 Bad Gateway, neither admitted nor refused"},
	},
	{
		name: "302 after each refusal", noOrig: true,
		server: func() http.Handler { return answersAfterRefusal(http.StatusFound, limit3()) },
		want:   "retry-after=pass date=pass obey=n/a tight=n/a refusal-free=n/a head=n/a cors=n/a ratelimit=n/a",
		seen:   map[string]string{checkObey: "then retried: answered 302 Found, neither admitted nor refused"},
	},
	{
		// GET is told "1.5", HEAD "soon": only GET's reads as a wait.
		name: "HEAD told no wait", noOrig: true,
		server: func() http.Handler {
			return editor{next: limit3(), edit: func(r *http.Request, status int, h http.Header) int {
				if status == http.StatusTooManyRequests {
					h.Set("Retry-After", "1.5")
					if r.Method == http.MethodHead {
						h.Set("Retry-After", "soon")
					}
				}
				return status
			}}
		},
		want: "retry-after=fail date=pass obey=pass tight=fail refusal-free=n/a head=fail cors=n/a ratelimit=n/a",
		seen: map[string]string{checkHEAD: `Retry-After "soon" for HEAD reads as no wait, "1.5" for GET does`},
		exit: exitFail,
	},
	{
		// GitHub's 403 on GET, a plain 403 on HEAD.
		name: "HEAD a plain 403", noOrig: true,
		server: func() http.Handler {
			return editor{next: &tokenBucket{noRetryAfter: true, fields: "github"}, edit: func(r *http.Request, status int, h http.Header) int {
				if r.Method == http.MethodHead {
					h.Del("X-Ratelimit-Remaining")
					h.Del("X-Ratelimit-Reset")
				}
				return status
			}}
		},
		want: "retry-after=fail date=pass obey=pass tight=n/a refusal-free=pass head=fail cors=n/a ratelimit=n/a",
		seen: map[string]string{checkHEAD: "HEAD answered 403 Forbidden, which is no refusal, right after GET was refused (403 Forbidden)"},
		exit: exitFail,
	},
	{
		name: "HEAD 405", noOrig: true,
		server: func() http.Handler {
			return editor{next: limit3(), edit: func(r *http.Request, status int, h http.Header) int {
				if r.Method == http.MethodHead {
					h.Set("Allow", "GET")
					return http.StatusMethodNotAllowed
				}
				return status
			}}
		},
		want: "retry-after=pass date=pass obey=pass tight=n/a refusal-free=pass head=n/a cors=n/a ratelimit=n/a",
		seen: map[string]string{checkHEAD: "HEAD answered 405 Method Not Allowed: the server does not serve HEAD here, which says nothing of its limiter"},
	},
	{
		name: "HEAD 501", noOrig: true,
		server: func() http.Handler {
			return editor{next: limit3(), edit: func(r *http.Request, status int, h http.Header) int {
				if r.Method == http.MethodHead {
					return http.StatusNotImplemented
				}
				return status
			}}
		},
		want: "retry-after=pass date=pass obey=pass tight=n/a refusal-free=pass head=n/a cors=n/a ratelimit=n/a",
		seen: map[string]string{checkHEAD: "HEAD answered 501 Not Implemented"},
	},
	{
		name: "4 MiB of fields on every refusal", noOrig: true,
		server: func() http.Handler { return hugeFields(limit3()) },
		want:   "retry-after=pass date=pass obey=pass tight=n/a refusal-free=pass head=pass cors=n/a ratelimit=n/a",
	},
}

// TestHostile holds the probe to its verdicts against servers that answer to mislead it.
func TestHostile(t *testing.T) {
	for _, c := range hostileCases {
		t.Run(c.name, func(t *testing.T) { checkCase(t, c) })
	}
}

// TestKeptFieldsBounded sends refusals of 4 MiB of fields each and checks that what the probe
// keeps of them, live on the heap after a collection, stays under a quarter of one refusal's
// worth however many it met, and that it kept what the checks read.
func TestKeptFieldsBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := serve(t, hugeFields(limit3()))
		defer n.close()
		s := &sender{rt: n.tr, target: testURL, method: http.MethodGet, header: http.Header{},
			budget: 100, pace: time.Millisecond, timeout: time.Hour, start: time.Now(), now: time.Now, sleep: sleepContext}
		var before, after runtime.MemStats
		runtime.GC()
		runtime.GC()
		runtime.ReadMemStats(&before)
		const sends = 12 // 3 admitted, then 9 refusals
		for range sends {
			if _, err := s.send(t.Context(), http.MethodGet); err != nil {
				t.Fatal(err)
			}
		}
		runtime.GC()
		runtime.GC() // twice, to empty the pools' victim caches too
		runtime.ReadMemStats(&after)
		grew := int64(after.HeapAlloc) - int64(before.HeapAlloc)
		if len(s.refusals) != sends-3 {
			t.Fatalf("%d refusals, want %d", len(s.refusals), sends-3)
		}
		if grew > padding/4 {
			t.Errorf("after %d refusals of %d MiB of fields each, the live heap grew by %.1f MiB: the probe keeps what no check reads",
				len(s.refusals), padding>>20, float64(grew)/(1<<20))
		}
		for _, e := range s.refusals {
			if e.header.Get("Retry-After") == "" || e.header.Get("Date") == "" {
				t.Errorf("request %d: kept %d fields, without Retry-After or Date", e.n, len(e.header))
			}
		}
		runtime.KeepAlive(s)
		t.Logf("%d refusals of %d MiB of fields: the live heap grew by %d bytes", len(s.refusals), padding>>20, grew)
	})
}
