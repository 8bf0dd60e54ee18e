package oci

import (
	"fmt"
	"net"
	"net/http"
	"strings"
)

// schemeGuard refuses plain HTTP to a registry that is not on loopback
// unless the pull is insecure. go-containerregistry also falls back to
// HTTP for private-range addresses; docker does not, and neither does
// airlock.
type schemeGuard struct {
	next     http.RoundTripper
	insecure bool
}

// guardError is a refused plain-HTTP request.
type guardError struct{ host string }

func (e *guardError) Error() string {
	return fmt.Sprintf("the registry %s would be reached over plain HTTP, which only a loopback registry may use without --insecure", e.host)
}

func (g *schemeGuard) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Scheme == "http" && !g.insecure && !loopback(req.URL.Hostname()) {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, &guardError{host: req.URL.Host}
	}
	return g.next.RoundTrip(req)
}

// loopback reports whether host is this machine by its name or address.
func loopback(host string) bool {
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
