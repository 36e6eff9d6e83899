package edge

import (
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"net/textproto"
	"strings"
)

// ErrNoClientIP is the error, wrapped, that [IPKey.Key] returns when no client address can be
// found: the peer's address holds none (a net.Pipe, "pipe"), or the server listens on a Unix
// socket ("@", a path) and the peer is not trusted as a local proxy or names no client. Test
// for it with [errors.Is].
var ErrNoClientIP = errors.New("retryafter: no client IP in request")

// clientIPForwardedFor is pre-canonicalised so that reading it is a plain map lookup.
const clientIPForwardedFor = "X-Forwarded-For"

// NewIPKey returns the client-IP walk of the root package's ClientIPPrefix(v4Bits, v6Bits,
// trusted...), which says how it finds and keys a client, with field the one that trusted
// proxies name the client in: "" or "X-Forwarded-For", "Forwarded", or a CDN's field of one
// address (see the root package's ClientIPFrom). It panics as they do.
func NewIPKey(v4Bits, v6Bits int, field string, trusted ...netip.Prefix) *IPKey {
	if v4Bits < 1 || v4Bits > 32 {
		panic(fmt.Sprintf("retryafter: ClientIPPrefix: v4Bits %d is outside 1..32", v4Bits))
	}
	if v6Bits < 1 || v6Bits > 128 {
		panic(fmt.Sprintf("retryafter: ClientIPPrefix: v6Bits %d is outside 1..128", v6Bits))
	}
	k := &IPKey{v4Bits: v4Bits, v6Bits: v6Bits, field: clientIPForwardedFor, name: clientIPForwardedFor}
	if field != "" {
		k.field, k.name = textproto.CanonicalMIMEHeaderKey(field), field
		switch k.field {
		case clientIPForwardedFor:
		case "Forwarded":
			k.forwarded = true
		default:
			k.single = true
		}
	}
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

// An IPKey finds the client of a request in the address of its peer and, from trusted proxies,
// the field they name the client in, and keys it by its address or prefix. It is never modified
// after construction, and is safe for concurrent use.
type IPKey struct {
	v4Bits, v6Bits int
	trusted        []netip.Prefix // IPv4-mapped ones unmapped
	field          string         // the field trusted proxies name the client in, canonical
	name           string         // field as configured, for errors
	forwarded      bool           // field is RFC 7239's Forwarded: the for= of each element
	single         bool           // field holds one address, a CDN's
}

// A Header holds the fields of a request, by name: an http.Header, or an edge's own metadata.
type Header interface {
	Values(name string) []string
}

// Key returns the key of the client of a request from remote, its peer's address
// ("host:port", "[host]:port", a bare host, or a Unix socket's "@" or path), and h, its fields,
// of which only the trusted proxies' field is read, and only from a trusted peer. A request
// with no client address fails with an error wrapping [ErrNoClientIP].
func (k *IPKey) Key(remote string, h Header) (string, error) {
	// The common case first: an IPv4 peer, written as net/http writes it, keyed by its address.
	if host, a, ok := canonicalIPv4(remote); ok && k.v4Bits == 32 &&
		(len(k.trusted) == 0 || !k.isTrusted(netip.AddrFrom4(a))) {
		return host, nil
	}
	text, addr, ok := clientIPParseHost(remote)
	if !ok {
		return k.socketKey(remote, h)
	}
	if len(k.trusted) > 0 && k.isTrusted(addr) {
		if lines := k.lines(h); len(lines) > 0 {
			addr = k.walk(lines, addr)
			text = "" // the key is formatted afresh, never a slice of the header
		}
	}
	return k.format(addr, text), nil
}

// socketKey is the key of a request whose RemoteAddr holds no IP. A peer on a Unix socket is a
// local process, as a loopback one is, and is trusted as a proxy when loopback is: the client is
// then found in its X-Forwarded-For as behind any trusted proxy.
func (k *IPKey) socketKey(remote string, h Header) (string, error) {
	if !unixSocketAddr(remote) {
		return "", fmt.Errorf("%w: RemoteAddr %q", ErrNoClientIP, remote)
	}
	if !k.isTrusted(loopback4) && !k.isTrusted(loopback6) {
		return "", fmt.Errorf("%w: RemoteAddr %q is a Unix socket; behind a proxy that connects on one, "+
			"trust it as a local proxy by trusting loopback, netip.MustParsePrefix(\"127.0.0.1/32\"), and have it "+
			"name the client in %s", ErrNoClientIP, remote, k.name)
	}
	if a := k.walk(k.lines(h), netip.Addr{}); a.IsValid() {
		return k.format(a, ""), nil
	}
	return "", fmt.Errorf("%w: RemoteAddr %q is a Unix socket, and %s names no client", ErrNoClientIP, remote, k.name)
}

var (
	loopback4 = netip.AddrFrom4([4]byte{127, 0, 0, 1})
	loopback6 = netip.IPv6Loopback()
)

// lines returns the lines of the trusted proxies' field in h.
func (k *IPKey) lines(h Header) []string {
	if hh, ok := h.(http.Header); ok {
		return hh[k.field] // canonical already
	}
	if h == nil {
		return nil
	}
	return h.Values(k.field)
}

// unixSocketAddr reports whether remote is the RemoteAddr net/http gives a connection on a Unix
// socket: the peer's socket path, "@" for an unnamed or abstract one, or "".
func unixSocketAddr(remote string) bool {
	return remote == "" || remote[0] == '@' || remote[0] == '/'
}

// isTrusted reports whether a, already unmapped and without zone, is inside a trusted
// prefix.
func (k *IPKey) isTrusted(a netip.Addr) bool {
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
func (k *IPKey) walk(lines []string, cur netip.Addr) netip.Addr {
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
func (k *IPKey) format(a netip.Addr, text string) string {
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
