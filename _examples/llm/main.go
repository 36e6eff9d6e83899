// Command llm is an LLM-style API behind three limits, as the large model APIs have them:
//
//   - requests per minute, per API key: 10, in bursts of up to 5;
//   - tokens per minute, per API key: 3,000, charged after each answer with what the model
//     really produced, so a key may go into debt and is then refused until it is repaid;
//   - requests per minute for the whole service: 30, in bursts of 10.
//
// A refusal by any of them spends nothing in the others, and Retry-After is the exact wait until
// all three admit the request. The RateLimit fields report the limit that binds.
//
//	go run ./_examples/llm          # serve on 127.0.0.1:8080 (-addr to change)
//	go run ./_examples/llm -demo    # serve on a free port, send it requests, print what a client sees
//
//	curl -i -H 'Authorization: Bearer key-1' -d 'Tell me a story' http://127.0.0.1:8080/v1/completions
//
// In the demo, two clients share the service: key-1 asks for long answers, key-2 for short ones.
// key-1 soon owes tokens and is told to come back when its debt is repaid; key-2 goes on until
// the per-key request limit binds. The RateLimit fields of a 200 are written before the answer,
// so they show the quota the request found, not what it then cost:
//
//	   0s  key-1  200  used 1463 tokens  RateLimit: "api";r=4;t=6
//	   0s  key-2  200  used  114 tokens  RateLimit: "api";r=4;t=6
//	500ms  key-1  200  used  927 tokens  RateLimit: "api";r=1562;t=29
//	500ms  key-2  200  used   24 tokens  RateLimit: "api";r=3;t=12
//	   1s  key-1  200  used 1229 tokens  RateLimit: "api";r=660;t=47
//	   1s  key-2  200  used   35 tokens  RateLimit: "api";r=2;t=17
//	 1.5s  key-1  429  Retry-After: 11   RateLimit: "api";r=0;t=11
//	 1.5s  key-2  200  used   42 tokens  RateLimit: "api";r=1;t=23
//	   2s  key-2  200  used   99 tokens  RateLimit: "api";r=0;t=28
//	 2.5s  key-2  429  Retry-After: 4    RateLimit: "api";r=0;t=4
//	 6.5s  key-2  200  used   73 tokens  RateLimit: "api";r=0;t=30
//	  ...
//	12.5s  key-1  200  used 1154 tokens  RateLimit: "api";r=3;t=12
//	  13s  key-1  429  Retry-After: 23   RateLimit: "api";r=0;t=23
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"
	"golang.org/x/time/rate"

	"github.com/retryafter/retryafter"
)

// The limits, per minute.
const (
	requestsPerMinute = 10
	requestBurst      = 5
	tokensPerMinute   = 3000
	serviceRequests   = 30
	serviceBurst      = 10
)

// newAPI returns the API's handler: the completions route behind the three limits. model
// answers a prompt with the number of tokens it produced.
func newAPI(model func(prompt string) (answer string, tokens int)) http.Handler {
	perKey := retryafter.NewTokenBucket(rate.Every(time.Minute/requestsPerMinute), requestBurst)
	tokens := retryafter.NewTokenBucket(rate.Every(time.Minute/tokensPerMinute), tokensPerMinute)
	service := retryafter.NewTokenBucket(rate.Every(time.Minute/serviceRequests), serviceBurst)
	limits := retryafter.All(
		perKey,                                // each request costs 1
		retryafter.ChargedAfter(tokens),       // admitted while not in debt, charged the tokens used
		retryafter.Shared(service, "service"), // one limit for every key together
	)

	r := chi.NewRouter()
	r.With(retryafter.LimitWith(limits,
		retryafter.WithKeyFunc(apiKey),
		retryafter.WithRateLimitFields("api"),
		retryafter.WithProblemDetails(retryafter.ProblemDetails{Always: true}),
	)).Post("/v1/completions", func(w http.ResponseWriter, r *http.Request) {
		prompt, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		answer, used := model(string(prompt))
		retryafter.Charge(r, used) // the tokens the answer cost, charged once this returns
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"answer": answer, "usage": map[string]int{"total_tokens": used}})
	})
	return r
}

// apiKey names the client by its API key. A request without one is not limited by key: it is
// refused (500 by default), so that it cannot pass uncounted.
func apiKey(r *http.Request) (string, error) {
	key, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || key == "" {
		return "", errors.New("no API key")
	}
	return key, nil
}

// fakeModel answers with a random number of tokens, more for a prompt that asks for more.
func fakeModel(rng *rand.Rand) func(string) (string, int) {
	var mu sync.Mutex
	return func(prompt string) (string, int) {
		mu.Lock()
		defer mu.Unlock()
		n := 20 + rng.IntN(120)
		if strings.Contains(prompt, "long") {
			n = 600 + rng.IntN(1400)
		}
		return strings.Repeat("la ", min(n, 20)), n
	}
}

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "address to listen on")
	demo := flag.Bool("demo", false, "serve on a free loopback port, send it requests, print what a client sees, exit")
	flag.Parse()

	api := newAPI(fakeModel(rand.New(rand.NewPCG(1, 2))))
	if *demo {
		runDemo(api)
		return
	}
	fmt.Printf("listening on http://%[1]s; try:\n  curl -i -H 'Authorization: Bearer key-1' -d 'a long story' http://%[1]s/v1/completions\n", *addr)
	srv := &http.Server{Addr: *addr, Handler: api, ReadHeaderTimeout: 5 * time.Second}
	log.Fatal(srv.ListenAndServe())
}

// runDemo serves api on a free loopback port and sends it requests from two keys, obeying
// Retry-After, for about 20 seconds.
func runDemo(api http.Handler) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	srv := &http.Server{Handler: api, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	defer srv.Close()
	url := "http://" + ln.Addr().String() + "/v1/completions"

	start := time.Now()
	next := map[string]time.Time{"key-1": start, "key-2": start}
	prompts := map[string]string{"key-1": "a long story, please", "key-2": "yes or no?"}
	for time.Since(start) < 20*time.Second {
		key := "key-1"
		if next["key-2"].Before(next[key]) {
			key = "key-2"
		}
		time.Sleep(time.Until(next[key]))
		req, _ := http.NewRequest("POST", url, strings.NewReader(prompts[key]))
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			log.Fatal(err)
		}
		var body struct {
			Usage struct {
				Total int `json:"total_tokens"`
			} `json:"usage"`
		}
		json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		at := time.Since(start).Truncate(100 * time.Millisecond)
		if resp.StatusCode == http.StatusOK {
			fmt.Printf("%5v  %s  200  used %4d tokens  RateLimit: %s\n", at, key, body.Usage.Total, resp.Header.Get("RateLimit"))
			next[key] = time.Now().Add(500 * time.Millisecond)
			continue
		}
		wait, _ := retryafter.ParseRetryAfter(resp.Header, time.Now())
		fmt.Printf("%5v  %s  %d  Retry-After: %-4s RateLimit: %s\n", at, key, resp.StatusCode, resp.Header.Get("Retry-After"), resp.Header.Get("RateLimit"))
		next[key] = time.Now().Add(wait)
	}
}
