package policy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"net/netip"
	"path/filepath"
	"strings"
	"time"
)

// Config is a sandbox's network policy, as the "network" object of the
// create parameters gives it. The zero Config allows no egress at all.
type Config struct {
	// AllowedHosts lists the host names that HTTP and TLS requests may
	// go to, and that DNS answers: "api.openai.com" (exactly that
	// name), "*.amazonaws.com" (any subdomain at any depth, not
	// amazonaws.com itself) or "*" (any public host: a name with two
	// labels or more outside the special-use domains localhost, local,
	// internal, arpa, test, invalid, onion and alt). A pattern opens
	// ports 80 and 443 (HTTP or TLS on either); one with a port,
	// "api.example.com:8443" or "*.example.com:8080", opens that port
	// alone (list a name twice for both). No list, or an empty one,
	// means no egress.
	AllowedHosts []string `json:"allowed_hosts,omitempty"`
	// DeniedHosts are patterns that no request, flow or DNS answer may
	// match, whatever else allows them, on any port. Same syntax as
	// AllowedHosts, without a port.
	DeniedHosts []string `json:"denied_hosts,omitempty"`
	// BlockPrivateIPs keeps private networks (10/8, 172.16/12,
	// 192.168/16, 100.64/10, fc00::/7, fec0::/10) out of reach; nil
	// means true. Setting it to false lifts those ranges only: loopback,
	// link-local, cloud metadata, multicast, reserved ranges and this
	// machine's own addresses stay blocked unless AllowedCIDRs names
	// them.
	BlockPrivateIPs *bool `json:"block_private_ips,omitempty"`
	// AllowedCIDRs lifts the address blocks for exactly these ranges.
	// Each must lie inside one blocked range (10.1.0.0/16,
	// 127.0.0.1/32, 169.254.169.254/32); a range that spans blocked
	// and public addresses, such as 0.0.0.0/0, is refused. A block for
	// one of this machine's own addresses is lifted only by that
	// address as a /32 or /128.
	AllowedCIDRs []string `json:"allowed_cidrs,omitempty"`
	// Egress allows traffic that is neither HTTP nor TLS (ssh, database
	// protocols, UDP), by destination and port.
	Egress []EgressRule `json:"egress,omitempty"`
	// Secrets maps an environment variable name to a secret. The
	// sandbox gets a placeholder in that variable; requests to the
	// secret's hosts get the value in its place.
	Secrets map[string]Secret `json:"secrets,omitempty"`
	// ScrubResponses replaces every secret's value by its placeholder in
	// every response. Without it, only the responses of a secret's own
	// hosts are scrubbed of its value: those are the only hosts airlock
	// sends it to.
	ScrubResponses bool `json:"scrub_responses,omitempty"`
	// PolicyScript is Starlark source that may define
	// is_host_allowed(host), on_request(req), on_response(resp, req) and
	// on_file(op, path, size).
	PolicyScript string `json:"policy_script,omitempty"`
	// DNSServers are the upstream resolvers, as "ip:port" (a bare IP
	// means port 53). Empty means the host's resolver.
	DNSServers []string `json:"dns_servers,omitempty"`
	// ExtraRootCAs are paths of PEM files with certificates trusted, in
	// addition to the host's roots, to verify upstream TLS servers.
	ExtraRootCAs []string `json:"extra_root_cas,omitempty"`
	// ResponseHeaderTimeoutSeconds bounds how long an upstream server
	// may take, once a request is sent, to begin its response (its
	// header; a body may then stream for as long as it lasts). The
	// sandbox then gets 504 Gateway Timeout. 0 means
	// DefaultResponseHeaderTimeout; at most MaxResponseHeaderTimeout.
	ResponseHeaderTimeoutSeconds float64 `json:"response_header_timeout_seconds,omitempty"`
}

// Bounds of ResponseHeaderTimeoutSeconds. The default leaves room for
// the slowest ordinary APIs (a language model's long completion, sent
// whole, can take minutes before its first byte), and still frees what
// a server that never answers holds.
const (
	DefaultResponseHeaderTimeout = 5 * time.Minute
	MaxResponseHeaderTimeout     = 24 * time.Hour
)

// ResponseHeaderTimeout returns ResponseHeaderTimeoutSeconds as a
// duration, DefaultResponseHeaderTimeout when it is 0.
func (c Config) ResponseHeaderTimeout() time.Duration {
	if c.ResponseHeaderTimeoutSeconds == 0 {
		return DefaultResponseHeaderTimeout
	}
	return time.Duration(c.ResponseHeaderTimeoutSeconds * float64(time.Second))
}

// EgressRule allows non-HTTP, non-TLS flows to a destination.
type EgressRule struct {
	// Destination is a host pattern (same syntax as AllowedHosts,
	// without a port; matched against the names DNS pinned to the
	// destination address) or a CIDR or a single address. A CIDR inside a blocked range lifts
	// that block for the flows this rule allows.
	Destination string `json:"destination"`
	// Ports lists the destination ports. It is required: a rule for
	// every port has to list them.
	Ports []uint16 `json:"ports"`
	// Protocol is "tcp" (the default when empty), "udp" or "any".
	Protocol string `json:"protocol,omitempty"`
}

// Secret is a value that the sandbox never sees, and that is sent only to
// the hosts it is scoped to.
type Secret struct {
	Value string `json:"value"`
	// Hosts are the patterns of the hosts the value may be sent to
	// (same syntax as AllowedHosts, without a port: the value goes to
	// them on whichever ports they are allowed). Required.
	Hosts []string `json:"hosts"`
	// AllowPlaintext lets the value go to its hosts in plain HTTP too.
	// Without it the value is sent only inside TLS, and a plain-HTTP
	// request that carries the placeholder to one of its hosts is
	// blocked (ReasonSecretPlaintext): it would cross the network in
	// clear.
	AllowPlaintext bool `json:"allow_plaintext,omitempty"`
}

// MaxSecretValue bounds a secret's value: the rewriters hold back, and
// scan for, a few times its length.
const MaxSecretValue = 64 << 10

// maxSecretName bounds a secret's name (an environment variable name).
const maxSecretName = 128

// BlocksPrivateIPs reports whether private networks are blocked: true
// unless BlockPrivateIPs is set to false.
func (c Config) BlocksPrivateIPs() bool {
	return c.BlockPrivateIPs == nil || *c.BlockPrivateIPs
}

// ConfigError lists every problem found in a Config, each prefixed with
// the field it is about, as in `allowed_hosts[1]: ...`.
type ConfigError struct {
	Problems []string
}

func (e *ConfigError) Error() string {
	return "network policy: " + strings.Join(e.Problems, "; ")
}

type problems struct{ list []string }

func (p *problems) add(field string, format string, args ...any) {
	p.list = append(p.list, field+": "+fmt.Sprintf(format, args...))
}

func (p *problems) err() error {
	if len(p.list) == 0 {
		return nil
	}
	return &ConfigError{Problems: p.list}
}

// Validate checks the configuration without using the network or the
// file system (New also reads ExtraRootCAs and runs the policy script's
// top level). The error, a *ConfigError, names every problem.
func (c *Config) Validate() error {
	_, err := compileConfig(c)
	return err
}

// compiled is the checked form of a Config.
type compiled struct {
	allowed, denied hostList
	lifts           []netip.Prefix
	egress          []egressRule
	secrets         []secretSpec
	dnsServers      []netip.AddrPort
	script          *scriptSource
}

type egressRule struct {
	host  *glob        // nil for a CIDR destination
	cidr  netip.Prefix // valid for a CIDR destination
	ports []uint16
	proto string // "tcp", "udp" or "any"
	text  string
}

type secretSpec struct {
	name           string
	value          string
	hosts          hostList
	allowPlaintext bool
}

func compileHosts(field string, list []string, pr *problems) hostList {
	return compileList(field, list, compileGlob, pr)
}

func compileList(field string, list []string, compile func(string) (glob, error), pr *problems) hostList {
	out := make(hostList, 0, len(list))
	seen := map[string]int{}
	for i, s := range list {
		f := fmt.Sprintf("%s[%d]", field, i)
		g, err := compile(s)
		if err != nil {
			pr.add(f, "%v", err)
			continue
		}
		if j, dup := seen[g.text]; dup {
			pr.add(f, "%q is already listed as %s[%d]", s, field, j)
			continue
		}
		seen[g.text] = i
		out = append(out, g)
	}
	return out
}

func compileConfig(c *Config) (*compiled, error) {
	var pr problems
	cc := &compiled{
		allowed: compileList("allowed_hosts", c.AllowedHosts, compileHostPort, &pr),
		denied:  compileHosts("denied_hosts", c.DeniedHosts, &pr),
	}
	for i, s := range c.AllowedCIDRs {
		f := fmt.Sprintf("allowed_cidrs[%d]", i)
		p, err := parseCIDR(s, false)
		if err == nil {
			err = checkLiftCIDR(p)
		}
		if err != nil {
			pr.add(f, "%v", err)
			continue
		}
		cc.lifts = append(cc.lifts, p)
	}
	for i, r := range c.Egress {
		if er, ok := compileEgress(fmt.Sprintf("egress[%d]", i), r, &pr); ok {
			cc.egress = append(cc.egress, er)
		}
	}
	cc.secrets = compileSecrets(c.Secrets, &pr)
	for i, s := range c.DNSServers {
		f := fmt.Sprintf("dns_servers[%d]", i)
		ap, err := netip.ParseAddrPort(s)
		if err != nil {
			a, aerr := netip.ParseAddr(s)
			if aerr != nil {
				pr.add(f, "%q is not an address and port such as 192.0.2.53:53 or [2001:db8::53]:53", s)
				continue
			}
			ap = netip.AddrPortFrom(a, 53)
		}
		if ap.Addr().Zone() != "" {
			pr.add(f, "%q is zone-scoped", s)
			continue
		}
		if ap.Port() == 0 {
			pr.add(f, "%q has port 0", s)
			continue
		}
		cc.dnsServers = append(cc.dnsServers, netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()))
	}
	if t := c.ResponseHeaderTimeoutSeconds; t < 0 || t > MaxResponseHeaderTimeout.Seconds() || math.IsNaN(t) || t > 0 && t < 0.001 {
		pr.add("response_header_timeout_seconds", "%v is not a number of seconds from 0.001 to %d (0 means the default, %d)", t, int(MaxResponseHeaderTimeout.Seconds()), int(DefaultResponseHeaderTimeout.Seconds()))
	}
	for i, s := range c.ExtraRootCAs {
		f := fmt.Sprintf("extra_root_cas[%d]", i)
		if s == "" || !filepath.IsAbs(s) {
			pr.add(f, "%q must be an absolute path to a PEM file", s)
		}
	}
	if c.PolicyScript != "" {
		src, err := compileScript(c.PolicyScript)
		if err != nil {
			pr.add("policy_script", "%v", err)
		}
		cc.script = src
	}
	if err := pr.err(); err != nil {
		return nil, err
	}
	return cc, nil
}

func compileEgress(f string, r EgressRule, pr *problems) (egressRule, bool) {
	er := egressRule{proto: r.Protocol}
	ok := true
	switch r.Protocol {
	case "":
		er.proto = "tcp"
	case "tcp", "udp", "any":
	default:
		pr.add(f+".protocol", "%q is not one of tcp, udp or any", r.Protocol)
		ok = false
	}
	d := r.Destination
	if h, port, found := strings.Cut(d, ":"); found && !strings.Contains(d, "://") && strings.Count(d, ":") == 1 && h != "" && port != "" {
		pr.add(f+".destination", "%q has a port: give the host alone in destination and the port in ports", d)
		ok = false
	} else if !strings.Contains(d, "://") && (strings.ContainsAny(d, "/:") || looksNumericLoose(d)) {
		p, err := parseCIDR(d, true)
		if err != nil {
			pr.add(f+".destination", "%v", err)
			ok = false
		}
		er.cidr = p
		er.text = p.String()
	} else {
		g, err := compileGlob(r.Destination)
		if err != nil {
			pr.add(f+".destination", "%v", err)
			ok = false
		}
		er.host = &g
		er.text = g.text
	}
	if len(r.Ports) == 0 {
		pr.add(f+".ports", "list the ports to allow (an empty list is not taken to mean every port)")
		ok = false
	}
	seen := map[uint16]bool{}
	for j, port := range r.Ports {
		switch {
		case port == 0:
			pr.add(fmt.Sprintf("%s.ports[%d]", f, j), "port 0 is not a port")
			ok = false
		case seen[port]:
			pr.add(fmt.Sprintf("%s.ports[%d]", f, j), "port %d is listed twice", port)
			ok = false
		}
		seen[port] = true
	}
	er.ports = r.Ports
	return er, ok
}

func compileSecrets(m map[string]Secret, pr *problems) []secretSpec {
	names := sortedKeys(m)
	folded := map[string]string{}
	var out []secretSpec
	for _, name := range names {
		s := m[name]
		f := "secrets." + name
		ok := true
		if err := checkSecretName(name); err != nil {
			pr.add("secrets", "%v", err)
			ok = false
		} else if other, dup := folded[strings.ToUpper(name)]; dup {
			pr.add(f, "%q and %q differ only in case: give secrets names that differ otherwise", other, name)
			ok = false
		}
		folded[strings.ToUpper(name)] = name
		if s.Value == "" {
			pr.add(f+".value", "is empty")
			ok = false
		}
		if len(s.Value) > MaxSecretValue {
			pr.add(f+".value", "is %d bytes long, more than the %d a secret may have", len(s.Value), MaxSecretValue)
			ok = false
		}
		if len(s.Hosts) == 0 {
			pr.add(f+".hosts", "list the hosts the secret may be sent to (a secret with no hosts could only leak)")
			ok = false
		}
		var sub problems
		hosts := compileHosts(f+".hosts", s.Hosts, &sub)
		if len(sub.list) > 0 {
			pr.list = append(pr.list, sub.list...)
			ok = false
		}
		if ok {
			out = append(out, secretSpec{name: name, value: s.Value, hosts: hosts, allowPlaintext: s.AllowPlaintext})
		}
	}
	return out
}

// checkSecretName accepts environment variable names: a letter or '_',
// then letters, digits and '_'. The placeholder embeds the name, and
// these characters are never escaped in URLs, headers or JSON.
func checkSecretName(name string) error {
	if name == "" {
		return fmt.Errorf("a secret has an empty name")
	}
	if len(name) > maxSecretName {
		return fmt.Errorf("secret name %.20q... is longer than %d characters", name, maxSecretName)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c == '_' || i > 0 && c >= '0' && c <= '9' {
			continue
		}
		return fmt.Errorf("secret name %q is not an environment variable name (a letter or '_', then letters, digits and '_')", name)
	}
	return nil
}

// DecodeConfig decodes a Config from JSON strictly: an unknown field (a
// misspelt "allowed_host" would otherwise leave the sandbox without
// egress, silently) or a secret given twice is an error, and the result
// is validated.
func DecodeConfig(data []byte) (Config, error) {
	var c Config
	if err := checkDuplicateKeys(bytes.TrimSpace(data)); err != nil {
		return Config{}, fmt.Errorf("network policy: %w", err)
	}
	type plain Config
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode((*plain)(&c)); err != nil {
		return Config{}, fmt.Errorf("network policy: %w", err)
	}
	if dec.More() {
		return Config{}, fmt.Errorf("network policy: data after the object")
	}
	var raw struct {
		Secrets json.RawMessage `json:"secrets"`
	}
	_ = json.Unmarshal(data, &raw)
	if err := checkDuplicateKeys(raw.Secrets); err != nil {
		return Config{}, fmt.Errorf("network policy: secrets: %w", err)
	}
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// UnmarshalJSON decodes a Config, refusing a secret given twice (which
// encoding/json would otherwise resolve silently by keeping the last).
// Unknown fields are ignored, as encoding/json does; DecodeConfig
// refuses them. Do not embed Config in a struct decoded from JSON: this
// method would decode the whole struct.
func (c *Config) UnmarshalJSON(data []byte) error {
	type plain Config
	var raw struct {
		Secrets json.RawMessage `json:"secrets"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return err
	}
	if err := checkDuplicateKeys(raw.Secrets); err != nil {
		return fmt.Errorf("network policy: secrets: %w", err)
	}
	return json.Unmarshal(data, (*plain)(c))
}

func checkDuplicateKeys(raw json.RawMessage) error {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '{' {
		return nil // absent, null, or a type error reported by Unmarshal
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if _, err := dec.Token(); err != nil {
		return err
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		key, _ := tok.(string)
		if seen[key] {
			return fmt.Errorf("%q is given twice", key)
		}
		seen[key] = true
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return err
		}
	}
	return nil
}
