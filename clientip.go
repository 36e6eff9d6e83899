package retryafter

import (
	"net/http"
	"net/netip"

	"github.com/retryafter/retryafter/edge"
)

// ErrNoClientIP is the error, wrapped, that the key functions of [ClientIP] and
// [ClientIPPrefix] return when no client address can be found: RemoteAddr holds none (a
// net.Pipe, "pipe"), or the server listens on a Unix socket ("@", a path) and the peer is not
// trusted as a local proxy (see [ClientIPPrefix]) or names no client: [edge.ErrNoClientIP].
var ErrNoClientIP = edge.ErrNoClientIP

// A KeyFunc names the client a request is counted against, for [WithKeyFunc]. An error means
// the request carries no usable key; it is not counted (see [WithFailOpen]).
type KeyFunc func(*http.Request) (string, error)

// ClientIP returns a key function for [WithKeyFunc]. With no trusted proxies it uses only
// RemoteAddr; forwarding headers are believed only from addresses inside trusted.
//
// ClientIP(trusted...) is shorthand for ClientIPPrefix(32, 64, trusted...): an IPv4
// client is keyed by its address ("203.0.113.7") and an IPv6 client by its /64
// ("2001:db8:1:2::/64"), since one host usually owns a whole /64 and could otherwise
// rotate through 2^64 keys. The middleware's default key, when no [WithKeyFunc] option
// is given, is ClientIP().
//
// See [ClientIPPrefix] for what is trusted, how X-Forwarded-For is walked, and the
// handling of ports, zones, IPv4-mapped addresses and malformed entries.
func ClientIP(trusted ...netip.Prefix) KeyFunc {
	return keyFunc(edge.NewIPKey(32, 64, "", trusted...))
}

// keyFunc returns the key function of k, on a request's RemoteAddr and header.
func keyFunc(k *edge.IPKey) KeyFunc {
	return func(r *http.Request) (string, error) { return k.Key(r.RemoteAddr, r.Header) }
}

// ClientIPPrefix is like [ClientIP] but keys an IPv4 client by its v4Bits-bit prefix and an
// IPv6 client by its v6Bits-bit prefix ([ClientIP] uses 32 and 64). The key is the canonical
// string of the address ("203.0.113.7", for a full-length prefix) or of the masked prefix
// ("2001:db8:1:2::/64"), never text copied from a header, so a client cannot choose its key by
// spelling its address another way. It panics if v4Bits is outside 1..32, v6Bits outside
// 1..128, or a trusted prefix is not valid; an IPv4-mapped trusted prefix of /96 or longer
// (::ffff:10.0.0.0/104) is the IPv4 prefix it denotes. The function is safe for concurrent use
// and keeps its own copy of trusted. It finds the client so:
//
//   - RemoteAddr ("host:port", "[host]:port" or a bare host) is parsed, its zone dropped and an
//     IPv4-mapped address unmapped. With no trusted prefixes it is the client: X-Forwarded-For,
//     Forwarded, X-Real-IP and every other header, which the client writes, play no part.
//   - With trusted prefixes, while the current hop is trusted, the walk steps one entry left
//     through X-Forwarded-For (its lines last first, each read right to left, entries trimmed,
//     empty ones skipped, each an address with or without brackets and port). The first hop not
//     trusted is the client, or the leftmost if all are. An entry that is no address
//     ("unknown", "_hidden", a name) stops the walk at the last trusted hop: only a trusted
//     proxy can have written it. Forwarded and X-Real-IP are ignored even from trusted proxies,
//     since a proxy passes on untouched the ones it does not write ([ClientIPFrom] names
//     another field).
//   - A peer on a Unix socket ("@" or a path) is trusted as a proxy when a trusted prefix holds
//     a loopback address, and keyed by the client its X-Forwarded-For names. Untrusted, or with
//     none usable, and for any RemoteAddr that holds no IP, it returns an error wrapping
//     [ErrNoClientIP], which the middleware answers 500.
//
// With no trusted prefixes and an IPv4 RemoteAddr it does not allocate; a key found in
// X-Forwarded-For is a fresh string, which does not keep a long header alive in the limiter.
func ClientIPPrefix(v4Bits, v6Bits int, trusted ...netip.Prefix) KeyFunc {
	return keyFunc(edge.NewIPKey(v4Bits, v6Bits, "", trusted...))
}

// ClientIPFrom is [ClientIP] for proxies that write the client into field rather than
// X-Forwarded-For: "Forwarded" (RFC 7239), walked as X-Forwarded-For is, element by element
// from the right, each element's for= parameter the hop, with its port, obfuscated or not
// ("192.0.2.43:_hidden"), ignored; a node that names no address ("unknown", an obfuscated
// "_hidden") stops the walk, so that the clients of a proxy that hides them share its key; or a
// CDN's field of one address, such as "CF-Connecting-IP", "True-Client-IP" or "X-Real-IP",
// which a trusted peer's request names its client by (its last line, when there are several;
// a value that is not one address leaves the peer as the key). Only field is read, and only from a peer inside trusted, so a client cannot choose
// its key by sending it or any other; a CDN overwrites its field on every request. A peer on a
// Unix socket, trusted as [ClientIPPrefix] says, has no address to fall back on: without a
// client in field the request fails with an error that wraps [ErrNoClientIP] and names field.
// It panics as ClientIPPrefix does, or if field is empty.
func ClientIPFrom(field string, trusted ...netip.Prefix) KeyFunc {
	if field == "" {
		panic("retryafter: ClientIPFrom: no field")
	}
	return keyFunc(edge.NewIPKey(32, 64, field, trusted...))
}
