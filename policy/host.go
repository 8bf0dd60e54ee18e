package policy

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// Names are matched in ASCII only, both the names that arrive from the
// sandbox (DNS questions, SNI, Host headers) and the patterns of a
// configuration: a name with any byte outside letters, digits, '-', '_'
// and '.' never matches, and such a pattern is refused. Clients put
// internationalised names on the wire in punycode ("xn--..."), so this
// refuses nothing real, and no Unicode mapping can turn a look-alike into
// an allowed name. A pattern for an internationalised name is written in
// punycode too.

const (
	maxNameLen  = 253
	maxLabelLen = 63
)

// specialUseSuffixes are domains that never name a public host. The
// pattern "*" (any public host) does not match names in them, nor
// single-label names; an explicit pattern such as "*.internal" does.
var specialUseSuffixes = []string{
	"localhost", "local", "internal", "arpa", "test", "invalid", "onion", "alt",
}

// normalizeName returns the canonical form of a name from the wire:
// lower case, without one trailing dot. ok is false when the name is not
// a syntactically valid ASCII host name, or when it is an address
// literal, in any spelling a resolver might accept (10.0.0.1, ::1,
// 127.1, 0x7f000001, 2130706433).
func normalizeName(name string) (string, bool) {
	name = strings.TrimSuffix(name, ".")
	if name == "" || len(name) > maxNameLen {
		return "", false
	}
	var b []byte // allocated only when the name has upper-case letters
	labelLen := 0
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '-', c == '_':
			labelLen++
		case c >= 'A' && c <= 'Z':
			if b == nil {
				b = []byte(name)
			}
			b[i] = c + ('a' - 'A')
			labelLen++
		case c == '.':
			if labelLen == 0 {
				return "", false
			}
			labelLen = 0
			continue
		default:
			return "", false
		}
		if labelLen > maxLabelLen {
			return "", false
		}
	}
	if labelLen == 0 {
		return "", false
	}
	if b != nil {
		name = string(b)
	}
	if looksNumeric(name) {
		return "", false
	}
	return name, true
}

// looksNumeric reports whether a resolver could take name for an IPv4
// address: its last label is all digits, or a 0x hexadecimal number
// (the rule browsers use, after inet_aton's forms such as 127.1).
func looksNumeric(name string) bool {
	last := name[strings.LastIndexByte(name, '.')+1:]
	if _, err := netip.ParseAddr(name); err == nil {
		return true
	}
	digits := true
	for i := 0; i < len(last); i++ {
		if last[i] < '0' || last[i] > '9' {
			digits = false
			break
		}
	}
	if digits {
		return true
	}
	if len(last) >= 2 && last[0] == '0' && last[1] == 'x' {
		for i := 2; i < len(last); i++ {
			c := last[i]
			if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
				return false
			}
		}
		return true
	}
	return false
}

// isPublicName reports whether a normalised name can be a public host:
// it has at least two labels and is not inside a special-use domain.
func isPublicName(name string) bool {
	if !strings.Contains(name, ".") {
		return false
	}
	for _, s := range specialUseSuffixes {
		if name == s || strings.HasSuffix(name, "."+s) {
			return false
		}
	}
	return true
}

// DefaultPorts are the ports an allowed_hosts pattern without a port
// opens to HTTP and TLS: 80 and 443. A pattern names any other port
// itself ("api.example.com:8443").
var DefaultPorts = []uint16{80, 443}

// A glob is a compiled host pattern.
type glob struct {
	// text is the normalised pattern, as it is shown back to users,
	// with its port when it has one.
	text string
	// port is the one port an allowed_hosts pattern opens; 0 means
	// DefaultPorts.
	port uint16
	// any is true for "*".
	any bool
	// suffix is ".example.com" for "*.example.com"; empty for exact
	// patterns.
	suffix string
	// exact is the name for exact patterns.
	exact string
}

// compileGlob checks and normalises one host pattern: an exact name
// ("api.openai.com"), a wildcard for every subdomain at any depth but not
// the apex ("*.amazonaws.com"), or "*" for any public host.
func compileGlob(pattern string) (glob, error) {
	p := strings.TrimSpace(pattern)
	if p != pattern {
		return glob{}, fmt.Errorf("%q has spaces around it", pattern)
	}
	if p == "" {
		return glob{}, fmt.Errorf("empty host pattern")
	}
	if p == "*" {
		return glob{text: "*", any: true}, nil
	}
	if strings.Contains(p, "://") {
		return glob{}, fmt.Errorf("%q is a URL: give the host name alone, as in %q", pattern, hostOfURL(p))
	}
	if strings.ContainsAny(p, "/:@[]") {
		if h, port, ok := strings.Cut(p, ":"); ok && h != "" && isDigits(port) {
			return glob{}, fmt.Errorf("%q has a port: give the host alone (a port is named only in allowed_hosts, as in %q)", pattern, h+":"+port)
		}
		if _, err := netip.ParseAddrPort(p); err == nil {
			return glob{}, fmt.Errorf("%q is an address: allowed hosts are names; allow an address with an egress rule whose destination is a CIDR", pattern)
		}
		if _, err := netip.ParseAddr(strings.Trim(p, "[]")); err == nil {
			return glob{}, fmt.Errorf("%q is an address: allowed hosts are names; allow an address with an egress rule whose destination is a CIDR", pattern)
		}
		return glob{}, fmt.Errorf("%q is not a host name: give the name alone, without a port, path or user", pattern)
	}
	wild := false
	if rest, ok := strings.CutPrefix(p, "*."); ok {
		wild = true
		p = rest
	}
	if strings.Contains(p, "*") {
		return glob{}, fmt.Errorf("%q: '*' may only be the whole pattern or a whole first label, as in \"*.example.com\"", pattern)
	}
	p = strings.TrimSuffix(p, ".")
	if p == "" {
		if wild {
			return glob{}, fmt.Errorf("%q has no domain after the wildcard", pattern)
		}
		return glob{}, fmt.Errorf("%q is not a host name", pattern)
	}
	for i := 0; i < len(p); i++ {
		if p[i] >= 0x80 {
			return glob{}, fmt.Errorf("%q is not ASCII: write an internationalised name in its punycode form (xn--...)", pattern)
		}
	}
	name, ok := normalizeName(p)
	if !ok {
		if _, err := netip.ParseAddr(p); err == nil || looksNumericLoose(p) {
			return glob{}, fmt.Errorf("%q is an address: allowed hosts are names; allow an address with an egress rule whose destination is a CIDR", pattern)
		}
		return glob{}, fmt.Errorf("%q is not a valid host name (letters, digits, '-' and '_' in dot-separated labels of 1 to 63 characters)", pattern)
	}
	if wild {
		return glob{text: "*." + name, suffix: "." + name}, nil
	}
	return glob{text: name, exact: name}, nil
}

// compileHostPort compiles an allowed_hosts pattern: a host pattern
// (compileGlob), alone for ports 80 and 443, or followed by ":PORT" for
// that port alone ("api.example.com:8443", "*.example.com:8080",
// "*:8080").
func compileHostPort(pattern string) (glob, error) {
	host, port, found := strings.Cut(pattern, ":")
	if !found || strings.Contains(port, ":") || strings.ContainsAny(pattern, "[]/") {
		return compileGlob(pattern)
	}
	g, err := compileGlob(host)
	if err != nil {
		return glob{}, err
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil || n == 0 || !isDigits(port) {
		return glob{}, fmt.Errorf("%q: %q is not a port from 1 to 65535", pattern, port)
	}
	g.port = uint16(n)
	g.text += ":" + strconv.Itoa(int(n))
	return g, nil
}

// isDigits reports whether s is a non-empty run of ASCII digits.
func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// allowsPort reports whether an allowed_hosts pattern opens port.
func (g glob) allowsPort(port uint16) bool {
	if g.port != 0 {
		return port == g.port
	}
	return slices.Contains(DefaultPorts, port)
}

// looksNumericLoose is looksNumeric for a string that may not be a valid
// name at all.
func looksNumericLoose(s string) bool {
	s = strings.ToLower(strings.TrimSuffix(s, "."))
	return s != "" && looksNumeric(s)
}

func hostOfURL(s string) string {
	_, rest, _ := strings.Cut(s, "://")
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		rest = rest[:i]
	}
	if i := strings.LastIndexByte(rest, '@'); i >= 0 {
		rest = rest[i+1:]
	}
	if h, _, ok := strings.Cut(rest, ":"); ok && !strings.HasPrefix(rest, "[") {
		rest = h
	}
	return rest
}

// match reports whether a normalised name matches the pattern.
func (g glob) match(name string) bool {
	switch {
	case g.any:
		return isPublicName(name)
	case g.suffix != "":
		return len(name) > len(g.suffix) && strings.HasSuffix(name, g.suffix)
	default:
		return name == g.exact
	}
}

// hostList is a compiled list of patterns.
type hostList []glob

func (l hostList) match(name string) (glob, bool) {
	for _, g := range l {
		if g.match(name) {
			return g, true
		}
	}
	return glob{}, false
}

// matchPort returns the first pattern that matches name and opens port.
func (l hostList) matchPort(name string, port uint16) (glob, bool) {
	for _, g := range l {
		if g.match(name) && g.allowsPort(port) {
			return g, true
		}
	}
	return glob{}, false
}

// ports lists the ports the patterns that match name open, in order.
func (l hostList) ports(name string) []uint16 {
	var out []uint16
	for _, g := range l {
		if !g.match(name) {
			continue
		}
		if g.port != 0 {
			out = append(out, g.port)
		} else {
			out = append(out, DefaultPorts...)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func (l hostList) index(text string) int {
	for i, g := range l {
		if g.text == text {
			return i
		}
	}
	return -1
}

func (l hostList) texts() []string {
	out := make([]string, len(l))
	for i, g := range l {
		out[i] = g.text
	}
	return out
}

// MatchHost reports whether name matches the host pattern, with the
// rules the policy applies: name is normalised (lower case, one trailing
// dot removed), must be a valid ASCII host name and not an address, and
// pattern is one of "api.openai.com", "*.amazonaws.com" (subdomains at
// any depth, not the apex) or "*" (any public host). An invalid pattern
// matches nothing.
func MatchHost(pattern, name string) bool {
	g, err := compileGlob(pattern)
	if err != nil {
		return false
	}
	n, ok := normalizeName(name)
	return ok && g.match(n)
}

// CheckHostPattern returns an error that says what is wrong with a host
// pattern, or nil when it is valid. A pattern with a port
// ("api.example.com:8443"), which only allowed_hosts takes, is checked
// by CheckAllowedPattern.
func CheckHostPattern(pattern string) error {
	_, err := compileGlob(pattern)
	return err
}

// CheckAllowedPattern returns an error that says what is wrong with an
// allowed_hosts pattern (a host pattern, with ":PORT" for a port other
// than 80 and 443), or nil when it is valid.
func CheckAllowedPattern(pattern string) error {
	_, err := compileHostPort(pattern)
	return err
}
