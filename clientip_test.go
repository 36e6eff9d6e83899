package retryafter

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/time/rate"
)

// clientIPReq returns a GET from remote with the given header name/value pairs.
func clientIPReq(remote string, kv ...string) *http.Request { return newRequest("GET", remote, kv...) }

// clientIPMustKey calls key on r and fails the test on an error.
func clientIPMustKey(t testing.TB, key func(*http.Request) (string, error), r *http.Request) string {
	t.Helper()
	k, err := key(r)
	if err != nil {
		t.Fatalf("key(RemoteAddr %q, %v) error: %v", r.RemoteAddr, r.Header, err)
	}
	return k
}

// clientIPSpoofHeaders are forwarding headers a client may send to try to pick its own key.
var clientIPSpoofHeaders = []string{
	"X-Forwarded-For", "198.51.100.23",
	"X-Forwarded-For", "10.1.2.3, 192.0.2.99",
	"X-Real-IP", "192.0.2.1",
	"Forwarded", "for=192.0.2.60;proto=http, for=\"[2001:db8::7]:80\"",
	"True-Client-IP", "192.0.2.2",
	"CF-Connecting-IP", "192.0.2.3",
}

func TestClientIPRemoteAddr(t *testing.T) {
	tests := []struct {
		remote string
		want   string // "" means an error wrapping ErrNoClientIP
	}{
		{"203.0.113.7:51234", "203.0.113.7"},
		{"203.0.113.7", "203.0.113.7"},
		{"0.0.0.0:1", "0.0.0.0"},
		{"255.255.255.255:65535", "255.255.255.255"},
		{"[2001:db8:1:2:3:4:5:6]:443", "2001:db8:1:2::/64"},
		{"[2001:db8:1:2::1]", "2001:db8:1:2::/64"},
		{"2001:db8:1:2::1", "2001:db8:1:2::/64"},
		{"2001:DB8:1:2:0:0:0:1", "2001:db8:1:2::/64"},
		{"[2001:0db8:0001:0002:ffff::1]:80", "2001:db8:1:2::/64"},
		{"[::1]:8080", "::/64"},
		{"::1", "::/64"},
		{"[fe80::1%eth0]:80", "fe80::/64"},
		{"fe80::1%eth0", "fe80::/64"},
		{"[fe80::1%25eth0]:80", "fe80::/64"},
		{"[::ffff:203.0.113.7]:80", "203.0.113.7"},
		{"::ffff:203.0.113.7", "203.0.113.7"},
		{"[::ffff:cb00:7107]:80", "203.0.113.7"},
		{"[::ffff:203.0.113.7%eth0]:80", "203.0.113.7"},
		{"127.0.0.1:0", "127.0.0.1"},

		{"", ""},
		{"pipe", ""},
		{"@", ""},
		{"/run/app.sock", ""},
		{"localhost:80", ""},
		{"example.com", ""},
		{":80", ""},
		{"203.0.113.7:", ""},
		{"203.0.113.7:http", ""},
		{"203.0.113.7:123456", ""},
		{"203.0.113.07:80", ""},
		{"203.0.113:80", ""},
		{"1.2.3.4%eth0", ""},
		{"[203.0.113.7", ""},
		{"[2001:db8::1]x", ""},
		{"[2001:db8::1]:", ""},
		{"[]:80", ""},
		{"[[::1]]:80", ""},
		{" 203.0.113.7:80", ""},
	}
	keys := map[string]func(*http.Request) (string, error){
		"none":    ClientIP(),
		"trusted": ClientIP(netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8")),
	}
	for name, key := range keys {
		for _, tt := range tests {
			for _, hdr := range [][]string{nil, clientIPSpoofHeaders} {
				r := clientIPReq(tt.remote, hdr...)
				got, err := key(r)
				if tt.want == "" {
					if err == nil || !errors.Is(err, ErrNoClientIP) {
						t.Errorf("%s: RemoteAddr %q: got (%q, %v), want an ErrNoClientIP", name, tt.remote, got, err)
					}
					if got != "" {
						t.Errorf("%s: RemoteAddr %q: key %q alongside an error", name, tt.remote, got)
					}
					continue
				}
				if err != nil || got != tt.want {
					t.Errorf("%s: RemoteAddr %q (headers %v): got (%q, %v), want %q", name, tt.remote, hdr != nil, got, err, tt.want)
				}
			}
		}
	}
}

func TestClientIPTrustedWalk(t *testing.T) {
	key := ClientIP(
		netip.MustParsePrefix("10.0.0.0/8"),
		netip.MustParsePrefix("192.168.0.0/16"),
		netip.MustParsePrefix("fd00::/8"),
	)
	const xff = "X-Forwarded-For"
	tests := []struct {
		name   string
		remote string
		kv     []string
		want   string
	}{
		{"untrusted peer ignores XFF", "203.0.113.7:1", []string{xff, "198.51.100.1"}, "203.0.113.7"},
		{"trusted peer without XFF is the key", "10.0.0.1:1", nil, "10.0.0.1"},
		{"trusted peer with empty XFF", "10.0.0.1:1", []string{xff, ""}, "10.0.0.1"},
		{"trusted peer with blank XFF", "10.0.0.1:1", []string{xff, " ,\t, "}, "10.0.0.1"},
		{"one proxy", "10.0.0.1:1", []string{xff, "203.0.113.7"}, "203.0.113.7"},
		{"spoofed entries left of the real client", "10.0.0.1:1", []string{xff, "1.1.1.1, 2.2.2.2, 203.0.113.7"}, "203.0.113.7"},
		{"two proxies", "10.0.0.1:1", []string{xff, "9.9.9.9, 203.0.113.7, 192.168.4.4"}, "203.0.113.7"},
		{"spaces and tabs", "10.0.0.1:1", []string{xff, "9.9.9.9,\t203.0.113.7 ,  10.9.9.9\t"}, "203.0.113.7"},
		{"empty elements skipped", "10.0.0.1:1", []string{xff, "9.9.9.9, 203.0.113.7,,, ,10.2.2.2,"}, "203.0.113.7"},
		{"several lines, last line first", "10.0.0.1:1", []string{xff, "9.9.9.9, 203.0.113.7", xff, "10.3.3.3", xff, "192.168.1.1"}, "203.0.113.7"},
		{"client in the last line", "10.0.0.1:1", []string{xff, "9.9.9.9", xff, "203.0.113.8"}, "203.0.113.8"},
		{"empty last line", "10.0.0.1:1", []string{xff, "9.9.9.9, 203.0.113.7", xff, ""}, "203.0.113.7"},
		{"all trusted: leftmost", "10.0.0.1:1", []string{xff, "192.168.0.9, 10.4.4.4", xff, "10.5.5.5"}, "192.168.0.9"},
		{"all trusted across lines: leftmost", "10.0.0.1:1", []string{xff, " , 192.168.0.9", xff, "10.5.5.5"}, "192.168.0.9"},
		{"entry with port", "10.0.0.1:1", []string{xff, "203.0.113.7:4711"}, "203.0.113.7"},
		{"IPv6 entry in brackets with port", "10.0.0.1:1", []string{xff, "[2001:db8:1:2::9]:4711"}, "2001:db8:1:2::/64"},
		{"IPv6 entry in brackets", "10.0.0.1:1", []string{xff, "[2001:db8:1:2::9]"}, "2001:db8:1:2::/64"},
		{"IPv6 entry bare", "10.0.0.1:1", []string{xff, "2001:db8:1:2::9"}, "2001:db8:1:2::/64"},
		{"IPv6 entry with zone", "10.0.0.1:1", []string{xff, "fe80::1%eth0"}, "fe80::/64"},
		{"IPv4-mapped entry", "10.0.0.1:1", []string{xff, "::ffff:203.0.113.7"}, "203.0.113.7"},
		{"IPv4-mapped trusted entry is trusted", "10.0.0.1:1", []string{xff, "203.0.113.7, ::ffff:10.6.6.6"}, "203.0.113.7"},
		{"IPv6 trusted proxy", "[fd00::1]:1", []string{xff, "203.0.113.7"}, "203.0.113.7"},
		{"IPv4-mapped trusted peer", "[::ffff:10.0.0.1]:1", []string{xff, "203.0.113.7"}, "203.0.113.7"},
		{"unknown stops at the proxy", "10.0.0.1:1", []string{xff, "203.0.113.7, unknown"}, "10.0.0.1"},
		{"obfuscated stops at the proxy", "10.0.0.1:1", []string{xff, "_hidden"}, "10.0.0.1"},
		{"garbage stops at the last trusted hop", "10.0.0.1:1", []string{xff, "203.0.113.7, <script>, 192.168.7.7"}, "192.168.7.7"},
		{"host name stops", "10.0.0.1:1", []string{xff, "evil.example"}, "10.0.0.1"},
		{"Forwarded syntax in XFF stops", "10.0.0.1:1", []string{xff, "for=203.0.113.7"}, "10.0.0.1"},
		{"leading zeros stop", "10.0.0.1:1", []string{xff, "203.0.113.007"}, "10.0.0.1"},
		{"bad port stops", "10.0.0.1:1", []string{xff, "203.0.113.7:x"}, "10.0.0.1"},
		{"unclosed bracket stops", "10.0.0.1:1", []string{xff, "[2001:db8::1"}, "10.0.0.1"},
		{"Forwarded ignored from trusted peer", "10.0.0.1:1", []string{"Forwarded", "for=203.0.113.7"}, "10.0.0.1"},
		{"X-Real-IP ignored from trusted peer", "10.0.0.1:1", []string{"X-Real-IP", "203.0.113.7"}, "10.0.0.1"},
		{"XFF walked, Forwarded ignored", "10.0.0.1:1", []string{"Forwarded", "for=198.51.100.1", xff, "203.0.113.7", "X-Real-IP", "198.51.100.2"}, "203.0.113.7"},
	}
	for _, tt := range tests {
		if got := clientIPMustKey(t, key, clientIPReq(tt.remote, tt.kv...)); got != tt.want {
			t.Errorf("%s: got %q, want %q", tt.name, got, tt.want)
		}
	}
}

// clientIPRandAddr returns a random IPv4 or IPv6 address.
func clientIPRandAddr(rng *rand.Rand) netip.Addr {
	if rng.IntN(2) == 0 {
		var b [4]byte
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return netip.AddrFrom4(b)
	}
	var b [16]byte
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return netip.AddrFrom16(b).Unmap()
}

// clientIPRandSpoof returns a header value that an attacker might send: addresses, addresses of
// trusted proxies, Forwarded syntax, garbage, empty elements, many lines' worth.
func clientIPRandSpoof(rng *rand.Rand, trusted []netip.Prefix) string {
	var parts []string
	for n := rng.IntN(6); n >= 0; n-- {
		switch rng.IntN(8) {
		case 0:
			parts = append(parts, "")
		case 1:
			parts = append(parts, "unknown")
		case 2:
			parts = append(parts, fmt.Sprintf("for=%s;proto=https", clientIPRandAddr(rng)))
		case 3:
			parts = append(parts, netip.AddrPortFrom(clientIPRandAddr(rng), uint16(rng.Uint32())).String())
		case 4:
			if len(trusted) > 0 {
				parts = append(parts, trusted[rng.IntN(len(trusted))].Addr().Next().String())
				continue
			}
			fallthrough
		case 5:
			b := make([]byte, rng.IntN(20))
			for i := range b {
				b[i] = byte(rng.Uint32())
			}
			parts = append(parts, string(b))
		default:
			parts = append(parts, clientIPRandAddr(rng).String())
		}
	}
	return strings.Join(parts, ", ")
}

// TestClientIPRotatingAttacker checks that a client who sends different forwarding headers
// on every request always gets the same key: its own address, or its /64.
func TestClientIPRotatingAttacker(t *testing.T) {
	trusted := []netip.Prefix{
		netip.MustParsePrefix("10.0.0.0/8"),
		netip.MustParsePrefix("2001:db8:ffff::/48"),
	}
	proxy4 := netip.MustParseAddrPort("10.20.30.40:443")
	proxy6 := netip.MustParseAddrPort("[2001:db8:ffff::5]:443")
	headers := []string{"X-Forwarded-For", "X-Real-IP", "Forwarded", "X-Forwarded-Host", "True-Client-IP", "CF-Connecting-IP"}

	rng := rand.New(rand.NewPCG(7, 7))
	for _, attacker := range []netip.Addr{
		netip.MustParseAddr("203.0.113.66"),
		netip.MustParseAddr("2001:db8:aaaa:bbbb:1:2:3:4"),
	} {
		want := clientIPMustKey(t, ClientIP(), clientIPReq(netip.AddrPortFrom(attacker, 1).String()))
		scenarios := []struct {
			name  string
			key   func(*http.Request) (string, error)
			build func(spoof []string, port uint16) *http.Request
		}{
			{"direct, no trusted proxies", ClientIP(), func(spoof []string, port uint16) *http.Request {
				return clientIPReq(netip.AddrPortFrom(attacker, port).String(), spoof...)
			}},
			{"direct, trusted proxies configured", ClientIP(trusted...), func(spoof []string, port uint16) *http.Request {
				return clientIPReq(netip.AddrPortFrom(attacker, port).String(), spoof...)
			}},
			{"behind a trusted proxy that appends to the last line", ClientIP(trusted...), func(spoof []string, port uint16) *http.Request {
				r := clientIPReq(proxy4.String(), spoof...)
				if v := r.Header.Values("X-Forwarded-For"); len(v) > 0 {
					v[len(v)-1] += ", " + attacker.String()
				} else {
					r.Header.Set("X-Forwarded-For", attacker.String())
				}
				return r
			}},
			{"behind two trusted proxies that add lines", ClientIP(trusted...), func(spoof []string, port uint16) *http.Request {
				r := clientIPReq(proxy6.String(), spoof...)
				r.Header.Add("X-Forwarded-For", attacker.String())
				r.Header.Add("X-Forwarded-For", proxy4.Addr().String())
				return r
			}},
			{"behind a trusted proxy that appends to Forwarded", ClientIPFrom("Forwarded", trusted...), func(spoof []string, port uint16) *http.Request {
				r := clientIPReq(proxy4.String(), spoof...)
				node := `"` + netip.AddrPortFrom(attacker, port).String() + `"`
				if v := r.Header.Values("Forwarded"); len(v) > 0 {
					v[len(v)-1] += ", for=" + node + ";proto=https"
				} else {
					r.Header.Set("Forwarded", "proto=https;for="+node)
				}
				return r
			}},
			{"behind a trusted proxy that hides ports in Forwarded", ClientIPFrom("Forwarded", trusted...), func(spoof []string, port uint16) *http.Request {
				r := clientIPReq(proxy4.String(), spoof...)
				node := netip.AddrPortFrom(attacker, 0).String()
				node = `"` + node[:len(node)-1] + clientIPObfPort(port) + `"`
				r.Header.Add("Forwarded", "for="+node+";by=_proxy")
				return r
			}},
			{"behind a CDN that sets CF-Connecting-IP", ClientIPFrom("CF-Connecting-IP", trusted...), func(spoof []string, port uint16) *http.Request {
				r := clientIPReq(proxy6.String(), spoof...)
				r.Header.Set("CF-Connecting-IP", attacker.String())
				return r
			}},
			{"behind a CDN that sets True-Client-IP", ClientIPFrom("true-client-ip", trusted...), func(spoof []string, port uint16) *http.Request {
				r := clientIPReq(proxy4.String(), spoof...)
				r.Header.Set("True-Client-IP", attacker.String())
				return r
			}},
			{"direct, a CDN's field trusted from others", ClientIPFrom("X-Real-IP", trusted...), func(spoof []string, port uint16) *http.Request {
				return clientIPReq(netip.AddrPortFrom(attacker, port).String(), spoof...)
			}},
		}
		for _, sc := range scenarios {
			for i := 0; i < 2000; i++ {
				var spoof []string
				for n := rng.IntN(5); n > 0; n-- {
					spoof = append(spoof, headers[rng.IntN(len(headers))], clientIPRandSpoof(rng, trusted))
				}
				r := sc.build(spoof, uint16(rng.Uint32()))
				if got := clientIPMustKey(t, sc.key, r); got != want {
					t.Fatalf("%s: attacker %v with headers %q got key %q, want %q", sc.name, attacker, r.Header, got, want)
				}
			}
		}
	}
}

// clientIPObfPort returns an RFC 7239 obfuscated port ("_" 1*(ALPHA / DIGIT / "." / "_" / "-"))
// made from n.
func clientIPObfPort(n uint16) string {
	const chars = "abcXYZ019._-"
	b := []byte{'_'}
	for {
		b = append(b, chars[n%uint16(len(chars))])
		if n /= uint16(len(chars)); n == 0 {
			return string(b)
		}
	}
}

// TestClientIPIgnoresHeadersWithoutTrust checks over many random requests that, with no
// trusted proxies, the key is a function of RemoteAddr alone.
func TestClientIPIgnoresHeadersWithoutTrust(t *testing.T) {
	key := ClientIP()
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 5000; i++ {
		remote := netip.AddrPortFrom(clientIPRandAddr(rng), uint16(rng.Uint32())).String()
		want := clientIPMustKey(t, key, clientIPReq(remote))
		r := clientIPReq(remote, "X-Forwarded-For", clientIPRandSpoof(rng, nil), "X-Real-IP", clientIPRandAddr(rng).String(),
			"Forwarded", "for="+clientIPRandAddr(rng).String())
		if got := clientIPMustKey(t, key, r); got != want {
			t.Fatalf("RemoteAddr %q with headers %q: key %q, want %q", remote, r.Header, got, want)
		}
	}
}

// TestClientIPv6Grouping checks that two IPv6 addresses share a key exactly when they
// share their /64 (or the configured prefix).
func TestClientIPv6Grouping(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, bits := range []int{64, 48, 56, 128} {
		key := ClientIPPrefix(32, bits)
		for i := 0; i < 3000; i++ {
			var a, b [16]byte
			for j := range a {
				a[j] = byte(rng.Uint32())
			}
			a[0] = 0x20 // stay out of ::ffff:0:0/96
			b = a
			// Flip one random bit, inside or outside the prefix.
			bit := rng.IntN(128)
			b[bit/8] ^= 0x80 >> (bit % 8)
			x, y := netip.AddrFrom16(a), netip.AddrFrom16(b)
			kx := clientIPMustKey(t, key, clientIPReq(netip.AddrPortFrom(x, 1).String()))
			ky := clientIPMustKey(t, key, clientIPReq(netip.AddrPortFrom(y, 2).String()))
			if same := bit >= bits; (kx == ky) != same {
				t.Fatalf("/%d: %v → %q, %v → %q; want same key = %v", bits, x, kx, y, ky, same)
			}
			p, err := netip.ParsePrefix(kx)
			if bits == 128 {
				if want := x.String(); kx != want {
					t.Fatalf("/128: %v → %q, want %q", x, kx, want)
				}
			} else if err != nil || p.Bits() != bits || !p.Contains(x) || p != p.Masked() {
				t.Fatalf("/%d: %v → %q, want its masked /%d", bits, x, kx, bits)
			}
		}
	}
}

func TestClientIPPrefixV4(t *testing.T) {
	tests := []struct {
		bits   int
		remote string
		want   string
	}{
		{32, "203.0.113.7:1", "203.0.113.7"},
		{24, "203.0.113.7:1", "203.0.113.0/24"},
		{16, "203.0.113.7:1", "203.0.0.0/16"},
		{1, "203.0.113.7:1", "128.0.0.0/1"},
		{24, "[::ffff:203.0.113.7]:1", "203.0.113.0/24"},
	}
	for _, tt := range tests {
		if got := clientIPMustKey(t, ClientIPPrefix(tt.bits, 64), clientIPReq(tt.remote)); got != tt.want {
			t.Errorf("ClientIPPrefix(%d, 64) on %q = %q, want %q", tt.bits, tt.remote, got, tt.want)
		}
	}
}

// TestClientIPCanonical checks over many spellings of random addresses that the key is
// the canonical netip form, whatever spelling RemoteAddr or X-Forwarded-For used.
func TestClientIPCanonical(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	trusted := netip.MustParsePrefix("10.0.0.0/8")
	for _, key := range []func(*http.Request) (string, error){ClientIP(trusted), ClientIPPrefix(32, 128, trusted)} {
		for i := 0; i < 3000; i++ {
			a := clientIPRandAddr(rng)
			for _, s := range clientIPSpellings(a) {
				want := clientIPMustKey(t, key, clientIPReq(netip.AddrPortFrom(a, 9).String()))
				for _, r := range []*http.Request{
					clientIPReq(s),
					clientIPReq("10.0.0.1:1", "X-Forwarded-For", s),
				} {
					got := clientIPMustKey(t, key, r)
					if got != want {
						t.Fatalf("spelling %q (RemoteAddr %q): key %q, want %q", s, r.RemoteAddr, got, want)
					}
				}
				if a.Is4() && want != a.String() {
					t.Fatalf("%v: key %q, want %q", a, want, a.String())
				}
			}
		}
	}
}

// clientIPSpellings returns ways of writing a as a RemoteAddr or X-Forwarded-For entry.
func clientIPSpellings(a netip.Addr) []string {
	if a.Is4() {
		m := netip.AddrFrom16(a.As16())
		return []string{
			a.String(), a.String() + ":80",
			m.String(), "[" + m.String() + "]:80", "[" + m.String() + "]",
			strings.ToUpper(m.StringExpanded()),
		}
	}
	return []string{
		a.String(), "[" + a.String() + "]:443", "[" + a.String() + "]",
		a.StringExpanded(), strings.ToUpper(a.StringExpanded()),
		a.WithZone("eth0").String(), "[" + a.WithZone("en0").String() + "]:1",
	}
}

func TestClientIPTrustedPrefixNormalised(t *testing.T) {
	tests := []struct {
		trusted netip.Prefix
		remote  string
		want    string
	}{
		{netip.MustParsePrefix("::ffff:10.0.0.0/104"), "10.1.1.1:1", "203.0.113.7"},
		{netip.MustParsePrefix("::ffff:10.0.0.0/104"), "[::ffff:10.1.1.1]:1", "203.0.113.7"},
		{netip.PrefixFrom(netip.MustParseAddr("10.1.2.3"), 8), "10.9.9.9:1", "203.0.113.7"},
		{netip.MustParsePrefix("10.0.0.0/8"), "[::ffff:10.9.9.9]:1", "203.0.113.7"},
		{netip.MustParsePrefix("10.0.0.0/8"), "11.0.0.1:1", "11.0.0.1"},
		{netip.MustParsePrefix("::/0"), "10.0.0.1:1", "10.0.0.1"}, // an IPv6 prefix holds no IPv4 peer
		{netip.MustParsePrefix("fe80::/10"), "[fe80::1%eth0]:1", "203.0.113.7"},
		{netip.MustParsePrefix("::ffff:0.0.0.0/96"), "198.51.100.1:1", "203.0.113.7"}, // every IPv4 peer
		{netip.MustParsePrefix("2001:db8::1/128"), "[2001:db8::1]:1", "203.0.113.7"},
		{netip.MustParsePrefix("2001:db8::1/128"), "[2001:db8::2]:1", "2001:db8::/64"}, // one address, not its /32
	}
	for _, tt := range tests {
		key := ClientIP(tt.trusted)
		r := clientIPReq(tt.remote, "X-Forwarded-For", "203.0.113.7")
		if got := clientIPMustKey(t, key, r); got != tt.want {
			t.Errorf("trusted %v, RemoteAddr %q: key %q, want %q", tt.trusted, tt.remote, got, tt.want)
		}
	}

	// The key function keeps its own copy of the trusted prefixes.
	list := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	key := ClientIP(list...)
	list[0] = netip.MustParsePrefix("0.0.0.0/0")
	if got := clientIPMustKey(t, key, clientIPReq("11.0.0.1:1", "X-Forwarded-For", "203.0.113.7")); got != "11.0.0.1" {
		t.Errorf("changing the caller's slice changed trust: key %q", got)
	}
}

func TestClientIPPanics(t *testing.T) {
	tests := []struct {
		name string
		f    func()
	}{
		{"zero prefix", func() { ClientIP(netip.Prefix{}) }},
		{"bad bits", func() { ClientIP(netip.PrefixFrom(netip.MustParseAddr("10.0.0.0"), 33)) }},
		{"invalid after valid", func() { ClientIP(netip.MustParsePrefix("10.0.0.0/8"), netip.Prefix{}) }},
		{"v4Bits 0", func() { ClientIPPrefix(0, 64) }},
		{"v4Bits 33", func() { ClientIPPrefix(33, 64) }},
		{"v6Bits 0", func() { ClientIPPrefix(32, 0) }},
		{"v6Bits 129", func() { ClientIPPrefix(32, 129) }},
		{"v6Bits negative", func() { ClientIPPrefix(32, -1) }},
	}
	panics := map[string]func(){}
	for _, tt := range tests {
		panics[tt.name] = tt.f
	}
	wantPanics(t, panics)
	// The edges of the valid ranges do not panic.
	ClientIPPrefix(1, 1)
	ClientIPPrefix(32, 128)
}

func TestClientIPError(t *testing.T) {
	_, err := ClientIP()(clientIPReq("pipe"))
	if !errors.Is(err, ErrNoClientIP) {
		t.Fatalf("error %v does not wrap ErrNoClientIP", err)
	}
	if !strings.HasPrefix(err.Error(), "retryafter: ") {
		t.Errorf("error %q lacks the package prefix", err)
	}
}

func TestClientIPNoAllocs(t *testing.T) {
	tests := []struct {
		name string
		key  func(*http.Request) (string, error)
		r    *http.Request
	}{
		{"IPv4", ClientIP(), clientIPReq("203.0.113.7:51234", "X-Forwarded-For", "1.2.3.4")},
		{"bare IPv4", ClientIP(), clientIPReq("203.0.113.7")},
		{"IPv6 /128", ClientIPPrefix(32, 128), clientIPReq("[2001:db8::1]:443")},
		{"untrusted peer with trusted list", ClientIP(netip.MustParsePrefix("10.0.0.0/8")), clientIPReq("203.0.113.7:1", "X-Forwarded-For", "1.2.3.4")},
		{"trusted peer without X-Forwarded-For", ClientIP(netip.MustParsePrefix("10.0.0.0/8")), clientIPReq("10.0.0.1:1")},
	}
	for _, tt := range tests {
		var got string
		allocs := testing.AllocsPerRun(100, func() { got, _ = tt.key(tt.r) })
		if allocs != 0 {
			t.Errorf("%s: %v allocations per key, want 0", tt.name, allocs)
		}
		if a, err := netip.ParseAddr(got); err != nil || a.String() != got {
			t.Errorf("%s: key %q is not a canonical address", tt.name, got)
		}
	}
}

func BenchmarkClientIP(b *testing.B) {
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8")}
	benches := []struct {
		name string
		key  func(*http.Request) (string, error)
		r    *http.Request
	}{
		{"IPv4", ClientIP(), clientIPReq("203.0.113.7:51234")},
		{"IPv4/spoofed-headers", ClientIP(), clientIPReq("203.0.113.7:51234", clientIPSpoofHeaders...)},
		{"IPv6/64", ClientIP(), clientIPReq("[2001:db8:1:2:3:4:5:6]:51234")},
		{"IPv6/128", ClientIPPrefix(32, 128), clientIPReq("[2001:db8:1:2:3:4:5:6]:51234")},
		{"XFF/1-proxy", ClientIP(trusted...), clientIPReq("10.0.0.1:443", "X-Forwarded-For", "203.0.113.7")},
		{"XFF/3-proxies", ClientIP(trusted...), clientIPReq("10.0.0.1:443",
			"X-Forwarded-For", "198.51.100.1, 203.0.113.7, 10.1.1.1", "X-Forwarded-For", "10.2.2.2")},
		{"XFF/IPv6/64", ClientIP(trusted...), clientIPReq("[fd00::1]:443", "X-Forwarded-For", "2001:db8:1:2::7, fd00::2")},
	}
	for _, bb := range benches {
		b.Run(bb.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := bb.key(bb.r); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// FuzzClientIP checks that no RemoteAddr or X-Forwarded-For makes the key function panic,
// and that every key it returns is a canonical address or prefix, never header text.
func FuzzClientIP(f *testing.F) {
	f.Add("203.0.113.7:51234", "198.51.100.1")
	f.Add("10.0.0.1:443", "198.51.100.1, 203.0.113.7")
	f.Add("[fd00::1]:443", "2001:db8::1, unknown\n10.1.1.1")
	f.Add("[fe80::1%eth0]:80", "[::ffff:10.0.0.3]:99")
	f.Add("pipe", "")
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8")}
	keys := []func(*http.Request) (string, error){
		ClientIP(), ClientIP(trusted...), ClientIPPrefix(24, 128, trusted...), ClientIPPrefix(32, 48, trusted...),
	}
	f.Fuzz(func(t *testing.T, remote, xff string) {
		var kv []string
		for line := range strings.SplitSeq(xff, "\n") {
			kv = append(kv, "X-Forwarded-For", line)
		}
		for i, key := range keys {
			got, err := key(clientIPReq(remote, kv...))
			if err != nil {
				if !errors.Is(err, ErrNoClientIP) || got != "" {
					t.Fatalf("key %d: (%q, %v), want an ErrNoClientIP and no key", i, got, err)
				}
				continue
			}
			if a, err := netip.ParseAddr(got); err == nil {
				if a.String() != got || a.Zone() != "" || a.Is4In6() {
					t.Fatalf("key %d: %q is not a canonical address", i, got)
				}
			} else if p, err := netip.ParsePrefix(got); err != nil || p.String() != got || p != p.Masked() {
				t.Fatalf("key %d: %q is neither a canonical address nor a masked prefix", i, got)
			}
			// The key is RemoteAddr's own key or, with trusted proxies, the key of one of
			// the X-Forwarded-For entries: never anything else.
			alone, _ := key(clientIPReq(remote))
			if i == 0 && alone != got {
				t.Fatalf("key %d: %q with X-Forwarded-For, %q without", i, got, alone)
			}
			found := alone == got
			for j := 1; j < len(kv); j += 2 {
				for entry := range strings.SplitSeq(kv[j], ",") {
					if k, err := key(clientIPReq(strings.Trim(entry, " \t"))); err == nil && k == got {
						found = true
					}
				}
			}
			if !found {
				t.Fatalf("key %d: %q is neither RemoteAddr's key nor that of an X-Forwarded-For entry", i, got)
			}
		}
	})
}

// TestClientIPUnixSocket checks a proxy that connects on a Unix socket: untrusted, the error says
// what to do; trusted as a local proxy (loopback is trusted), its X-Forwarded-For names the client.
func TestClientIPUnixSocket(t *testing.T) {
	local := ClientIP(netip.MustParsePrefix("127.0.0.1/32"), netip.MustParsePrefix("10.0.0.0/8"))
	for _, tt := range []struct {
		name   string
		key    KeyFunc
		remote string
		xff    []string
		want   string // "" for an error
	}{
		{"untrusted", ClientIP(), "@", []string{"203.0.113.7"}, ""},
		{"trusted, but not loopback", ClientIP(netip.MustParsePrefix("10.0.0.0/8")), "@", []string{"203.0.113.7"}, ""},
		{"trusted, unnamed", local, "@", []string{"203.0.113.7"}, "203.0.113.7"},
		{"trusted, path", local, "/run/app.sock", []string{"203.0.113.7:5000"}, "203.0.113.7"},
		{"trusted, empty", local, "", []string{"203.0.113.7"}, "203.0.113.7"},
		{"trusted, IPv6 loopback", ClientIP(netip.MustParsePrefix("::1/128")), "@", []string{"2001:db8:1:2::9"}, "2001:db8:1:2::/64"},
		{"trusted, through a trusted hop", local, "@", []string{"198.51.100.4, 10.1.2.3"}, "198.51.100.4"},
		{"trusted, spoofed on the left", local, "@", []string{"1.1.1.1", "203.0.113.7"}, "203.0.113.7"},
		{"trusted, no header", local, "@", nil, ""},
		{"trusted, garbage", local, "@", []string{"unknown"}, ""},
		{"pipe is no socket", local, "pipe", []string{"203.0.113.7"}, ""},
	} {
		r := clientIPReq(tt.remote)
		if tt.xff != nil {
			r.Header["X-Forwarded-For"] = tt.xff
		}
		got, err := tt.key(r)
		if tt.want == "" {
			if !errors.Is(err, ErrNoClientIP) {
				t.Errorf("%s: key %q, %v; want an error wrapping ErrNoClientIP", tt.name, got, err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("%s: key %q, %v; want %q", tt.name, got, err, tt.want)
		}
	}
	_, err := ClientIP()(clientIPReq("@"))
	if err == nil || !strings.Contains(err.Error(), "Unix socket") || !strings.Contains(err.Error(), "127.0.0.1/32") {
		t.Errorf("the error for an untrusted Unix socket does not say what to do: %v", err)
	}
}

// TestClientIPOverUnixSocket serves requests on a real Unix socket, as behind a local proxy,
// and checks that each client named in X-Forwarded-For has its own limit.
func TestClientIPOverUnixSocket(t *testing.T) {
	var remotes []string
	limit := Limit(rate.Every(time.Hour), 1, WithKeyFunc(ClientIP(netip.MustParsePrefix("127.0.0.1/32"))))
	codes := serveUnix(t, limit(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		remotes = append(remotes, r.RemoteAddr)
	})), "X-Forwarded-For", "203.0.113.7", "203.0.113.8", "203.0.113.7")
	if want := []int{200, 200, 429}; !slices.Equal(codes, want) {
		t.Fatalf("statuses %v, want %v (RemoteAddr seen: %q)", codes, want, remotes)
	}
}

// serveUnix serves h on a Unix socket in a temporary folder, sends it one request for each
// client, named in field ("": without field), and returns the statuses answered. It skips t where
// there are no Unix sockets.
func serveUnix(t *testing.T, h http.Handler, field string, clients ...string) []int {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "s")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Skipf("no Unix sockets here: %v", err)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(ln)
	defer srv.Close()
	c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	var codes []int
	for _, client := range clients {
		req, _ := http.NewRequest("GET", "http://proxy/", nil)
		if client != "" {
			req.Header.Set(field, client)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("client %q: %v", client, err)
		}
		resp.Body.Close()
		codes = append(codes, resp.StatusCode)
	}
	return codes
}

// TestClientIPFromUnixSocket: behind a local proxy on a Unix socket, each field names the client
// when the proxy wrote it; without it the key function fails with an error that wraps
// ErrNoClientIP and names the configured field, and never panics.
func TestClientIPFromUnixSocket(t *testing.T) {
	loopback := netip.MustParsePrefix("127.0.0.1/32")
	for _, field := range []struct{ name, value string }{
		{"X-Real-IP", "203.0.113.7"},
		{"CF-Connecting-IP", "203.0.113.7"},
		{"Forwarded", "for=203.0.113.7"},
		{"X-Forwarded-For", "203.0.113.7"},
	} {
		key := ClientIPFrom(field.name, loopback)
		for _, remote := range []string{"@", "", "/run/app.sock"} {
			if got := clientIPMustKey(t, key, clientIPReq(remote, field.name, field.value)); got != "203.0.113.7" {
				t.Errorf("%s from %q: key %q, want 203.0.113.7", field.name, remote, got)
			}
			for _, header := range [][]string{nil, {field.name, ""}, {field.name, "unknown"}, {"X-Other", "203.0.113.7"}} {
				got, err := callKey(key, clientIPReq(remote, header...))
				if !errors.Is(err, ErrNoClientIP) || got != "" {
					t.Errorf("%s from %q with %q: key %q, %v; want an error wrapping ErrNoClientIP", field.name, remote, header, got, err)
				} else if !strings.Contains(err.Error(), field.name) {
					t.Errorf("%s from %q: the error does not name the field: %v", field.name, remote, err)
				}
			}
			h := Limit(rate.Every(time.Hour), 1, WithKeyFunc(key))(ok)
			if w := serveRequest(h, clientIPReq(remote)); w.Code != http.StatusInternalServerError {
				t.Errorf("%s from %q, through the middleware without the field: %d, want 500", field.name, remote, w.Code)
			}
			if _, err := ClientIPFrom(field.name)(clientIPReq(remote, field.name, field.value)); !errors.Is(err, ErrNoClientIP) ||
				!strings.Contains(err.Error(), field.name) {
				t.Errorf("%s from %q, untrusted: %v; want an error wrapping ErrNoClientIP that names the field", field.name, remote, err)
			}
		}
	}
}

// callKey calls key on r, turning a panic into an error.
func callKey(key KeyFunc, r *http.Request) (k string, err error) {
	defer func() {
		if v := recover(); v != nil {
			k, err = "", fmt.Errorf("panic: %v", v)
		}
	}()
	return key(r)
}

// TestClientIPFromOverUnixSocket serves requests on a real Unix socket through a limit keyed by a
// CDN's field: a request that lacks it is answered 500 and its error told to the hook.
func TestClientIPFromOverUnixSocket(t *testing.T) {
	errs := make(chan error, 10)
	limit := Limit(rate.Every(time.Hour), 1, WithKeyFunc(ClientIPFrom("X-Real-IP", netip.MustParsePrefix("127.0.0.1/32"))),
		WithErrorHook(func(r *http.Request, err error) { errs <- err }))
	codes := serveUnix(t, limit(ok), "X-Real-IP", "203.0.113.7", "", "203.0.113.8", "203.0.113.7")
	if want := []int{200, 500, 200, 429}; !slices.Equal(codes, want) {
		t.Fatalf("statuses %v, want %v", codes, want)
	}
	select {
	case err := <-errs:
		if !errors.Is(err, ErrNoClientIP) || !strings.Contains(err.Error(), "X-Real-IP") {
			t.Errorf("the hook was told %v, want an error wrapping ErrNoClientIP that names X-Real-IP", err)
		}
	default:
		t.Error("the error hook was not told of the request without X-Real-IP")
	}
}

// TestClientIPFrom walks the RFC 7239 Forwarded field and reads a CDN's one-address field from
// trusted peers: each element's for= node is a hop, quoted or not, with a port or in brackets;
// unknown, obfuscated or missing nodes stop the walk at the last trusted hop; a CDN's field that
// is not one address leaves the peer as the key.
func TestClientIPFrom(t *testing.T) {
	trusted := netip.MustParsePrefix("10.0.0.0/8")
	fwd := ClientIPFrom("forwarded", trusted)
	cdn := ClientIPFrom("CF-Connecting-IP", trusted)
	for _, tt := range []struct {
		name   string
		key    KeyFunc
		remote string
		header []string
		want   string
	}{
		{"one element", fwd, "10.0.0.1:1", []string{"Forwarded", "for=203.0.113.7"}, "203.0.113.7"},
		{"quoted, with a port", fwd, "10.0.0.1:1", []string{"Forwarded", `for="203.0.113.7:4711";proto=https`}, "203.0.113.7"},
		{"IPv6 in brackets", fwd, "10.0.0.1:1", []string{"Forwarded", `For="[2001:db8:cafe::17]:4711"`}, "2001:db8:cafe::/64"},
		{"through trusted hops, right to left", fwd, "10.0.0.1:1", []string{"Forwarded", "for=198.51.100.1, for=203.0.113.7;by=10.0.0.2, for=10.0.0.3"}, "203.0.113.7"},
		{"over two lines", fwd, "10.0.0.1:1", []string{"Forwarded", "for=198.51.100.1", "Forwarded", "for=10.0.0.9"}, "198.51.100.1"},
		{"unknown stops the walk", fwd, "10.0.0.1:1", []string{"Forwarded", "for=198.51.100.1, for=unknown"}, "10.0.0.1"},
		{"obfuscated stops the walk", fwd, "10.0.0.1:1", []string{"Forwarded", "for=198.51.100.1, for=_hidden"}, "10.0.0.1"},
		{"obfuscated, with an obfuscated port", fwd, "10.0.0.1:1", []string{"Forwarded", `for=198.51.100.1, for="_hidden:_p"`}, "10.0.0.1"},
		{"obfuscated, with a port", fwd, "10.0.0.1:1", []string{"Forwarded", `for=198.51.100.1, for="_hidden:80"`}, "10.0.0.1"},
		{"unknown, with an obfuscated port", fwd, "10.0.0.1:1", []string{"Forwarded", `for=198.51.100.1, for="unknown:_p"`}, "10.0.0.1"},
		{"an obfuscated port", fwd, "10.0.0.1:1", []string{"Forwarded", `for="192.0.2.43:_hidden"`}, "192.0.2.43"},
		{"an obfuscated port, IPv6", fwd, "10.0.0.1:1", []string{"Forwarded", `for="[2001:db8:cafe::17]:_x1"`}, "2001:db8:cafe::/64"},
		{"an obfuscated port of every character", fwd, "10.0.0.1:1", []string{"Forwarded", `for="192.0.2.43:_aZ09._-"`}, "192.0.2.43"},
		{"an obfuscated port on a trusted hop", fwd, "10.0.0.1:1", []string{"Forwarded", `for="192.0.2.43:_c", for="10.0.0.2:_b"`}, "192.0.2.43"},
		{"an empty obfuscated port", fwd, "10.0.0.1:1", []string{"Forwarded", `for=198.51.100.1, for="192.0.2.43:_"`}, "10.0.0.1"},
		{"an obfuscated port with a bad character", fwd, "10.0.0.1:1", []string{"Forwarded", `for=198.51.100.1, for="192.0.2.43:_a/b"`}, "10.0.0.1"},
		{"an obfuscated port on a bare IPv6, read as a bare IPv6 is", fwd, "10.0.0.1:1", []string{"Forwarded", `for=198.51.100.1, for="2001:db8::17:_x"`}, "2001:db8::/64"},
		{"an obfuscated port in X-Forwarded-For", ClientIP(trusted), "10.0.0.1:1", []string{"X-Forwarded-For", "192.0.2.43:_hidden"}, "10.0.0.1"},
		{"an element without for", fwd, "10.0.0.1:1", []string{"Forwarded", "for=198.51.100.1, proto=https"}, "10.0.0.1"},
		{"an empty pair before for", fwd, "10.0.0.1:1", []string{"Forwarded", ";for=203.0.113.7"}, "203.0.113.7"},
		{"X-Forwarded-For is not read", fwd, "10.0.0.1:1", []string{"X-Forwarded-For", "198.51.100.1"}, "10.0.0.1"},
		{"untrusted peer", fwd, "192.0.2.1:1", []string{"Forwarded", "for=203.0.113.7"}, "192.0.2.1"},
		{"a CDN's field", cdn, "10.0.0.1:1", []string{"CF-Connecting-IP", "203.0.113.7"}, "203.0.113.7"},
		{"a CDN's field, IPv6", cdn, "10.0.0.1:1", []string{"CF-Connecting-IP", "2001:db8::1"}, "2001:db8::/64"},
		{"a CDN's field that is a list", cdn, "10.0.0.1:1", []string{"CF-Connecting-IP", "203.0.113.7, 198.51.100.1"}, "10.0.0.1"},
		{"a CDN's field of garbage", cdn, "10.0.0.1:1", []string{"CF-Connecting-IP", "not an address"}, "10.0.0.1"},
		{"a CDN's field from an untrusted peer", cdn, "192.0.2.1:1", []string{"CF-Connecting-IP", "203.0.113.7"}, "192.0.2.1"},
	} {
		if got := clientIPMustKey(t, tt.key, clientIPReq(tt.remote, tt.header...)); got != tt.want {
			t.Errorf("%s: key %q, want %q", tt.name, got, tt.want)
		}
	}
	wantPanics(t, map[string]func(){"no field": func() { ClientIPFrom("") }})
}
