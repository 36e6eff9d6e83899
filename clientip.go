package retryafter

import (
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
)

// ErrNoClientIP is the error, wrapped, that the key functions of [ClientIP] and
// [ClientIPPrefix] return when no client address can be found: RemoteAddr holds none (a
// net.Pipe, "pipe"), or the server listens on a Unix socket ("@", a path) and the peer is not
// trusted as a local proxy (see [ClientIPPrefix]) or names no client. Test for it with
// [errors.Is].
var ErrNoClientIP = errors.New("retryafter: no client IP in request")

// clientIPForwardedFor is pre-canonicalised so that reading it is a plain map lookup.
const clientIPForwardedFor = "X-Forwarded-For"

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
	return newClientIP(trusted...).key
}

// newClientIP returns the configuration of ClientIP(trusted...), which is also the middleware's
// default key.
func newClientIP(trusted ...netip.Prefix) *clientKeyer {
	return newClientKeyer(32, 64, trusted...)
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
	return newClientKeyer(v4Bits, v6Bits, trusted...).key
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
	k := newClientKeyer(32, 64, trusted...)
	k.field, k.name = http.CanonicalHeaderKey(field), field
	switch k.field {
	case clientIPForwardedFor:
	case "Forwarded":
		k.forwarded = true
	default:
		k.single = true
	}
	return k.key
}

// newClientKeyer returns the configuration of ClientIPPrefix(v4Bits, v6Bits, trusted...), or
// panics as it does.
func newClientKeyer(v4Bits, v6Bits int, trusted ...netip.Prefix) *clientKeyer {
	if v4Bits < 1 || v4Bits > 32 {
		panic(fmt.Sprintf("retryafter: ClientIPPrefix: v4Bits %d is outside 1..32", v4Bits))
	}
	if v6Bits < 1 || v6Bits > 128 {
		panic(fmt.Sprintf("retryafter: ClientIPPrefix: v6Bits %d is outside 1..128", v6Bits))
	}
	k := &clientKeyer{v4Bits: v4Bits, v6Bits: v6Bits, field: clientIPForwardedFor, name: clientIPForwardedFor}
	for _, p := range trusted {
		if !p.IsValid() {
			panic(fmt.Sprintf("retryafter: ClientIP: trusted prefix %v is not valid", p))
		}
		if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
			p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
		}
		k.trusted = append(k.trusted, p)
	}
	return k
}

// clientKeyer holds the configuration of one [ClientIPPrefix] key function.
// It is never modified after construction.
type clientKeyer struct {
	v4Bits, v6Bits int
	trusted        []netip.Prefix // IPv4-mapped ones unmapped
	field          string         // the field trusted proxies name the client in, canonical
	name           string         // field as configured, for errors
	forwarded      bool           // field is RFC 7239's Forwarded: the for= of each element
	single         bool           // field holds one address, a CDN's
}

// key is the function that [ClientIPPrefix] returns.
func (k *clientKeyer) key(r *http.Request) (string, error) {
	// The common case first: an IPv4 peer, written as net/http writes it, keyed by its address.
	if host, a, ok := canonicalIPv4(r.RemoteAddr); ok && k.v4Bits == 32 &&
		(len(k.trusted) == 0 || !k.isTrusted(netip.AddrFrom4(a))) {
		return host, nil
	}
	text, addr, ok := clientIPParseHost(r.RemoteAddr)
	if !ok {
		return k.socketKey(r)
	}
	if len(k.trusted) > 0 && k.isTrusted(addr) {
		if lines := r.Header[k.field]; len(lines) > 0 {
			addr = k.walk(lines, addr)
			text = "" // the key is formatted afresh, never a slice of the header
		}
	}
	return k.format(addr, text), nil
}

// socketKey is the key of a request whose RemoteAddr holds no IP. A peer on a Unix socket is a
// local process, as a loopback one is, and is trusted as a proxy when loopback is: the client is
// then found in its X-Forwarded-For as behind any trusted proxy.
func (k *clientKeyer) socketKey(r *http.Request) (string, error) {
	if !unixSocketAddr(r.RemoteAddr) {
		return "", fmt.Errorf("%w: RemoteAddr %q", ErrNoClientIP, r.RemoteAddr)
	}
	if !k.isTrusted(loopback4) && !k.isTrusted(loopback6) {
		return "", fmt.Errorf("%w: RemoteAddr %q is a Unix socket; behind a proxy that connects on one, "+
			"trust it as a local proxy by trusting loopback, netip.MustParsePrefix(\"127.0.0.1/32\"), and have it "+
			"name the client in %s", ErrNoClientIP, r.RemoteAddr, k.name)
	}
	if a := k.walk(r.Header[k.field], netip.Addr{}); a.IsValid() {
		return k.format(a, ""), nil
	}
	return "", fmt.Errorf("%w: RemoteAddr %q is a Unix socket, and %s names no client", ErrNoClientIP, r.RemoteAddr, k.name)
}

var (
	loopback4 = netip.AddrFrom4([4]byte{127, 0, 0, 1})
	loopback6 = netip.IPv6Loopback()
)

// unixSocketAddr reports whether remote is the RemoteAddr net/http gives a connection on a Unix
// socket: the peer's socket path, "@" for an unnamed or abstract one, or "".
func unixSocketAddr(remote string) bool {
	return remote == "" || remote[0] == '@' || remote[0] == '/'
}

// isTrusted reports whether a, already unmapped and without zone, is inside a trusted
// prefix.
func (k *clientKeyer) isTrusted(a netip.Addr) bool {
	for _, p := range k.trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// walk steps left through the X-Forwarded-For lines from cur, a trusted hop, and
// returns the first untrusted hop, the leftmost hop if all are trusted, or the last
// trusted hop before a malformed entry. cur may be the zero Addr, for a trusted peer
// without an address; the result is then the zero Addr when no entry names a hop.
func (k *clientKeyer) walk(lines []string, cur netip.Addr) netip.Addr {
	if k.single {
		// One address, the client, in the last line; anything else, or no line, leaves cur.
		if len(lines) == 0 {
			return cur
		}
		if _, a, ok := clientIPParseHost(clientIPTrim(lines[len(lines)-1])); ok {
			return a
		}
		return cur
	}
	for i := len(lines) - 1; i >= 0; i-- {
		line := lines[i]
		for {
			entry, rest, more := clientIPCutLast(line)
			if k.forwarded {
				entry = forwardedFor(entry)
			}
			if entry = clientIPTrim(entry); entry != "" {
				_, a, ok := clientIPParseHost(entry)
				if !ok {
					return cur
				}
				cur = a
				if !k.isTrusted(cur) {
					return cur
				}
			}
			if !more {
				break
			}
			line = rest
		}
	}
	return cur
}

// format returns the key for a, reusing text when it is exactly the canonical form
// of the key.
func (k *clientKeyer) format(a netip.Addr, text string) string {
	bits := k.v6Bits
	if a.Is4() {
		bits = k.v4Bits
	}
	if bits == a.BitLen() {
		if text != "" && clientIPCanonical(a, text) {
			return text
		}
		return a.String()
	}
	p, _ := a.Prefix(bits) // bits was checked at construction, so this cannot fail
	var buf [64]byte
	return string(p.AppendTo(buf[:0])) // one allocation, where p.String() makes two
}

// clientIPCanonical reports whether text is exactly a.String(), without allocating.
func clientIPCanonical(a netip.Addr, text string) bool {
	var buf [64]byte // an IPv6 address without zone is at most 45 bytes
	return string(a.AppendTo(buf[:0])) == text
}

// clientIPParseHost parses "host:port", "[host]:port", "[host]" or a bare host, where host is an
// IP address, and returns the host text and the address, unmapped and without zone.
func clientIPParseHost(s string) (text string, a netip.Addr, ok bool) {
	text = s
	if len(s) > 0 && s[0] == '[' {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return "", netip.Addr{}, false
		}
		text = s[1:end]
		if rest := s[end+1:]; rest != "" && (rest[0] != ':' || !clientIPIsPort(rest[1:])) {
			return "", netip.Addr{}, false
		}
	} else if i := strings.IndexByte(s, ':'); i >= 0 && strings.IndexByte(s[i+1:], ':') < 0 {
		// Exactly one colon: IPv4 (or a name) with a port. Two or more: bare IPv6.
		if !clientIPIsPort(s[i+1:]) {
			return "", netip.Addr{}, false
		}
		text = s[:i]
	}
	a, err := netip.ParseAddr(text)
	if err != nil {
		return "", netip.Addr{}, false
	}
	return text, a.Unmap().WithZone(""), true
}

// canonicalIPv4 parses "a.b.c.d" or "a.b.c.d:port" whose address is in canonical form, as
// netip.Addr.String writes it (decimal, no leading zeros): the form of RemoteAddr for an IPv4
// peer. It returns the address's text, a slice of s, and its bytes; any other form is not ok
// and is left to the general parser.
func canonicalIPv4(s string) (host string, a [4]byte, ok bool) {
	i := 0
	for n := range 4 {
		if n > 0 {
			if i >= len(s) || s[i] != '.' {
				return "", a, false
			}
			i++
		}
		if i >= len(s) {
			return "", a, false
		}
		v := uint(s[i]) - '0' // wraps above 9 for a byte below '0'
		if v > 9 {
			return "", a, false
		}
		i++
		if v != 0 { // a 0 stands alone: what follows it must be a dot, a colon or the end
			for end := min(i+2, len(s)); i < end; i++ {
				d := uint(s[i]) - '0'
				if d > 9 {
					break
				}
				v = v*10 + d
			}
			if v > 255 {
				return "", a, false
			}
		}
		a[n] = byte(v)
	}
	host = s[:i]
	if i < len(s) && (s[i] != ':' || !clientIPIsPort(s[i+1:])) {
		return "", a, false
	}
	return host, a, true
}

// clientIPIsPort reports whether s is 1 to 5 ASCII digits.
func clientIPIsPort(s string) bool {
	if len(s) == 0 || len(s) > 5 {
		return false
	}
	for i := range len(s) {
		if s[i]-'0' > 9 { // wraps above 9 for a byte below '0'
			return false
		}
	}
	return true
}

// clientIPCutLast splits s around its last comma: entry is what follows it and rest what
// precedes it. If s has no comma, entry is s and more is false.
func clientIPCutLast(s string) (entry, rest string, more bool) {
	if i := strings.LastIndexByte(s, ','); i >= 0 {
		return s[i+1:], s[:i], true
	}
	return s, "", false
}

// clientIPTrim trims the optional white space of RFC 9110 (spaces and tabs) around s.
func clientIPTrim(s string) string {
	for len(s) > 0 && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	for len(s) > 0 && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}
	return s
}

// forwardedFor returns the node of the for= parameter of an RFC 7239 Forwarded element, its
// quotes and any obfuscated port removed ("[2001:db8::1]:4711", "192.0.2.43" for
// "192.0.2.43:_hidden"), or "unknown" when the element names none, which stops a walk as any
// entry that is not an address does.
func forwardedFor(element string) string {
	for element != "" {
		pair := element
		if i := strings.IndexByte(element, ';'); i >= 0 {
			pair, element = element[:i], element[i+1:]
		} else {
			element = ""
		}
		name, value, ok := strings.Cut(clientIPTrim(pair), "=")
		if !ok || !strings.EqualFold(clientIPTrim(name), "for") {
			continue
		}
		value = clientIPTrim(value)
		if len(value) >= 2 && value[0] == '"' && value[len(value)-1] == '"' {
			value = value[1 : len(value)-1]
		}
		if value == "" {
			return "unknown"
		}
		if i := strings.LastIndexByte(value, ':'); i >= 0 && forwardedObfPort(value[i+1:]) {
			value = value[:i]
		}
		return value
	}
	return "unknown"
}

// forwardedObfPort reports whether s is an obfuscated port of RFC 7239 §6.3:
// "_" 1*(ALPHA / DIGIT / "." / "_" / "-").
func forwardedObfPort(s string) bool {
	if len(s) < 2 || s[0] != '_' {
		return false
	}
	for _, c := range []byte(s[1:]) {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '.', c == '_', c == '-':
		default:
			return false
		}
	}
	return true
}
