package cli

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/airlock-sandbox/airlock/policy"
)

// networkFlags are the flags of airlock run that give the sandbox a
// network. Without any of them it has none.
type networkFlags struct {
	configFile   string
	allowHosts   []string
	denyHosts    []string
	secrets      []string
	egress       []string
	dnsServers   []string
	extraRootCAs []string
	allowCIDRs   []string
}

func (n *networkFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringArrayVar(&n.allowHosts, "allow-host", nil, "give the sandbox a network and let HTTP, TLS and DNS reach hosts matching this pattern (api.example.com, *.example.com, or * for any public host) on ports 80 and 443, or on the one port it names (api.example.com:8443); repeatable")
	fl.StringArrayVar(&n.denyHosts, "deny-host", nil, "never let anything reach hosts matching this pattern, whatever allows them; repeatable")
	fl.StringVar(&n.configFile, "network-config", "", "read the network policy from this JSON file (the \"network\" object of the JSON-RPC create; {} allows nothing); the other network flags add to it")
	fl.StringArrayVar(&n.secrets, "secret", nil, "NAME=VALUE@HOST[,HOST...][/plaintext]: commands see a placeholder in $NAME, replaced by VALUE only in requests to HOST over TLS (and in plain HTTP too with /plaintext); NAME@HOST[,HOST...] takes VALUE from airlock's own $NAME, keeping it off the command line; repeatable")
	fl.StringArrayVar(&n.egress, "egress", nil, "HOST:PORT[,PORT...][/tcp|/udp|/any]: allow traffic that is neither HTTP nor TLS to a host pattern, address or CIDR ([2001:db8::1]:22 for IPv6); default tcp; repeatable")
	fl.StringArrayVar(&n.dnsServers, "dns-server", nil, "upstream DNS server IP[:PORT] that the gateway asks (default: the host's resolver); repeatable")
	fl.StringArrayVar(&n.extraRootCAs, "extra-root-ca", nil, "PEM file of CA certificates trusted, besides the host's roots, to verify upstream TLS servers; repeatable")
	fl.StringArrayVar(&n.allowCIDRs, "allow-cidr", nil, "lift the block on a private, loopback or link-local range (10.1.0.0/16, 169.254.169.254/32); repeatable")
}

// set reports whether any network flag was given.
func (n *networkFlags) set() bool {
	return n.configFile != "" || len(n.allowHosts)+len(n.denyHosts)+len(n.secrets)+len(n.egress)+
		len(n.dnsServers)+len(n.extraRootCAs)+len(n.allowCIDRs) > 0
}

// config builds the network policy the flags describe, or nil for none.
// env is the sandbox's environment, which a secret's name must not be
// in. No error quotes a secret's value.
func (n *networkFlags) config(env map[string]string) (*policy.Config, error) {
	if !n.set() {
		return nil, nil
	}
	var c policy.Config
	if n.configFile != "" {
		data, err := os.ReadFile(n.configFile)
		if err != nil {
			return nil, fmt.Errorf("--network-config: %w", err)
		}
		if c, err = policy.DecodeConfig(data); err != nil {
			return nil, fmt.Errorf("--network-config %s: %w", n.configFile, err)
		}
	}
	for _, h := range n.allowHosts {
		if err := checkFlag("--allow-host", h, policy.Config{AllowedHosts: []string{h}}); err != nil {
			return nil, err
		}
		if !slices.Contains(c.AllowedHosts, h) {
			c.AllowedHosts = append(c.AllowedHosts, h)
		}
	}
	for _, h := range n.denyHosts {
		if err := checkFlag("--deny-host", h, policy.Config{DeniedHosts: []string{h}}); err != nil {
			return nil, err
		}
		if !slices.Contains(c.DeniedHosts, h) {
			c.DeniedHosts = append(c.DeniedHosts, h)
		}
	}
	for _, s := range n.allowCIDRs {
		if err := checkFlag("--allow-cidr", s, policy.Config{AllowedCIDRs: []string{s}}); err != nil {
			return nil, err
		}
		if !slices.Contains(c.AllowedCIDRs, s) {
			c.AllowedCIDRs = append(c.AllowedCIDRs, s)
		}
	}
	for _, s := range n.egress {
		r, err := parseEgress(s)
		if err == nil {
			err = checkFlag("--egress", s, policy.Config{Egress: []policy.EgressRule{r}})
		}
		if err != nil {
			return nil, err
		}
		c.Egress = append(c.Egress, r)
	}
	for _, s := range n.dnsServers {
		if err := checkFlag("--dns-server", s, policy.Config{DNSServers: []string{s}}); err != nil {
			return nil, err
		}
		c.DNSServers = append(c.DNSServers, s)
	}
	for _, f := range n.extraRootCAs {
		abs, err := filepath.Abs(f)
		if err != nil {
			return nil, fmt.Errorf("--extra-root-ca %s: %w", f, err)
		}
		if _, err := os.Stat(abs); err != nil {
			return nil, fmt.Errorf("--extra-root-ca: %w", err)
		}
		c.ExtraRootCAs = append(c.ExtraRootCAs, abs)
	}
	for _, s := range n.secrets {
		name, sec, err := parseSecret(s)
		if err == nil {
			err = checkFlag("--secret", name, policy.Config{Secrets: map[string]policy.Secret{name: sec}})
		}
		if err != nil {
			return nil, err
		}
		if _, dup := c.Secrets[name]; dup {
			return nil, fmt.Errorf("--secret %s: secret %s is given twice (by --secret or --network-config)", name, name)
		}
		if c.Secrets == nil {
			c.Secrets = map[string]policy.Secret{}
		}
		c.Secrets[name] = sec
	}
	for name := range c.Secrets {
		if _, ok := env[name]; ok {
			return nil, fmt.Errorf("secret %s is also set with --env: commands get the secret's placeholder in $%s; leave out --env %s", name, name, name)
		}
	}
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("network flags: %w", err)
	}
	return &c, nil
}

// checkFlag validates the policy of one flag and says what is wrong with
// it in terms of the flag: the problems name the field first
// ("allowed_hosts[0]: ..."), which the flag replaces. what is shown as
// the flag's value: never a secret's value.
func checkFlag(flag, what string, c policy.Config) error {
	err := c.Validate()
	var ce *policy.ConfigError
	if !errors.As(err, &ce) {
		return err
	}
	var msgs []string
	for _, p := range ce.Problems {
		field, msg, ok := strings.Cut(p, ": ")
		if !ok {
			msg = p
		} else if i := strings.LastIndexByte(field, '.'); i >= 0 {
			// Keep the part of a field path that says which part of the
			// flag is wrong (egress[0].ports[1], secrets.K.hosts[0]).
			msg = field[i+1:] + ": " + msg
		}
		msgs = append(msgs, msg)
	}
	return fmt.Errorf("%s %s: %s", flag, what, strings.Join(msgs, "; "))
}

// parseSecret reads NAME=VALUE@HOST[,HOST...][/plaintext] or
// NAME@HOST[,HOST...][/plaintext] (the value then comes from airlock's
// environment); /plaintext sets allow_plaintext. Errors never quote the
// value.
func parseSecret(s string) (string, policy.Secret, error) {
	const usage = "give NAME=VALUE@HOST[,HOST...], or NAME@HOST[,HOST...] to take the value from $NAME in airlock's environment, with /plaintext after the hosts to let the value go in plain HTTP too"
	i := strings.IndexAny(s, "=@")
	if i <= 0 {
		return "", policy.Secret{}, fmt.Errorf("--secret: %s", usage)
	}
	name := s[:i]
	var value, hosts string
	if s[i] == '=' {
		rest := s[i+1:]
		j := strings.LastIndexByte(rest, '@')
		if j < 0 {
			return "", policy.Secret{}, fmt.Errorf("--secret %s: no @HOST after the value: %s", name, usage)
		}
		value, hosts = rest[:j], rest[j+1:]
	} else {
		hosts = s[i+1:]
		v, ok := os.LookupEnv(name)
		if !ok {
			return "", policy.Secret{}, fmt.Errorf("--secret %s@%s: $%s is not set in airlock's environment: export it, or give NAME=VALUE@HOST", name, hosts, name)
		}
		value = v
	}
	var sec policy.Secret
	if h, opt, found := strings.Cut(hosts, "/"); found {
		if opt != "plaintext" {
			return "", policy.Secret{}, fmt.Errorf("--secret %s: %q after the hosts is not /plaintext: %s", name, "/"+opt, usage)
		}
		hosts, sec.AllowPlaintext = h, true
	}
	var list []string
	for h := range strings.SplitSeq(hosts, ",") {
		if h = strings.TrimSpace(h); h != "" {
			list = append(list, h)
		}
	}
	if len(list) == 0 {
		return "", policy.Secret{}, fmt.Errorf("--secret %s: no host after @: %s", name, usage)
	}
	sec.Value, sec.Hosts = value, list
	return name, sec, nil
}

// parseEgress reads HOST:PORT[,PORT...][/PROTO]; HOST may be a host
// pattern, an address or a CIDR, in brackets for IPv6.
func parseEgress(s string) (policy.EgressRule, error) {
	const usage = "give HOST:PORT[,PORT...] with an optional /tcp, /udp or /any (IPv6 in brackets: [2001:db8::1]:22)"
	i := strings.LastIndexByte(s, ':')
	if i <= 0 {
		return policy.EgressRule{}, fmt.Errorf("--egress %s: %s", s, usage)
	}
	host, rest := s[:i], s[i+1:]
	if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
		host = host[1 : len(host)-1]
	}
	portList, proto, _ := strings.Cut(rest, "/")
	r := policy.EgressRule{Destination: host, Protocol: proto}
	for p := range strings.SplitSeq(portList, ",") {
		n, err := strconv.ParseUint(strings.TrimSpace(p), 10, 16)
		if err != nil || n == 0 {
			return policy.EgressRule{}, fmt.Errorf("--egress %s: %q is not a port from 1 to 65535: %s", s, p, usage)
		}
		r.Ports = append(r.Ports, uint16(n))
	}
	return r, nil
}
