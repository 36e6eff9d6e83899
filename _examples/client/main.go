// Command client sends requests through retryafter's retrying Transport and prints, for each
// try, the status, the server's Retry-After and the wait the Transport chose, then a summary.
//
// Start the example server, then run the client against it:
//
//	go run ./_examples/chi-server &
//	go run ./_examples/client                      # 10 requests, all at once
//	go run ./_examples/client -n 20 -parallel 5 -jitter 2s
//	go run ./_examples/client -url http://127.0.0.1:9090/
//
// The server allows 1 request per second per client with bursts of 5, so requests beyond the
// fifth are answered 429 with Retry-After: 1 and wait their turn. Put the server into
// maintenance (see its doc) to see 503s and longer waits. Ten requests at once:
//
//	$ go run ./_examples/client
//	  0.002s  req  4  done: 200 OK after 1ms
//	  0.002s  req  3  try 1: 429 Too Many Requests  Retry-After: 1      -> waiting 1s
//	  0.002s  req  2  try 1: 429 Too Many Requests  Retry-After: 1      -> waiting 1s
//	  ...
//	  1.003s  req  7  done: 200 OK after 1.002s
//	  1.003s  req  8  try 2: 429 Too Many Requests  Retry-After: 1      -> waiting 1s
//	  ...
//	  5.007s  req  2  done: 200 OK after 5.007s
//
//	10 requests: 10 succeeded, 0 failed; 25 tries, 15 answered 429, 0 answered 503; 5.007s in all
//
// The burst of 5 goes through at once; each of the other 5 is told 1 (the next token), comes
// back exactly then, and one of them gets it each second: 5 + 4 + 3 + 2 + 1 = 15 429s, all done
// in 5 s. With -jitter 2s the same clients spread out and collect fewer 429s (10 in one run).
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/retryafter/retryafter/retryclient"
)

// reqID is the context key under which each request carries its number, so that OnRetry, which
// sees the response, can tell which request it belongs to.
type reqID struct{}

func main() {
	url := flag.String("url", "http://127.0.0.1:8080/", "URL to GET")
	n := flag.Int("n", 10, "number of requests")
	parallel := flag.Int("parallel", 10, "requests in flight at once")
	attempts := flag.Int("attempts", 10, "most tries of one request, the first included")
	jitter := flag.Duration("jitter", 0, "most random time added to the server's Retry-After")
	maxWait := flag.Duration("cap", 5*time.Minute, "longest wait before a retry; a server that asks for more gets its answer back at once")
	timeout := flag.Duration("timeout", 2*time.Minute, "deadline of each request, retries included")
	flag.Parse()
	if *n < 1 || *parallel < 1 || *attempts < 1 {
		fmt.Fprintln(os.Stderr, "client: -n, -parallel and -attempts must be at least 1")
		os.Exit(2)
	}

	start := time.Now()
	var mu sync.Mutex
	printf := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Printf("%7.3fs  "+format+"\n", append([]any{time.Since(start).Seconds()}, args...)...)
	}

	var tries, too, unavailable atomic.Int64
	count := func(status int) {
		tries.Add(1)
		switch status {
		case http.StatusTooManyRequests:
			too.Add(1)
		case http.StatusServiceUnavailable:
			unavailable.Add(1)
		}
	}

	backoff := &retryclient.Backoff{Jitter: *jitter, Cap: *maxWait}
	client := &http.Client{
		Timeout: *timeout,
		Transport: &retryclient.Transport{
			Backoff:     backoff,
			MaxAttempts: *attempts,
			OnRetry: func(resp *http.Response, attempt int, wait time.Duration) {
				count(resp.StatusCode)
				id, _ := resp.Request.Context().Value(reqID{}).(int)
				printf("req %2d  try %d: %s  Retry-After: %-6s -> waiting %v",
					id, attempt, resp.Status, quote(resp.Header.Values("Retry-After")), wait)
			},
		},
	}

	var ok, failed atomic.Int64
	sem := make(chan struct{}, *parallel)
	var wg sync.WaitGroup
	for id := 1; id <= *n; id++ {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			ctx := context.WithValue(context.Background(), reqID{}, id)
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, *url, nil)
			if err != nil {
				log.Fatal(err)
			}
			sent := time.Now()
			resp, err := client.Do(req)
			if err != nil {
				failed.Add(1)
				printf("req %2d  failed after %v: %v", id, time.Since(sent).Round(time.Millisecond), err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			count(resp.StatusCode)
			if resp.StatusCode >= 400 {
				failed.Add(1)
			} else {
				ok.Add(1)
			}
			why := ""
			if _, err := backoff.Delay(resp, 1); err != nil {
				why = " (" + err.Error() + ")" // a wait above -cap: not retried
			}
			printf("req %2d  done: %s after %v%s", id, resp.Status, time.Since(sent).Round(time.Millisecond), why)
		})
	}
	wg.Wait()

	fmt.Printf("\n%d requests: %d succeeded, %d failed; %d tries, %d answered 429, %d answered 503; %v in all\n",
		*n, ok.Load(), failed.Load(), tries.Load(), too.Load(), unavailable.Load(), time.Since(start).Round(time.Millisecond))
}

// quote returns the field values as the server sent them, or "none".
func quote(vs []string) string {
	switch len(vs) {
	case 0:
		return "none"
	case 1:
		return vs[0]
	}
	return fmt.Sprintf("%q", vs)
}
