package intercept

import (
	"errors"
	"net/netip"
	"strings"
)

// Names here are compared as the policy package matches them: ASCII,
// without case, without one trailing dot. Validity beyond the character
// set is the policy's to judge (HostDecision); these functions only make
// sure that a name is safe to compare and to put into a URL.

const maxNameLen = 253

// normalizeName lower-cases name and removes one trailing dot. ok is
// false when name is empty or has a byte other than letters, digits,
// '-', '_' and '.'.
func normalizeName(name string) (string, bool) {
	name = strings.TrimSuffix(name, ".")
	if name == "" || len(name) > maxNameLen {
		return "", false
	}
	lower := true
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '-', c == '_', c == '.':
		case c >= 'A' && c <= 'Z':
			lower = false
		default:
			return "", false
		}
	}
	if !lower {
		name = strings.ToLower(name)
	}
	return name, true
}

// leafName normalises a name for a certificate: a DNS name, not an
// address, with no empty label.
func leafName(name string) (string, bool) {
	n, ok := normalizeName(name)
	if !ok || !wholeLabels(n) {
		return "", false
	}
	if _, err := netip.ParseAddr(n); err == nil {
		return "", false
	}
	return n, true
}

// wholeLabels reports whether a normalised name has no empty label.
func wholeLabels(n string) bool {
	return !strings.HasPrefix(n, ".") && !strings.HasSuffix(n, ".") && !strings.Contains(n, "..")
}

// normalizeNames normalises the names pinned to a destination, dropping
// those that are not names.
func normalizeNames(names []string) []string {
	out := make([]string, 0, len(names))
	for _, name := range names {
		if n, ok := normalizeName(name); ok {
			out = append(out, n)
		}
	}
	return out
}

// containsName reports whether the normalised name n is in the
// normalised list.
func containsName(list []string, n string) bool {
	for _, m := range list {
		if m == n {
			return true
		}
	}
	return false
}

// authority is a parsed Host header, :authority or absolute URI host.
type authority struct {
	host string // normalised
	port uint16 // 0 when none was given
}

var (
	errEmptyAuthority = errors.New("the request names no host")
	errUserinfo       = errors.New("the host has user information ('@')")
	errAddress        = errors.New("the host is an address, not a name")
	errBadHost        = errors.New("the host is not a valid name")
	errBadPort        = errors.New("the port is not a number from 1 to 65535")
)

// parseAuthority parses "host" or "host:port" as a request carries it.
// It accepts only names (an address, bracketed or not, is refused: the
// sandbox must say which name it means) and decimal ports 1 to 65535.
func parseAuthority(s string) (authority, error) {
	if s == "" {
		return authority{}, errEmptyAuthority
	}
	if len(s) > maxNameLen+1+6 {
		return authority{}, errBadHost
	}
	if strings.IndexByte(s, '@') >= 0 {
		return authority{}, errUserinfo
	}
	if s[0] == '[' {
		return authority{}, errAddress
	}
	host, portText, hasPort := s, "", false
	if i := strings.LastIndexByte(s, ':'); i >= 0 {
		host, portText, hasPort = s[:i], s[i+1:], true
	}
	if strings.IndexByte(host, ':') >= 0 {
		return authority{}, errAddress // an unbracketed IPv6 address
	}
	var a authority
	if hasPort {
		p, ok := parsePort(portText)
		if !ok {
			return authority{}, errBadPort
		}
		a.port = p
	}
	n, ok := normalizeName(host)
	if !ok || !wholeLabels(n) {
		return authority{}, errBadHost
	}
	if _, err := netip.ParseAddr(n); err == nil {
		return authority{}, errAddress
	}
	a.host = n
	return a, nil
}

// parsePort parses 1 to 5 decimal digits into a port from 1 to 65535.
func parsePort(s string) (uint16, bool) {
	if s == "" || len(s) > 5 {
		return 0, false
	}
	v := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + int(c-'0')
	}
	if v < 1 || v > 65535 {
		return 0, false
	}
	return uint16(v), true
}
