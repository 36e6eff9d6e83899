// Package redistest finds or starts the real redis-server processes that the tests of the Redis
// stores run against, the same way for every package: a server named by REDIS_ADDR and a
// cluster named by REDIS_CLUSTER_ADDRS (as .ci/run exports them), or else ones of the test
// binary's own, started on free loopback ports when first asked for and stopped when the
// binary's tests end. A test that needs one skips, with the reason, when redis-server (or
// redis-cli, for a cluster) is not installed, and fails instead under CI=true.
//
// A package whose tests use [Addr] or [ClusterAddrs] runs them through [Main]:
//
//	func TestMain(m *testing.M) { os.Exit(redistest.Main(m)) }
//
// It speaks to the servers in RESP over TCP itself, so that it needs no Redis client.
package redistest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Unavailable skips the test, or fails it under CI=true, because what it needs is missing.
func Unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv("CI") == "true" {
		t.Fatal(msg + " (CI=true: a Redis is required)")
	}
	t.Skip(msg)
}

// shared is what the binary's tests share: the servers started for them, stopped by Main.
var shared struct {
	mu      sync.Mutex
	main    bool // Main is running the tests
	server  *Server
	cluster *Cluster
	dir     string // the cluster's configuration files
}

// Main runs the tests of m and then stops the servers that [Addr] and [ClusterAddrs] started
// for them, and returns m.Run's exit code.
func Main(m *testing.M) int {
	shared.mu.Lock()
	shared.main = true
	shared.mu.Unlock()
	code := m.Run()
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.server != nil {
		shared.server.Stop(syscall.SIGKILL)
	}
	if shared.cluster != nil {
		for _, n := range shared.cluster.Nodes {
			n.Stop(syscall.SIGKILL)
		}
	}
	if shared.dir != "" {
		os.RemoveAll(shared.dir)
	}
	return code
}

// Addr returns the address of the Redis the tests share: REDIS_ADDR when it is set (the test
// skips, or fails under CI=true, when nothing answers there), and otherwise that of a
// redis-server the binary starts for its tests at the first call.
func Addr(t testing.TB) string {
	t.Helper()
	if addr := os.Getenv("REDIS_ADDR"); addr != "" {
		if _, err := Do(addr, "PING"); err != nil {
			Unavailable(t, "no Redis answers at REDIS_ADDR=%s: %v", addr, err)
		}
		return addr
	}
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if !shared.main {
		t.Fatal("redistest: the package's TestMain must run its tests through redistest.Main")
	}
	if shared.server == nil {
		shared.server = start(t, nil)
	}
	return shared.server.Addr()
}

// ClusterAddrs returns the addresses of the Redis Cluster the tests share: REDIS_CLUSTER_ADDRS
// (comma-separated) when it is set, and otherwise those of a cluster the binary starts for its
// tests at the first call (see [StartCluster]).
func ClusterAddrs(t testing.TB) []string {
	t.Helper()
	if env := os.Getenv("REDIS_CLUSTER_ADDRS"); env != "" {
		return strings.Split(env, ",")
	}
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if !shared.main {
		t.Fatal("redistest: the package's TestMain must run its tests through redistest.Main")
	}
	if shared.cluster == nil {
		dir, err := os.MkdirTemp("", "redistest-cluster-")
		if err != nil {
			t.Fatal(err)
		}
		shared.dir = dir
		shared.cluster = startCluster(t, dir, 2*time.Second)
	}
	return shared.cluster.Addrs()
}

// A Server is a redis-server process on a loopback port that stays the same across restarts.
type Server struct {
	t    testing.TB
	bin  string
	port int
	args []string // more arguments of redis-server (cluster mode)
	cmd  *exec.Cmd
}

// Start starts a redis-server of the test's own on a free loopback port, with more arguments
// args, and stops it when the test ends. It skips the test (fails it under CI=true) when
// redis-server is not installed.
func Start(t testing.TB, args ...string) *Server {
	t.Helper()
	s := start(t, args)
	t.Cleanup(func() { s.Stop(syscall.SIGKILL) })
	return s
}

// start starts a server on a free port, with no cleanup.
func start(t testing.TB, args []string) *Server {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		Unavailable(t, "redis-server is not installed: %v", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	s := &Server{t: t, bin: bin, port: port, args: args}
	s.Restart()
	return s
}

// Addr returns the server's address, host:port.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// Running reports whether the server's process runs (it may be stopped by SIGSTOP).
func (s *Server) Running() bool { return s.cmd != nil }

// Restart runs the server, on its port, and waits, at most 20 s (a loaded machine is slow to
// start one), until it answers PING.
func (s *Server) Restart() {
	s.t.Helper()
	s.cmd = exec.Command(s.bin, append([]string{"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--logfile", ""}, s.args...)...)
	if err := s.cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, err := Do(s.Addr(), "PING")
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("redis-server on port %d does not answer: %v", s.port, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Stop sends sig to the server and waits for it to exit.
func (s *Server) Stop(sig syscall.Signal) {
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Signal(sig)
	s.cmd.Wait()
	s.cmd = nil
}

// Signal sends sig (SIGSTOP, SIGCONT) to the running server without waiting.
func (s *Server) Signal(sig syscall.Signal) {
	s.t.Helper()
	if err := s.cmd.Process.Signal(sig); err != nil {
		s.t.Fatal(err)
	}
}

// A Cluster is a Redis Cluster of 3 masters and 3 replicas, each a redis-server in cluster mode
// on a loopback port, created by redis-cli --cluster create.
type Cluster struct {
	t     testing.TB
	Nodes []*Server
}

// StartCluster starts a cluster of the test's own, whose nodes take a master unreachable for
// nodeTimeout as failed (cluster-node-timeout), and stops it when the test ends. It skips the
// test (fails it under CI=true) when redis-server or redis-cli is not installed.
func StartCluster(t testing.TB, nodeTimeout time.Duration) *Cluster {
	t.Helper()
	c := startCluster(t, t.TempDir(), nodeTimeout)
	t.Cleanup(func() {
		for _, n := range c.Nodes {
			n.Stop(syscall.SIGKILL)
		}
	})
	return c
}

// startCluster starts a cluster with its files in dir, with no cleanup.
func startCluster(t testing.TB, dir string, nodeTimeout time.Duration) *Cluster {
	t.Helper()
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		Unavailable(t, "redis-cli is not installed: %v", err)
	}
	c := &Cluster{t: t}
	var addrs []string
	for range 6 {
		port := clusterPort(t)
		n := &Server{t: t, port: port, args: []string{"--cluster-enabled", "yes",
			"--cluster-config-file", filepath.Join(dir, fmt.Sprintf("nodes-%d.conf", port)),
			"--cluster-node-timeout", strconv.Itoa(int(nodeTimeout.Milliseconds())), "--dir", dir,
			// A replica syncs at once, rather than after the 5 s a master waits for others by
			// default: one that has never synced cannot be promoted.
			"--repl-diskless-sync-delay", "0"}}
		if n.bin, err = exec.LookPath("redis-server"); err != nil {
			Unavailable(t, "redis-server is not installed: %v", err)
		}
		n.Restart()
		c.Nodes = append(c.Nodes, n)
		addrs = append(addrs, n.Addr())
	}
	create := exec.Command(cli, append(append([]string{"--cluster", "create"}, addrs...), "--cluster-replicas", "1", "--cluster-yes")...)
	if out, err := create.CombinedOutput(); err != nil {
		for _, n := range c.Nodes {
			n.Stop(syscall.SIGKILL)
		}
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	c.WaitOK()
	return c
}

// clusterPort returns a free loopback port whose cluster bus port, 10000 above it, is free too.
func clusterPort(t testing.TB) int {
	t.Helper()
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		if port+10000 > 65535 {
			l.Close()
			continue
		}
		bus, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port+10000)))
		l.Close()
		if err != nil {
			continue
		}
		bus.Close()
		return port
	}
	t.Fatal("no free pair of loopback ports for a cluster node")
	return 0
}

// Addrs returns the addresses of the cluster's running nodes.
func (c *Cluster) Addrs() []string {
	var addrs []string
	for _, n := range c.Nodes {
		if n.Running() {
			addrs = append(addrs, n.Addr())
		}
	}
	return addrs
}

// WaitOK waits, at most 30 s, until every running node reports the cluster state ok and
// agrees on the slots, and every replica's link to its master is up.
func (c *Cluster) WaitOK() {
	c.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ok := true
		for _, addr := range c.Addrs() {
			info, err := Do(addr, "CLUSTER", "INFO")
			repl, rerr := Do(addr, "INFO", "replication")
			if err != nil || !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, "cluster_slots_ok:16384") ||
				rerr != nil || strings.Contains(repl, "role:slave") && !strings.Contains(repl, "master_link_status:up") {
				ok = false
				break
			}
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatal("the cluster is not ok after 30 s")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Do sends one command to the Redis at addr, on a connection of its own, and returns its
// answer: a simple or bulk string, or an integer in decimal; an error answer is an error. It
// waits at most a second.
func Do(addr string, args ...string) (string, error) {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := conn.Write([]byte(b.String())); err != nil {
		return "", err
	}
	r := bufio.NewReader(conn)
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimSuffix(line, "\r\n")
	if line == "" {
		return "", errors.New("redistest: an empty answer")
	}
	switch line[0] {
	case '+', ':':
		return line[1:], nil
	case '-':
		return "", errors.New(line[1:])
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < 0 {
			return "", fmt.Errorf("redistest: answer %q", line)
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	}
	return "", fmt.Errorf("redistest: an answer of a kind it does not read: %q", line)
}
