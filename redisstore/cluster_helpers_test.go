package redisstore

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// A cluster is a Redis Cluster of the test's own: 3 masters and 3 replicas, each a
// redis-server in cluster mode on a loopback port, created by redis-cli --cluster create.
type cluster struct {
	t     testing.TB
	nodes []*server
}

// nodeTimeout is the cluster-node-timeout of the test clusters: how long a master may be
// unreachable before its replica is promoted.
const nodeTimeout = 1000 * time.Millisecond

// startCluster starts a cluster of the test's own and stops it when the test ends. It skips
// the test (fails it in CI) when redis-server or redis-cli is missing.
func startCluster(t testing.TB) *cluster {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		unavailable(t, "redis-server is not installed: %v", err)
	}
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		unavailable(t, "redis-cli is not installed: %v", err)
	}
	dir := t.TempDir()
	c := &cluster{t: t}
	t.Cleanup(func() {
		for _, n := range c.nodes {
			n.stop(syscall.SIGKILL)
		}
	})
	var addrs []string
	for range 6 {
		port := clusterPort(t)
		n := &server{t: t, bin: bin, port: port, args: []string{"--cluster-enabled", "yes",
			"--cluster-config-file", filepath.Join(dir, fmt.Sprintf("nodes-%d.conf", port)),
			"--cluster-node-timeout", strconv.Itoa(int(nodeTimeout.Milliseconds())), "--dir", dir,
			// A replica syncs at once, rather than after the 5 s a master waits for others by
			// default: one that has never synced cannot be promoted.
			"--repl-diskless-sync-delay", "0"}}
		n.start()
		c.nodes = append(c.nodes, n)
		addrs = append(addrs, n.addr())
	}
	create := exec.Command(cli, append(append([]string{"--cluster", "create"}, addrs...), "--cluster-replicas", "1", "--cluster-yes")...)
	if out, err := create.CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	c.waitOK()
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

func (c *cluster) addrs() []string {
	var addrs []string
	for _, n := range c.nodes {
		if n.cmd != nil {
			addrs = append(addrs, n.addr())
		}
	}
	return addrs
}

// waitOK waits, at most 30 s, until every running node reports the cluster state ok and
// agrees on the slots, and every replica's link to its master is up.
func (c *cluster) waitOK() {
	c.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ok := true
		for _, addr := range c.addrs() {
			n := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1})
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			info, err := n.ClusterInfo(ctx).Result()
			repl, rerr := n.Info(ctx, "replication").Result()
			cancel()
			n.Close()
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

// clusterAddrs returns the addresses of the cluster the tests share: REDIS_CLUSTER_ADDRS
// (comma-separated, as .ci/run exports it), or else one the test starts.
func clusterAddrs(t testing.TB) []string {
	t.Helper()
	if env := os.Getenv("REDIS_CLUSTER_ADDRS"); env != "" {
		return strings.Split(env, ",")
	}
	return startCluster(t).addrs()
}

// newClusterClient returns a client of the cluster at addrs that honours context deadlines,
// closed when the test ends.
func newClusterClient(t testing.TB, addrs []string) *redis.ClusterClient {
	t.Helper()
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	return c
}

// mastersOf returns, for each key, the address of the master that holds its slot.
func mastersOf(t testing.TB, c *redis.ClusterClient, keys []string) []string {
	t.Helper()
	ctx := context.Background()
	shards, err := c.ClusterShards(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	var masters []string
	for _, k := range keys {
		slot, err := c.ClusterKeySlot(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, sh := range shards {
			for _, r := range sh.Slots {
				if r.Start <= slot && slot <= r.End {
					for _, n := range sh.Nodes {
						if n.Role == "master" {
							masters = append(masters, net.JoinHostPort(n.IP, strconv.FormatInt(n.Port, 10)))
						}
					}
				}
			}
		}
	}
	return masters
}
