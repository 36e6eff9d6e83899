package redisstore

import (
	"bytes"
	"context"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// A proxy is a loopback TCP proxy in front of a Redis: it forwards each way after a delay (half
// the latency it adds to a round trip), and, when armed, forwards a command that holds a marker,
// drops the reply, and resets the client's connection, as a load balancer or a CLIENT KILL does
// after Redis ran the command.
type proxy struct {
	t      testing.TB
	ln     net.Listener
	target string
	delay  atomic.Int64           // each way, ns
	marker atomic.Pointer[string] // the next command that holds it has its reply dropped
	resets atomic.Int64           // connections reset so
	mu     sync.Mutex
	conns  []net.Conn
}

// startProxy starts a proxy to the Redis at target, closed when the test ends.
func startProxy(t testing.TB, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{t: t, ln: ln, target: target}
	go p.serve()
	t.Cleanup(p.close)
	return p
}

// Addr returns the address clients dial.
func (p *proxy) Addr() string { return p.ln.Addr().String() }

// setLatency makes every round trip through p take rt longer.
func (p *proxy) setLatency(rt time.Duration) { p.delay.Store(int64(rt / 2)) }

// resetAfter arms p: the next command that holds marker is forwarded, and then its connection is
// reset instead of its reply forwarded.
func (p *proxy) resetAfter(marker string) { p.marker.Store(&marker) }

func (p *proxy) close() {
	p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
}

func (p *proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, s)
		p.mu.Unlock()
		var doomed atomic.Bool
		go p.pump(s, c, &doomed, true)
		go p.pump(c, s, &doomed, false)
	}
}

// pump copies from src to dst, each chunk after the delay. Upstream (client to server), a chunk
// that holds the armed marker dooms the connection; downstream, a doomed connection's reply is
// dropped and both ends are closed, the client's by a reset.
func (p *proxy) pump(dst, src net.Conn, doomed *atomic.Bool, up bool) {
	type chunk struct {
		at time.Time
		b  []byte
	}
	chunks := make(chan chunk, 1024)
	go func() {
		defer close(chunks)
		for {
			buf := make([]byte, 64<<10)
			n, err := src.Read(buf)
			if n > 0 {
				chunks <- chunk{time.Now(), buf[:n]}
			}
			if err != nil {
				return
			}
		}
	}()
	defer dst.Close()
	for c := range chunks {
		time.Sleep(time.Until(c.at.Add(time.Duration(p.delay.Load()))))
		if up {
			if m := p.marker.Load(); m != nil && bytes.Contains(c.b, []byte(*m)) && p.marker.CompareAndSwap(m, nil) {
				doomed.Store(true)
			}
		} else if doomed.Load() {
			p.resets.Add(1)
			if tc, ok := dst.(*net.TCPConn); ok {
				tc.SetLinger(0) // a reset, not a close
			}
			dst.Close()
			src.Close()
			io.Copy(io.Discard, src)
			return
		}
		if _, err := dst.Write(c.b); err != nil {
			src.Close()
			return
		}
	}
}

// proxies is a proxy per Redis address, made on first dial: a cluster client's Dialer.
type proxies struct {
	t      testing.TB
	mu     sync.Mutex
	by     map[string]*proxy
	marker *string // armed on every proxy, those made later too
}

// dial dials addr through its proxy.
func (ps *proxies) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, network, ps.of(addr).Addr())
}

// of returns addr's proxy.
func (ps *proxies) of(addr string) *proxy {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.by == nil {
		ps.by = map[string]*proxy{}
	}
	if p, ok := ps.by[addr]; ok {
		return p
	}
	p := startProxy(ps.t, addr)
	if ps.marker != nil {
		p.resetAfter(*ps.marker)
	}
	ps.by[addr] = p
	return p
}

// resetAfter arms every proxy (see proxy.resetAfter).
func (ps *proxies) resetAfter(marker string) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	ps.marker = &marker
	for _, p := range ps.by {
		p.resetAfter(marker)
	}
}
