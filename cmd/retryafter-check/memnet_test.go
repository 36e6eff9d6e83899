package main

import (
	"context"
	"net"
	"net/http"
	"sync"
	"testing"
)

// An in-memory network for the tests: a real net/http server and a real http.Transport joined
// by net.Pipe, so that inside a testing/synctest bubble every wait is on the bubble's clock and
// the server writes Date, strips HEAD bodies and frames responses as it does on a socket.

// clientAddr is the address every connection of the fake network comes from.
var clientAddr = &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 40000}

// serverAddr is the address the fake server listens on.
var serverAddr = &net.TCPAddr{IP: net.IPv4(192, 0, 2, 80), Port: 80}

// addrConn is a net.Pipe end with TCP addresses, so that the limiters key clients by address.
type addrConn struct {
	net.Conn
	local, remote net.Addr
}

func (c addrConn) LocalAddr() net.Addr  { return c.local }
func (c addrConn) RemoteAddr() net.Addr { return c.remote }

// A memListener hands the server the server ends of the pipes that dial creates.
type memListener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func newMemListener() *memListener {
	return &memListener{conns: make(chan net.Conn), done: make(chan struct{})}
}

func (l *memListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *memListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *memListener) Addr() net.Addr { return serverAddr }

// A memNet is a server on the fake network and a transport that reaches it, recording every
// address dialled and every request served.
type memNet struct {
	l   *memListener
	srv *http.Server
	tr  *http.Transport

	mu       sync.Mutex
	dialled  []string
	requests []string // "METHOD host path" of every request served
}

// serve starts h on a fake network and returns the network; the test must call close before
// its bubble ends.
func serve(t *testing.T, h http.Handler) *memNet {
	t.Helper()
	n := &memNet{l: newMemListener()}
	n.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.mu.Lock()
		n.requests = append(n.requests, r.Method+" "+r.Host+" "+r.URL.RequestURI())
		n.mu.Unlock()
		h.ServeHTTP(w, r)
	})}
	n.tr = &http.Transport{DialContext: n.dial}
	go n.srv.Serve(n.l)
	return n
}

func (n *memNet) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	n.mu.Lock()
	n.dialled = append(n.dialled, addr)
	n.mu.Unlock()
	client, server := net.Pipe()
	select {
	case n.l.conns <- addrConn{Conn: server, local: serverAddr, remote: clientAddr}:
		return addrConn{Conn: client, local: clientAddr, remote: serverAddr}, nil
	case <-n.l.done:
		client.Close()
		server.Close()
		return nil, net.ErrClosed
	case <-ctx.Done():
		client.Close()
		server.Close()
		return nil, ctx.Err()
	}
}

// close stops the server and the transport, so that their goroutines end.
func (n *memNet) close() {
	n.tr.CloseIdleConnections()
	n.srv.Close()
}

// served returns the requests served so far.
func (n *memNet) served() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]string(nil), n.requests...)
}
