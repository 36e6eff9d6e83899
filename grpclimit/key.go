package grpclimit

import (
	"context"
	"fmt"
	"net"
	"net/netip"

	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/retryafter/retryafter"
	"github.com/retryafter/retryafter/edge"
)

// A KeyFunc names the client a call is counted against, for [WithKeyFunc]. fullMethod is
// "/package.Service/Method". An error means the call carries no usable key; it is not counted
// (see [WithFailOpen]).
type KeyFunc func(ctx context.Context, fullMethod string) (string, error)

// forwardedFor is the metadata key that proxies of gRPC (Envoy, grpc-gateway) write the
// client's address into, as X-Forwarded-For is written for HTTP.
const forwardedFor = "x-forwarded-for"

// ClientIP returns a key function for [WithKeyFunc] that keys a call by its peer's address, as
// [retryafter.ClientIP] keys a request by RemoteAddr: an IPv4 client by its address, an IPv6
// client by its /64. With no trusted proxies, only the peer counts and metadata is ignored, so
// a client cannot choose its key; from a peer inside trusted, the x-forwarded-for metadata is
// walked from the right, as retryafter.ClientIP walks X-Forwarded-For.
//
// A call with no peer address (an in-memory connection) fails with an error wrapping
// [retryafter.ErrNoClientIP]. It panics as retryafter.ClientIP does, on an invalid prefix.
func ClientIP(trusted ...netip.Prefix) KeyFunc {
	k := edge.NewIPKey(32, 64, forwardedFor, trusted...)
	walk := len(trusted) > 0
	return func(ctx context.Context, _ string) (string, error) {
		p, ok := peer.FromContext(ctx)
		if !ok || p.Addr == nil {
			return "", fmt.Errorf("%w: the call has no peer", retryafter.ErrNoClientIP)
		}
		if tcp, ok := p.Addr.(*net.TCPAddr); ok && !walk {
			if a, ok := netip.AddrFromSlice(tcp.IP); ok {
				return peerKey(a.Unmap()), nil
			}
		}
		// The walk of the HTTP key function, on the call's peer and metadata: one set of rules.
		md, _ := metadata.FromIncomingContext(ctx)
		return k.Key(p.Addr.String(), mdFields(md))
	}
}

// mdFields is a call's metadata as the fields the client-IP walk reads.
type mdFields metadata.MD

// Values returns the values of the metadata key name, in lower case, as gRPC keys are.
func (m mdFields) Values(name string) []string { return metadata.MD(m).Get(name) }
