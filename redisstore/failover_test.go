package redisstore

import (
	"fmt"
	"net/http"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// TestFailover kills a master of a Redis Cluster of the test's own while a fleet of 3 replicas
// sends requests for 12 keys, spread over the three masters, at 10 times their limit (20/s,
// bursts of 5), failing closed, and goes on until the master's replica has been promoted and
// every key has been admitted again, and then 1 s more. Replication is asynchronous: the
// promoted replica may have lost the last writes of the keys it takes over, so those keys may
// get up to one more burst. The test holds that bound per key, admitted ≤ 2 × burst + limit ×
// elapsed + 1 (burst + limit × elapsed + 1 for the keys of the other masters), checks that
// every request was answered within the timeout and a margin, that the failures were 503 with
// Retry-After: 1, and that the keys of the killed master are decided again once its replica
// serves them. Run with -v for the figures: over-admission per key, how long the keys of the
// killed master failed, and what the others saw.
func TestFailover(t *testing.T) {
	if testing.Short() {
		// Its only code no other test reaches, the reload of the slot map after a failure, holds
		// no mutant; so the mutation run (TESTING.md) skips its seconds of failover.
		t.Skip("-short: a cluster of its own and a failover take seconds")
	}
	const (
		limit   = 20
		burst   = 5
		keys    = 12
		workers = 8
		timeout = 100 * time.Millisecond
		probe   = 200 * time.Millisecond
		margin  = time.Second // scheduling on a loaded machine
	)
	c := startCluster(t)
	addrs := c.Addrs()
	prefix := testPrefix(t)
	masters := mastersOf(t, newClusterClient(t, addrs), fleetKeys(prefix))
	victimAddr := masters[0]
	var victim *server
	for _, n := range c.Nodes {
		if n.Addr() == victimAddr {
			victim = n
		}
	}
	onVictim := map[int]bool{}
	for k, m := range masters {
		onVictim[k] = m == victimAddr
	}
	srvs := replicas(t, clusterClients(t, addrs), 3, limit, burst,
		[]Option{WithPrefix(prefix), WithTimeout(timeout), WithProbeInterval(probe)}, byHeader)

	type answer struct {
		at, took time.Duration // since start
		key      int
		status   int
		retry    string
	}
	var mu sync.Mutex
	var answers []answer
	var killedAt atomic.Int64 // since start, 0 before the kill
	var stop atomic.Bool
	start := time.Now()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w; !stop.Load(); i += workers {
				k := i % keys
				at := time.Since(start)
				resp := fetchKey(t, srvs[i%len(srvs)], fmt.Sprint("client-", k))
				if resp == nil {
					return
				}
				mu.Lock()
				answers = append(answers, answer{at, time.Since(start) - at, k, resp.StatusCode, resp.Header.Get("Retry-After")})
				mu.Unlock()
				// At most 10 times the limit for each key, so that a fast machine does not flood
				// the cluster: 8 workers over 12 keys, one request each per 6 ms.
				time.Sleep(6 * time.Millisecond)
			}
		})
	}
	time.Sleep(time.Second)
	killedAt.Store(int64(time.Since(start)))
	victim.Stop(syscall.SIGKILL)
	// Wait (at most 20 s) until every key of the killed master has been admitted after the kill.
	deadline := time.Now().Add(20 * time.Second)
	for {
		mu.Lock()
		back := map[int]bool{}
		for _, a := range answers {
			if a.at > time.Duration(killedAt.Load())+time.Duration(0) && a.status == http.StatusOK && onVictim[a.key] {
				back[a.key] = true
			}
		}
		mu.Unlock()
		n := 0
		for k := range keys {
			if onVictim[k] {
				n++
			}
		}
		if len(back) == n {
			// Only once the first failures are behind: a key admitted just after the kill,
			// before anything noticed, does not count as back.
			mu.Lock()
			var lastFail time.Duration
			for _, a := range answers {
				if a.status != http.StatusOK && a.status != http.StatusTooManyRequests {
					lastFail = max(lastFail, a.at)
				}
			}
			mu.Unlock()
			if lastFail > 0 && time.Since(start) > lastFail+time.Second {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the keys of the killed master were not all admitted again within 20 s (%d of %d)", len(back), n)
		}
		time.Sleep(50 * time.Millisecond)
	}
	stop.Store(true)
	wg.Wait()
	elapsed := time.Since(start)
	killed := time.Duration(killedAt.Load())

	var admitted [keys]int
	var spans [keys][][2]time.Duration // of each admitted request: sent, answered
	statuses := map[string]int{}
	var firstFail, lastFail [keys]time.Duration
	var slowest time.Duration
	otherFails := 0
	for _, a := range answers {
		slowest = max(slowest, a.took)
		switch a.status {
		case http.StatusOK:
			admitted[a.key]++
			spans[a.key] = append(spans[a.key], [2]time.Duration{a.at, a.at + a.took})
		case http.StatusTooManyRequests:
		case http.StatusServiceUnavailable:
			if a.retry != "1" {
				t.Errorf("503 with Retry-After %q, want 1", a.retry)
			}
			if firstFail[a.key] == 0 {
				firstFail[a.key] = a.at
			}
			lastFail[a.key] = a.at + a.took
			if !onVictim[a.key] {
				otherFails++
			}
		default:
			t.Errorf("status %d", a.status)
		}
		if a.at > killed {
			statuses[fmt.Sprintf("%s %d", map[bool]string{true: "killed master's keys", false: "other keys"}[onVictim[a.key]], a.status)]++
		}
	}
	var report []string
	worst := -1 << 31
	for k := range keys {
		bound := burst + int(limit*elapsed.Seconds()) + 1
		if onVictim[k] {
			bound += burst
		}
		over := admitted[k] - (burst + int(limit*elapsed.Seconds()))
		// The most admitted over any stretch of time, beyond what one bucket allows there: from
		// the sending of one admitted request to the answer of a later one, so that every
		// decision between them falls inside.
		peak := -burst
		sort.Slice(spans[k], func(i, j int) bool { return spans[k][i][0] < spans[k][j][0] })
		for i := range spans[k] {
			for j := i; j < len(spans[k]); j++ {
				stretch := spans[k][j][1] - spans[k][i][0]
				peak = max(peak, j-i+1-burst-int(limit*stretch.Seconds()))
			}
		}
		worst = max(worst, peak)
		window := "none"
		if firstFail[k] > 0 {
			window = fmt.Sprintf("%v from kill+%v", (lastFail[k] - firstFail[k]).Round(time.Millisecond), (firstFail[k] - killed).Round(time.Millisecond))
		}
		report = append(report, fmt.Sprintf("key %2d (killed master %-5v): admitted %4d, over-admission over the run %+d, over any stretch %+d; failing %s", k, onVictim[k], admitted[k], over, peak, window))
		if admitted[k] > bound || peak > bound-burst-int(limit*elapsed.Seconds()) {
			t.Errorf("key %d: %d admitted in %v, over any stretch %+d: more than the bound %d (%+d)", k, admitted[k], elapsed, peak, bound, bound-burst-int(limit*elapsed.Seconds()))
		}
	}
	var kinds []string
	for s, n := range statuses {
		kinds = append(kinds, fmt.Sprintf("%s: %d", s, n))
	}
	sort.Strings(kinds)
	t.Logf("%d requests over %v, master %s killed at %v; slowest answer %v; answers after the kill: %v", len(answers), elapsed.Round(time.Millisecond), victimAddr, killed.Round(time.Millisecond), slowest.Round(time.Millisecond), kinds)
	for _, r := range report {
		t.Log(r)
	}
	t.Logf("worst over-admission over any stretch %+d (burst %d); 503s for keys of the other masters: %d", worst, burst, otherFails)
	if slowest > timeout+margin {
		t.Errorf("an answer took %v, more than the timeout %v and a margin of %v", slowest, timeout, margin)
	}
}
