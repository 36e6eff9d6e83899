package grpclimit_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/retryafter/retryafter"
	"github.com/retryafter/retryafter/grpclimit"
)

// TestClientIP: the key is the peer's address (an IPv6 client's /64); x-forwarded-for counts
// only from a trusted peer.
func TestClientIP(t *testing.T) {
	proxy := netip.MustParsePrefix("10.0.0.0/8")
	for _, c := range []struct {
		name    string
		peer    net.Addr
		xff     []string
		trusted []netip.Prefix
		want    string
	}{
		{"IPv4", &net.TCPAddr{IP: net.ParseIP("203.0.113.7"), Port: 5000}, nil, nil, "203.0.113.7"},
		{"IPv6 /64", &net.TCPAddr{IP: net.ParseIP("2001:db8:1:2:3:4:5:6"), Port: 5000}, nil, nil, "2001:db8:1:2::/64"},
		{"IPv4-mapped", &net.TCPAddr{IP: net.ParseIP("::ffff:203.0.113.7"), Port: 5000}, nil, nil, "203.0.113.7"},
		{"metadata ignored untrusted", &net.TCPAddr{IP: net.ParseIP("203.0.113.7"), Port: 5000}, []string{"198.51.100.1"}, nil, "203.0.113.7"},
		{"metadata ignored from a peer not trusted", &net.TCPAddr{IP: net.ParseIP("203.0.113.7"), Port: 5000}, []string{"198.51.100.1"},
			[]netip.Prefix{proxy}, "203.0.113.7"},
		{"metadata from a trusted proxy", &net.TCPAddr{IP: net.ParseIP("10.1.2.3"), Port: 5000}, []string{"198.51.100.1, 10.9.9.9"},
			[]netip.Prefix{proxy}, "198.51.100.1"},
		{"a client's own entry left of the proxy's", &net.TCPAddr{IP: net.ParseIP("10.1.2.3"), Port: 5000}, []string{"1.1.1.1", "198.51.100.1"},
			[]netip.Prefix{proxy}, "198.51.100.1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := peer.NewContext(t.Context(), &peer.Peer{Addr: c.peer})
			if c.xff != nil {
				ctx = metadata.NewIncomingContext(ctx, metadata.MD{"x-forwarded-for": c.xff})
			}
			if got, err := grpclimit.ClientIP(c.trusted...)(ctx, "/s/m"); err != nil || got != c.want {
				t.Fatalf("key %q, %v; want %q", got, err, c.want)
			}
		})
	}
}

// TestClientIPNoPeer: a call with no peer address has no key.
func TestClientIPNoPeer(t *testing.T) {
	for _, ctx := range []context.Context{t.Context(), peer.NewContext(t.Context(), &peer.Peer{})} {
		if _, err := grpclimit.ClientIP()(ctx, "/s/m"); !errors.Is(err, retryafter.ErrNoClientIP) {
			t.Fatalf("error %v, want one wrapping ErrNoClientIP", err)
		}
	}
}

// TestClientIPLoopback: through a real server, the default key is the client's address.
func TestClientIPLoopback(t *testing.T) {
	keys := make(chan string, 1)
	keyOf := func(ctx context.Context, m string) (string, error) {
		k, err := grpclimit.ClientIP()(ctx, m)
		keys <- k
		return k, err
	}
	addr, _ := serve(t, grpc.UnaryInterceptor(grpclimit.UnaryServerInterceptor(retryafter.NewTokenBucket(1, 1), grpclimit.WithKeyFunc(keyOf))))
	if a := call(t.Context(), dial(t, addr)); a.err != nil {
		t.Fatal(a.err)
	}
	if k := <-keys; k != "127.0.0.1" {
		t.Fatalf("key %q, want 127.0.0.1", k)
	}
}

// TestClientIPAgreesWithHTTP: over many addresses, with and without trusted proxies, a call is
// keyed as retryafter.ClientIP keys the HTTP request from the same peer.
func TestClientIPAgreesWithHTTP(t *testing.T) {
	rng := rand.New(rand.NewPCG(43, 2))
	for range 2000 {
		peerAddr := &net.TCPAddr{IP: randomAddr(rng, rng.IntN(3)).AsSlice(), Port: 1 + rng.IntN(65535)}
		ctx := peer.NewContext(t.Context(), &peer.Peer{Addr: peerAddr})
		for _, trusted := range [][]netip.Prefix{nil, {netip.MustParsePrefix("10.0.0.0/8")}} {
			want, werr := retryafter.ClientIP(trusted...)(&http.Request{RemoteAddr: peerAddr.String()})
			got, err := grpclimit.ClientIP(trusted...)(ctx, "/s/m")
			if got != want || (err == nil) != (werr == nil) {
				t.Fatalf("peer %v, trusted %v: key %q, %v; HTTP keys it %q, %v", peerAddr, trusted, got, err, want, werr)
			}
		}
	}
}

// randomAddr returns an address drawn by rng, of a kind: 0 IPv4, 1 IPv4-mapped IPv6, 2 IPv6.
func randomAddr(rng *rand.Rand, kind int) netip.Addr {
	var b [16]byte
	for i := range b {
		b[i] = byte(rng.IntN(256))
	}
	switch kind {
	case 0:
		return netip.AddrFrom4([4]byte(b[:4]))
	case 1:
		return netip.AddrFrom16([16]byte(append(append(make([]byte, 10), 0xff, 0xff), b[:4]...)))
	}
	return netip.AddrFrom16(b)
}
