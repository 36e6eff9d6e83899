package edge

import (
	"math/rand/v2"
	"net/netip"
	"strconv"
	"strings"
	"testing"
)

// TestCanonicalIPv4 checks the fast path against the general one: it takes only what netip reads
// as the same IPv4 address and writes back unchanged, with a port or none.
func TestCanonicalIPv4(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 4))
	cases := []string{"0.0.0.0", "255.255.255.255:65535", "1.2.3.4:", "1.2.3.4:123456", "01.2.3.4", "1.2.3", "1.2.3.4.5",
		"256.1.1.1", "1.2.3.4x", "::ffff:1.2.3.4", "[1.2.3.4]:80", "1.2.3.04:1", " 1.2.3.4", "1..3.4", "1.2.3.4:80:80", ""}
	for range 20000 {
		var b strings.Builder
		for i := range 4 + rng.IntN(2) - rng.IntN(2) {
			if i > 0 {
				b.WriteByte(".:"[rng.IntN(5)/4])
			}
			b.WriteString(strconv.Itoa(rng.IntN(300)))
			if rng.IntN(8) == 0 {
				b.WriteByte('0')
			}
		}
		if rng.IntN(2) == 0 {
			b.WriteString(":" + strconv.Itoa(rng.IntN(100000)))
		}
		cases = append(cases, b.String())
	}
	for _, s := range cases {
		checkCanonicalIPv4(t, s)
	}
}

// FuzzCanonicalIPv4 holds the fast path to the general one on any input.
func FuzzCanonicalIPv4(f *testing.F) {
	for _, s := range []string{"203.0.113.7:51234", "0.0.0.0", "01.2.3.4", "1.2.3.4:123456", "255.255.255.256"} {
		f.Add(s)
	}
	f.Fuzz(checkCanonicalIPv4)
}

// checkCanonicalIPv4 fails t unless canonicalIPv4 takes s exactly when the general parser reads
// it as an IPv4 address written as netip writes it, with a port or none, and reads the same.
func checkCanonicalIPv4(t *testing.T, s string) {
	host, a, ok := canonicalIPv4(s)
	text, addr, general := clientIPParseHost(s)
	want := general && addr.Is4() && text == addr.String() && !strings.HasPrefix(s, "[")
	if ok != want || (ok && (host != text || netip.AddrFrom4(a) != addr)) {
		t.Fatalf("canonicalIPv4(%q) = %q, %v, %v; the general parser reads %q, %v, %v", s, host, a, ok, text, addr, general)
	}
}
