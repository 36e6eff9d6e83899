package retryafter_test

import (
	"fmt"
	"net/http/httptest"
	"net/netip"

	"github.com/retryafter/retryafter"
)

// ExampleClientIP shows that forwarding headers count only when the peer is a trusted
// proxy, and then only the address that the proxy itself appended.
func ExampleClientIP() {
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "10.0.0.5:443" // the load balancer
	r.Header.Set("X-Forwarded-For", "198.51.100.1, 203.0.113.7")
	r.Header.Set("X-Real-IP", "192.0.2.1")

	// With no trusted proxies the headers are ignored: the peer is the client.
	direct, _ := retryafter.ClientIP()(r)
	fmt.Println(direct)

	// Behind a trusted load balancer the rightmost untrusted entry is the client;
	// "198.51.100.1" was written by the client itself and is never reached.
	behind, _ := retryafter.ClientIP(netip.MustParsePrefix("10.0.0.0/8"))(r)
	fmt.Println(behind)

	// IPv6 clients are grouped by their /64.
	r.RemoteAddr = "[2001:db8:1:2:aaaa:bbbb:cccc:dddd]:51234"
	v6, _ := retryafter.ClientIP()(r)
	fmt.Println(v6)

	// Output:
	// 10.0.0.5
	// 203.0.113.7
	// 2001:db8:1:2::/64
}

// ExampleClientIPPrefix keys IPv4 clients by their /24 and IPv6 clients by their /48.
func ExampleClientIPPrefix() {
	key := retryafter.ClientIPPrefix(24, 48)
	for _, addr := range []string{"203.0.113.7:1", "[::ffff:203.0.113.200]:2", "[2001:db8:1:2::1]:3", "pipe"} {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = addr
		k, err := key(r)
		fmt.Printf("%q %v\n", k, err)
	}
	// Output:
	// "203.0.113.0/24" <nil>
	// "203.0.113.0/24" <nil>
	// "2001:db8:1::/48" <nil>
	// "" retryafter: no client IP in request: RemoteAddr "pipe"
}
