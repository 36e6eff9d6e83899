package grpclimit_test

import (
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"testing"

	"google.golang.org/grpc/peer"

	"github.com/retryafter/retryafter"
	"github.com/retryafter/retryafter/grpclimit"
)

// TestPeerKeysKeepEachPeersOwn: peers that come back, many more than the kept keys, from several
// goroutines at once, IPv6 peers of one /64 among them, are each keyed as retryafter.ClientIP
// keys the HTTP request from the same address, whoever held the slot before.
func TestPeerKeysKeepEachPeersOwn(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	peers := make([]*net.TCPAddr, 5000)
	for i := range peers {
		a := randomAddr(rng, i%3)
		if i%4 == 3 { // another host of the /64 of the peer before
			prev := netip.AddrFrom16([16]byte(peers[i-1].IP.To16()))
			a = netip.PrefixFrom(prev, 64).Masked().Addr()
			b := a.As16()
			b[15] = byte(i)
			a = netip.AddrFrom16(b)
		}
		peers[i] = &net.TCPAddr{IP: a.AsSlice(), Port: 1 + i}
	}
	want := make([]string, len(peers))
	for i, p := range peers {
		want[i], _ = retryafter.ClientIP()(&http.Request{RemoteAddr: p.String()})
	}
	key := grpclimit.ClientIP()
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 3))
			for range 20000 {
				i := rng.IntN(len(peers))
				got, err := key(peer.NewContext(t.Context(), &peer.Peer{Addr: peers[i]}), "/s/m")
				if err != nil || got != want[i] {
					t.Errorf("peer %v: key %q, %v; want %q", peers[i], got, err, want[i])
					return
				}
			}
		})
	}
	wg.Wait()
}

// TestPeerKeyReturningAllocs: the key of a peer that calls again costs no allocation. The kept
// keys are the process's: it and TestCallAllocs (whose peer's slot is not these peers') must not
// run in parallel with a test that keys other TCP peers, which could take their slots.
func TestPeerKeyReturningAllocs(t *testing.T) {
	key := grpclimit.ClientIP()
	for _, ip := range []string{"203.0.113.7", "2001:db8:1:2:3:4:5:6"} {
		ctx := peer.NewContext(t.Context(), &peer.Peer{Addr: &net.TCPAddr{IP: net.ParseIP(ip), Port: 5000}})
		if n := testing.AllocsPerRun(100, func() { _, _ = key(ctx, "/s/m") }); n != 0 {
			t.Errorf("%s: %v allocations a call, want 0", ip, n)
		}
	}
}
