package redisstore

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// t0 is the instant the injected clocks start at.
var t0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

// inCI reports whether a missing Redis is a failure rather than a reason to skip.
func inCI() bool { return os.Getenv("CI") == "true" }

// unavailable skips the test, or fails it in CI, because what it needs is missing.
func unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if inCI() {
		t.Fatal(msg + " (CI=true: a Redis is required)")
	}
	t.Skip(msg)
}

// sharedAddr returns the address of the Redis the tests share: REDIS_ADDR, by default
// 127.0.0.1:6379. It skips the test when none answers there (fails it in CI).
func sharedAddr(t testing.TB) string {
	t.Helper()
	addr := os.Getenv("REDIS_ADDR")
	if addr == "" {
		addr = "127.0.0.1:6379"
	}
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		unavailable(t, "no Redis answers at %s (set REDIS_ADDR to a test server): %v", addr, err)
	}
	return addr
}

// newClient returns a client of the Redis at addr that honours context deadlines, closed when
// the test ends.
func newClient(t testing.TB, addr string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	return c
}

var prefixes atomic.Int64

// testPrefix returns a key prefix no other test, and no earlier run, uses.
func testPrefix(t testing.TB) string {
	return fmt.Sprintf("retryafter-test:%s:%d.%d:", t.Name(), time.Now().UnixNano(), prefixes.Add(1))
}

// A server is a redis-server process of the test's own, on a loopback port that stays the same
// across restarts.
type server struct {
	t    testing.TB
	bin  string
	port int
	cmd  *exec.Cmd
}

// startServer starts a redis-server of the test's own on a free loopback port, and stops it
// when the test ends. It skips the test (fails it in CI) when the binary is missing.
func startServer(t testing.TB) *server {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		unavailable(t, "redis-server is not installed: %v", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	s := &server{t: t, bin: bin, port: port}
	s.start()
	t.Cleanup(func() { s.stop(syscall.SIGKILL) })
	return s
}

func (s *server) addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// start runs the server and waits, at most 5 s, until it answers PING.
func (s *server) start() {
	s.t.Helper()
	s.cmd = exec.Command(s.bin, "--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--logfile", "")
	if err := s.cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: s.addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("redis-server on port %d does not answer: %v", s.port, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// stop sends sig to the server and waits for it to exit.
func (s *server) stop(sig syscall.Signal) {
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Signal(sig)
	s.cmd.Wait()
	s.cmd = nil
}

// signal sends sig (SIGSTOP, SIGCONT) to the running server without waiting.
func (s *server) signal(sig syscall.Signal) {
	s.t.Helper()
	if err := s.cmd.Process.Signal(sig); err != nil {
		s.t.Fatal(err)
	}
}
