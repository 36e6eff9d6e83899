// Command sidebyside measures retryafter-rls beside envoyproxy/ratelimit, both over one
// redis-server with the same configuration, from gRPC clients on loopback (see the module's
// README for the command and the table it prints). It is not part of the tests.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// config is the one configuration both services run: 6 a minute, one client a value.
const config = "domain: bench\ndescriptors:\n  - key: client\n    rate_limit: {unit: minute, requests_per_unit: 6}\n"

// burst is the configuration's requests_per_unit.
const burst = 6

func main() {
	ours := flag.String("ours", "", "the retryafter-rls binary")
	theirs := flag.String("theirs", "", "envoyproxy/ratelimit's service_cmd binary")
	n := flag.Int("n", 20000, "decisions in each phase")
	workers := flag.Int("c", 8, "concurrent clients")
	flag.Parse()
	if *ours == "" || *theirs == "" {
		log.Fatal("give -ours and -theirs")
	}
	dir, err := os.MkdirTemp("", "sidebyside")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	cfgDir := filepath.Join(dir, "rl", "config")
	must(os.MkdirAll(cfgDir, 0o700))
	must(os.WriteFile(filepath.Join(cfgDir, "bench.yaml"), []byte(config), 0o600))

	redisPort := freePort()
	rs := exec.Command("redis-server", "--port", strconv.Itoa(redisPort), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no")
	must(rs.Start())
	defer rs.Process.Kill()
	rdb := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", redisPort)})
	waitFor(func() error { return rdb.Ping(context.Background()).Err() })

	// envoyproxy/ratelimit's stats go to statsd, as deployed (without, it logs each at debug).
	sink, err := net.Listen("tcp", "127.0.0.1:0")
	must(err)
	defer sink.Close()
	go func() {
		for {
			c, err := sink.Accept()
			if err != nil {
				return
			}
			go io.Copy(io.Discard, c)
		}
	}()
	statsd := sink.Addr().(*net.TCPAddr).Port

	fmt.Println("| service | wait told a refused client (s) | admitted after waiting exactly that | service CPU µs a decision, admitted / refused | Redis CPU µs a decision, admitted / refused | Redis commands a decision, admitted / refused |")
	fmt.Println("| --- | --- | --- | --- | --- | --- |")
	for _, svc := range []struct {
		name  string
		start func(grpcPort, httpPort int) *exec.Cmd
	}{
		{"retryafter-rls", func(g, h int) *exec.Cmd {
			return exec.Command(*ours, "-config", cfgDir, "-grpc", fmt.Sprintf("127.0.0.1:%d", g), "-http", fmt.Sprintf("127.0.0.1:%d", h),
				"-redis", fmt.Sprintf("redis://127.0.0.1:%d/0", redisPort), "-watch", "0")
		}},
		{"envoyproxy/ratelimit", func(g, h int) *exec.Cmd {
			c := exec.Command(*theirs)
			c.Env = append(os.Environ(), "RUNTIME_ROOT="+dir, "RUNTIME_SUBDIRECTORY=rl", "RUNTIME_WATCH_ROOT=false",
				"REDIS_SOCKET_TYPE=tcp", fmt.Sprintf("REDIS_URL=127.0.0.1:%d", redisPort), "LOG_LEVEL=error",
				"USE_STATSD=true", "STATSD_HOST=127.0.0.1", fmt.Sprintf("STATSD_PORT=%d", statsd),
				"GRPC_HOST=127.0.0.1", fmt.Sprintf("GRPC_PORT=%d", g), "HOST=127.0.0.1", fmt.Sprintf("PORT=%d", h),
				"DEBUG_HOST=127.0.0.1", fmt.Sprintf("DEBUG_PORT=%d", freePort()))
			return c
		}},
	} {
		must(rdb.FlushAll(context.Background()).Err())
		grpcPort := freePort()
		cmd := svc.start(grpcPort, freePort())
		cmd.Stderr = os.Stderr
		must(cmd.Start())
		target = fmt.Sprintf("127.0.0.1:%d", grpcPort)
		conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
		must(err)
		cl := rlsv3.NewRateLimitServiceClient(conn)
		waitFor(func() error { _, err := cl.ShouldRateLimit(context.Background(), req("warmup")); return err })

		waits, admitted := exactness(cl)
		adm := phase(cmd.Process.Pid, rdb, *n, *workers, func(i int) *rlsv3.RateLimitRequest { return req(fmt.Sprintf("a-%d", i)) }, rlsv3.RateLimitResponse_OK)
		for range burst {
			ask(cl, req("flood"))
		}
		ref := phase(cmd.Process.Pid, rdb, *n, *workers, func(int) *rlsv3.RateLimitRequest { return req("flood") }, rlsv3.RateLimitResponse_OVER_LIMIT)
		phaseOf := func(f func(cost) float64) string { return fmt.Sprintf("%.1f / %.1f", f(adm), f(ref)) }
		fmt.Printf("| %s | %s | %d of %d | %s | %s | %s |\n", svc.name, strings.Join(waits, ", "), admitted, len(waits),
			phaseOf(func(c cost) float64 { return c.cpu }), phaseOf(func(c cost) float64 { return c.redisCPU }),
			fmt.Sprintf("%.3f / %.3f", adm.calls, ref.calls))
		conn.Close()
		cmd.Process.Signal(os.Interrupt)
		cmd.Wait()
	}
}

// exactness refuses clients at instants spread over a minute, waits what each is told and asks
// again: the waits told, and how many were then admitted.
func exactness(cl rlsv3.RateLimitServiceClient) ([]string, int) {
	offsets := []time.Duration{0, 13 * time.Second, 29 * time.Second, 47 * time.Second}
	waits := make([]string, len(offsets))
	var admitted atomic.Int32
	var wg sync.WaitGroup
	for i, off := range offsets {
		wg.Go(func() {
			time.Sleep(off)
			key := fmt.Sprintf("wait-%d", i)
			for range burst {
				ask(cl, req(key))
			}
			resp := ask(cl, req(key))
			d := resp.GetStatuses()[0].GetDurationUntilReset().AsDuration()
			waits[i] = strconv.FormatFloat(d.Seconds(), 'f', -1, 64)
			if resp.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
				waits[i] = "not refused"
				return
			}
			time.Sleep(d)
			if ask(cl, req(key)).GetOverallCode() == rlsv3.RateLimitResponse_OK {
				admitted.Add(1)
			}
		})
	}
	wg.Wait()
	return waits, int(admitted.Load())
}

// A cost is what one phase cost a decision.
type cost struct{ cpu, redisCPU, calls float64 }

// phase makes n decisions from workers clients, each expected to answer want, and returns
// their cost: the service's CPU time (utime + stime, the counters getrusage reads), Redis's
// CPU time (used_cpu_user + used_cpu_sys) and Redis's commands, a decision.
func phase(pid int, rdb *redis.Client, n, workers int, r func(int) *rlsv3.RateLimitRequest, want rlsv3.RateLimitResponse_Code) cost {
	conns := make([]rlsv3.RateLimitServiceClient, workers)
	for i := range conns {
		conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
		must(err)
		defer conn.Close()
		conns[i] = rlsv3.NewRateLimitServiceClient(conn)
	}
	cpu0, rcpu0, calls0 := procCPU(pid), redisCPU(rdb), redisCalls(rdb)
	var next atomic.Int64
	var wrong atomic.Int64
	var wg sync.WaitGroup
	for _, cl := range conns {
		wg.Go(func() {
			for i := int(next.Add(1)); i <= n; i = int(next.Add(1)) {
				resp, err := cl.ShouldRateLimit(context.Background(), r(i))
				if err != nil || resp.GetOverallCode() != want {
					wrong.Add(1)
				}
			}
		})
	}
	wg.Wait()
	cpu1, rcpu1, calls1 := procCPU(pid), redisCPU(rdb), redisCalls(rdb)
	if w := wrong.Load(); w > 0 {
		log.Printf("%d of %d decisions were not %v (an error or another code)", w, n, want)
	}
	return cost{
		cpu:      float64(cpu1-cpu0) / float64(n) / 1e3,
		redisCPU: (rcpu1 - rcpu0) / float64(n) * 1e6,
		calls:    float64(calls1-calls0-1) / float64(n), // less the INFO of calls0 itself
	}
}

// target is the address phase's clients dial, set before each service's phases.
var target string

// req is a request for client value v.
func req(v string) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*ratelimitv3.RateLimitDescriptor{
		{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "client", Value: v}}}}}
}

func ask(cl rlsv3.RateLimitServiceClient, r *rlsv3.RateLimitRequest) *rlsv3.RateLimitResponse {
	resp, err := cl.ShouldRateLimit(context.Background(), r)
	must(err)
	return resp
}

// procCPU returns the process's user and system CPU time in nanoseconds, from /proc/PID/stat.
func procCPU(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	must(err)
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return (ut + st) * int64(time.Second) / 100 // USER_HZ
}

// redisCPU returns Redis's used_cpu_user + used_cpu_sys, in seconds.
func redisCPU(rdb *redis.Client) float64 {
	var total float64
	for _, name := range []string{"used_cpu_user", "used_cpu_sys"} {
		v, _ := strconv.ParseFloat(info(rdb, "cpu", name), 64)
		total += v
	}
	return total
}

// redisCalls returns Redis's total_commands_processed.
func redisCalls(rdb *redis.Client) int64 {
	v, _ := strconv.ParseInt(info(rdb, "stats", "total_commands_processed"), 10, 64)
	return v
}

func info(rdb *redis.Client, section, name string) string {
	s, err := rdb.Info(context.Background(), section).Result()
	must(err)
	for _, line := range strings.Split(s, "\r\n") {
		if v, ok := strings.CutPrefix(line, name+":"); ok {
			return v
		}
	}
	return ""
}

func freePort() int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	must(err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func waitFor(f func() error) {
	deadline := time.Now().Add(30 * time.Second)
	for err := f(); err != nil; err = f() {
		if time.Now().After(deadline) {
			log.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func must(err error) {
	if err != nil {
		log.Fatal(err)
	}
}
