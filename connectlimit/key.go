package connectlimit

import (
	"net/netip"

	"github.com/retryafter/retryafter/edge"
)

// ClientIP returns a key function for [WithKeyFunc] that keys a call by its peer's address, as
// [retryafter.ClientIP] keys a request by RemoteAddr: an IPv4 client by its address, an IPv6
// client by its /64. With no trusted proxies only the peer counts and the header is ignored, so
// a client cannot choose its key; from a peer inside trusted, X-Forwarded-For is walked from the
// right, as retryafter.ClientIP walks it. A call with no peer address fails with an error
// wrapping [retryafter.ErrNoClientIP]. It panics as retryafter.ClientIP does, on an invalid
// prefix.
func ClientIP(trusted ...netip.Prefix) func(Call) (string, error) {
	k := edge.NewIPKey(32, 64, "", trusted...)
	return func(c Call) (string, error) { return k.Key(c.Peer.Addr, c.Header) }
}
