package retryafter

import (
	"errors"
	"net"
	"net/http"
	"net/netip"
)

// ClientIP returns a key function for WithKeyFunc. With no trusted proxies it uses only
// RemoteAddr; forwarding headers are believed only from addresses inside trusted.
func ClientIP(trusted ...netip.Prefix) func(*http.Request) (string, error) {
	return func(r *http.Request) (string, error) {
		host, _, err := net.SplitHostPort(r.RemoteAddr)
		if err != nil {
			host = r.RemoteAddr
		}
		a, err := netip.ParseAddr(host)
		if err != nil {
			return "", errors.New("retryafter: no client IP in request")
		}
		return a.Unmap().WithZone("").String(), nil
	}
}
