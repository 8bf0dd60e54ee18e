package policy

import (
	"cmp"
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults for Options.
const (
	DefaultScriptMaxSteps = 10_000_000
	DefaultScriptTimeout  = time.Second
	// DefaultScriptMaxAlloc bounds what one call into the policy script
	// allocates, in bytes.
	DefaultScriptMaxAlloc = 16 << 20
	// DefaultScriptConcurrency is how many calls into one policy's
	// script may run at once.
	DefaultScriptConcurrency = 4
	// DefaultScriptProcessConcurrency is how many calls into the policy
	// scripts of all the policies of a process may run at once.
	DefaultScriptProcessConcurrency = 8
	DefaultHookTimeout              = 10 * time.Second
	DefaultMaxHookBody              = 1 << 20
)

// Options are the parts of a policy that come from the embedding program
// rather than from the sandbox's configuration.
type Options struct {
	// HostAddrs are this machine's own addresses, blocked like loopback
	// (InterfaceAddrs lists them).
	HostAddrs []netip.Addr
	// ScriptMaxSteps bounds each call into the policy script (and its
	// top level) in Starlark steps; 0 means DefaultScriptMaxSteps.
	ScriptMaxSteps uint64
	// ScriptTimeout bounds each call into the policy script in time; 0
	// means DefaultScriptTimeout.
	ScriptTimeout time.Duration
	// ScriptMaxAlloc bounds, in bytes, what each call into the policy
	// script (and its top level) allocates in all, garbage included; 0
	// means DefaultScriptMaxAlloc. A call that would allocate more fails,
	// and its request is blocked (ReasonPolicyError).
	ScriptMaxAlloc int64
	// ScriptConcurrency bounds the calls into this policy's script that
	// run at once; 0 means DefaultScriptConcurrency. A call beyond it
	// waits for a slot for up to ScriptTimeout, then fails.
	ScriptConcurrency int
	// ScriptGate is shared by the policies whose script calls it bounds
	// together; nil means the process's, which lets
	// DefaultScriptProcessConcurrency calls run at once.
	ScriptGate *ScriptGate
	// ScriptPrint receives the script's print() output (each message cut
	// at 4 KiB); nil discards it.
	ScriptPrint func(msg string)
	// OnRequest and OnResponse are Go hooks, run after the script's.
	OnRequest  OnRequest
	OnResponse OnResponse
	// HookTimeout bounds each Go hook call; 0 means DefaultHookTimeout.
	HookTimeout time.Duration
	// MaxHookBody is the longest body that callers should buffer for
	// hooks (Policy.MaxHookBody); 0 means DefaultMaxHookBody.
	MaxHookBody int
}

// Policy is a sandbox's network policy, ready to answer the questions of
// the network path. It is safe for concurrent use; the host lists can
// change while it is in use (AllowHost, DenyHost, RemoveHost).
type Policy struct {
	hosts   atomic.Pointer[hostLists]
	writeMu sync.Mutex // serialises host list updates

	addrs          addrPolicy
	egress         []egressRule
	secrets        []secret
	scrubber       *Scrubber
	redactor       *Scrubber // every secret's value, in every form
	scrubResponses bool
	script         *script
	hostCache      scriptCache
	dnsServers     []netip.AddrPort
	rootCAs        []*x509.Certificate

	responseHeaderTimeout time.Duration

	onRequest   OnRequest
	onResponse  OnResponse
	hookTimeout time.Duration
	maxHookBody int
}

// hostLists is an immutable snapshot of the allowed and denied hosts.
type hostLists struct {
	allowed, denied hostList
}

// New checks cfg (see Config.Validate), reads the extra root CAs, runs
// the policy script's top level, and makes a placeholder for each
// secret.
func New(cfg Config, opts Options) (*Policy, error) {
	cc, err := compileConfig(&cfg)
	if err != nil {
		return nil, err
	}
	p := &Policy{
		addrs:                 newAddrPolicy(cfg.BlocksPrivateIPs(), opts.HostAddrs, cc.lifts),
		egress:                cc.egress,
		scrubResponses:        cfg.ScrubResponses,
		dnsServers:            cc.dnsServers,
		responseHeaderTimeout: cfg.ResponseHeaderTimeout(),
		onRequest:             opts.OnRequest,
		onResponse:            opts.OnResponse,
		hookTimeout:           cmp.Or(opts.HookTimeout, DefaultHookTimeout),
		maxHookBody:           cmp.Or(opts.MaxHookBody, DefaultMaxHookBody),
	}
	p.hosts.Store(&hostLists{allowed: cc.allowed, denied: cc.denied})
	for _, path := range cfg.ExtraRootCAs {
		certs, err := readCerts(path)
		if err != nil {
			return nil, &ConfigError{Problems: []string{"extra_root_cas: " + err.Error()}}
		}
		p.rootCAs = append(p.rootCAs, certs...)
	}
	for _, s := range cc.secrets {
		ph, err := makePlaceholder(s.name)
		if err != nil {
			return nil, err
		}
		p.secrets = append(p.secrets, secret{secretSpec: s, placeholder: ph, names: nameForms(s.value)})
	}
	var scrub, redact []rule
	for _, s := range p.secrets {
		redact = append(redact, formRules(s.name, s.value, s.placeholder, false, true)...)
	}
	if cfg.ScrubResponses {
		scrub = redact
	}
	p.scrubber = &Scrubber{e: newEngine(scrub, "")}
	p.redactor = &Scrubber{e: newEngine(redact, "")}
	if cc.script != nil {
		s, err := cc.script.load(scriptLimits{
			maxSteps: cmp.Or(opts.ScriptMaxSteps, DefaultScriptMaxSteps),
			timeout:  cmp.Or(opts.ScriptTimeout, DefaultScriptTimeout),
			maxAlloc: cmp.Or(opts.ScriptMaxAlloc, DefaultScriptMaxAlloc),
			calls:    newScriptGate(cmp.Or(opts.ScriptConcurrency, DefaultScriptConcurrency), "for this policy"),
			shared:   cmp.Or(opts.ScriptGate, processScripts),
		}, opts.ScriptPrint)
		if err != nil {
			return nil, &ConfigError{Problems: []string{"policy_script: " + err.Error()}}
		}
		p.script = s
	}
	return p, nil
}

func readCerts(path string) ([]*x509.Certificate, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var certs []*x509.Certificate
	for {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, fmt.Errorf("%s: %v", path, err)
		}
		certs = append(certs, c)
	}
	if len(certs) == 0 {
		return nil, fmt.Errorf("%s holds no PEM certificate", path)
	}
	return certs, nil
}

// HostAllowed reports whether HTTP and TLS requests may go to a host
// name (from SNI, a Host header or a DNS question; without a port). See
// HostDecision.
func (p *Policy) HostAllowed(name string) bool {
	ok, _ := p.HostDecision(name)
	return ok
}

// HostDecision says whether requests may go to a host name on some
// port, and if not, why: what DNS needs to know. A name is allowed when
// it is valid (ASCII, not an address), no denied_hosts pattern matches
// it, an allowed_hosts pattern matches it, and, when the policy script
// defines is_host_allowed, that returns True: the script can only
// narrow the allowlist. A script error denies (ReasonPolicyError).
// HostPortDecision decides a connection or request, which has a port.
func (p *Policy) HostDecision(name string) (bool, string) {
	return p.hostDecision(name, 0)
}

// HostPortDecision is HostDecision for a connection to port: an
// allowed_hosts pattern opens ports 80 and 443, or the one port it
// names. A name allowed on other ports only is refused with
// ReasonPortNotAllowed, and the reason says how to open the port.
func (p *Policy) HostPortDecision(name string, port uint16) (bool, string) {
	if port == 0 {
		return false, ReasonPortNotAllowed + ": port 0"
	}
	return p.hostDecision(name, port)
}

// HostPortAllowed reports whether HTTP and TLS may reach name on port.
func (p *Policy) HostPortAllowed(name string, port uint16) bool {
	ok, _ := p.HostPortDecision(name, port)
	return ok
}

// hostDecision decides name on port, or on any port when port is 0.
func (p *Policy) hostDecision(name string, port uint16) (bool, string) {
	n, ok := normalizeName(name)
	if !ok {
		return false, ReasonInvalidHost
	}
	hl := p.hosts.Load()
	if g, ok := hl.denied.match(n); ok {
		return false, ReasonHostDenied + ": " + n + " matches " + g.text
	}
	if _, ok := hl.allowed.match(n); !ok {
		return false, ReasonHostNotAllowed + ": " + n
	}
	if why := nameLeak(p.secrets, n); why != "" {
		return false, why
	}
	if port != 0 {
		if _, ok := hl.allowed.matchPort(n, port); !ok {
			return false, portRefusal(n, port, hl.allowed.ports(n))
		}
	}
	return p.scriptAllows(n)
}

// portRefusal says that n is not allowed on port, on which ports it is,
// and how to open port.
func portRefusal(n string, port uint16, open []uint16) string {
	list := make([]string, len(open))
	for i, o := range open {
		list[i] = strconv.Itoa(int(o))
	}
	ports := "port "
	if len(list) > 1 {
		ports = "ports "
	}
	p := n + ":" + strconv.Itoa(int(port))
	return fmt.Sprintf("%s: %s is allowed on %s%s only, not on %d; to allow that port, add %s to allowed_hosts (--allow-host %s, or `airlock policy ID allow %s` while it runs)",
		ReasonPortNotAllowed, n, ports, strings.Join(list, ", "), port, p, p, p)
}

// scriptAllows asks is_host_allowed, when the script defines it. Its
// answers are cached: the script's globals are frozen, so an answer
// depends on the host alone.
func (p *Policy) scriptAllows(n string) (bool, string) {
	if p.script == nil || p.script.isHostAllowed == nil {
		return true, ""
	}
	if ok, hit := p.hostCache.get(n); hit {
		if !ok {
			return false, ReasonScriptDenied + ": " + n
		}
		return true, ""
	}
	ok, err := p.script.hostAllowed(n)
	if err != nil {
		return false, ReasonPolicyError + ": " + err.Error()
	}
	p.hostCache.put(n, ok)
	if !ok {
		return false, ReasonScriptDenied + ": " + n
	}
	return true, ""
}

// NameResolvable says whether the DNS gateway may answer a question for
// name: the name is allowed for HTTP and TLS (HostDecision), or an
// egress rule names it (subject to denied_hosts and is_host_allowed as
// well). The answers must then pass AddrAllowed.
func (p *Policy) NameResolvable(name string) (bool, string) {
	ok, reason := p.HostDecision(name)
	if ok || ReasonCode(reason) != ReasonHostNotAllowed {
		return ok, reason
	}
	n, _ := normalizeName(name)
	for _, r := range p.egress {
		if r.host != nil && r.host.match(n) {
			if why := nameLeak(p.secrets, n); why != "" {
				return false, why
			}
			return p.scriptAllows(n)
		}
	}
	return false, reason
}

// AddrAllowed says whether an upstream address may be reached (a DNS
// answer, or the destination of a connection about to be dialled), and
// if not, why. Blocked are the ranges listed in DESIGN.md and this
// machine's addresses, whether given as they are or embedded in IPv6
// (IPv4-mapped, IPv4-compatible, IPv4-translated, NAT64 64:ff9b::/96 and
// 64:ff9b:1::/48, 6to4 and Teredo), unless an allowed_cidrs entry inside
// the blocked range covers the address. Zone-scoped addresses are
// refused.
func (p *Policy) AddrAllowed(ip netip.Addr) (bool, string) {
	if why := p.addrs.check(ip, nil); why != "" {
		return false, why
	}
	return true, ""
}

// FlowAllowed says whether a flow that is neither HTTP nor TLS may pass:
// proto is "tcp" or "udp", names are the DNS names pinned to ip (none
// for a raw-IP connection: then only CIDR rules can match), port is the
// destination port. It passes when an egress rule allows the protocol
// and port and either names one of the names (which must also pass
// denied_hosts and is_host_allowed) or has a CIDR that contains ip, and
// the address is not blocked. A rule's CIDR that lies inside a blocked
// range lifts that block for the flows it allows. ICMP and other
// protocols are never allowed.
func (p *Policy) FlowAllowed(proto string, names []string, ip netip.Addr, port uint16) (bool, string) {
	if proto != "tcp" && proto != "udp" {
		return false, fmt.Sprintf("%s: protocol %q", ReasonNoEgressRule, proto)
	}
	var norm []string
	for _, name := range names {
		if n, ok := normalizeName(name); ok {
			norm = append(norm, n)
		}
	}
	hl := p.hosts.Load()
	blocked := ""
	for i := range p.egress {
		r := &p.egress[i]
		if r.proto != "any" && r.proto != proto || !slices.Contains(r.ports, port) {
			continue
		}
		var extra []netip.Prefix
		if r.host != nil {
			if !p.namedBy(r.host, norm, hl) {
				continue
			}
		} else {
			if !ip.IsValid() || !r.cidr.Contains(ip.Unmap()) || ip.Zone() != "" {
				continue
			}
			extra = []netip.Prefix{r.cidr}
		}
		if why := p.addrs.check(ip, extra); why != "" {
			blocked = why
			continue
		}
		return true, ""
	}
	if blocked != "" {
		return false, blocked
	}
	return false, fmt.Sprintf("%s: %s to %s port %d", ReasonNoEgressRule, proto, flowDest(norm, ip), port)
}

// namedBy reports whether one of the names matches the rule's pattern
// and passes denied_hosts and is_host_allowed.
func (p *Policy) namedBy(g *glob, names []string, hl *hostLists) bool {
	for _, n := range names {
		if !g.match(n) {
			continue
		}
		if _, denied := hl.denied.match(n); denied {
			continue
		}
		if ok, _ := p.scriptAllows(n); ok {
			return true
		}
	}
	return false
}

func flowDest(names []string, ip netip.Addr) string {
	if len(names) > 0 {
		return fmt.Sprintf("%s (%s)", names[0], ip)
	}
	return ip.String()
}

// AllowHost adds a pattern to the allowed hosts of the running policy,
// and removes it from the denied hosts if it is there exactly. A
// broader denied pattern still wins.
//
// A pattern may name a port ("api.example.com:8443"), which it opens
// alone; one without opens ports 80 and 443.
func (p *Policy) AllowHost(pattern string) error {
	g, err := compileHostPort(pattern)
	if err != nil {
		return err
	}
	return p.updateHosts(g, func(hl *hostLists, g glob) {
		if i := hl.denied.index(g.text); i >= 0 {
			hl.denied = slices.Delete(hl.denied, i, i+1)
		}
		if hl.allowed.index(g.text) < 0 {
			hl.allowed = append(hl.allowed, g)
		}
	})
}

// DenyHost adds a pattern to the denied hosts, which win over every
// allowed pattern and egress rule, and removes it from the allowed hosts
// if it is there exactly.
func (p *Policy) DenyHost(pattern string) error {
	g, err := compileGlob(pattern)
	if err != nil {
		return err
	}
	return p.updateHosts(g, func(hl *hostLists, g glob) {
		if i := hl.allowed.index(g.text); i >= 0 {
			hl.allowed = slices.Delete(hl.allowed, i, i+1)
		}
		if hl.denied.index(g.text) < 0 {
			hl.denied = append(hl.denied, g)
		}
	})
}

// ErrNotListed is returned by RemoveHost for a pattern in neither list.
var ErrNotListed = errors.New("the pattern is in neither allowed_hosts nor denied_hosts")

// RemoveHost removes a pattern from the allowed and denied hosts. Its
// spelling may differ (case, trailing dot) but it must be the same
// pattern: removing "api.example.com" does not narrow "*.example.com".
func (p *Policy) RemoveHost(pattern string) error {
	g, err := compileHostPort(pattern)
	if err != nil {
		return err
	}
	found := false
	err = p.updateHosts(g, func(hl *hostLists, g glob) {
		if i := hl.allowed.index(g.text); i >= 0 {
			hl.allowed = slices.Delete(hl.allowed, i, i+1)
			found = true
		}
		if i := hl.denied.index(g.text); i >= 0 {
			hl.denied = slices.Delete(hl.denied, i, i+1)
			found = true
		}
	})
	if err == nil && !found {
		return fmt.Errorf("removing %q: %w", pattern, ErrNotListed)
	}
	return err
}

func (p *Policy) updateHosts(g glob, f func(*hostLists, glob)) error {
	p.writeMu.Lock()
	defer p.writeMu.Unlock()
	old := p.hosts.Load()
	hl := &hostLists{allowed: slices.Clone(old.allowed), denied: slices.Clone(old.denied)}
	f(hl, g)
	p.hosts.Store(hl)
	return nil
}

// Hosts returns the current allowed and denied patterns, normalised.
func (p *Policy) Hosts() (allowed, denied []string) {
	hl := p.hosts.Load()
	return hl.allowed.texts(), hl.denied.texts()
}

// Env returns what the sandbox's environment gets for the secrets: each
// secret's name mapped to its placeholder. The placeholders stay the
// same for the life of the Policy.
func (p *Policy) Env() map[string]string {
	env := make(map[string]string, len(p.secrets))
	for _, s := range p.secrets {
		env[s.name] = s.placeholder
	}
	return env
}

// HasSecrets reports whether the policy has any secret: then every
// request must go through a Substituter, if only to catch leaks.
func (p *Policy) HasSecrets() bool { return len(p.secrets) > 0 }

// Substituter returns the placeholder rewriter for requests to host (a
// name, without a port) sent over TLS. An invalid name has no secret in
// scope. A request in plain HTTP needs SubstituterFor(host, false).
func (p *Policy) Substituter(host string) *Substituter {
	return newSubstituter(p.secrets, host, true)
}

// SubstituterFor returns the placeholder rewriter for requests to host
// (a name, without a port), sent over TLS when overTLS is set and in
// plain HTTP otherwise: then only the secrets with allow_plaintext are
// substituted, and the placeholder (or value) of another secret scoped
// to host blocks the request with ReasonSecretPlaintext.
func (p *Policy) SubstituterFor(host string, overTLS bool) *Substituter {
	return newSubstituter(p.secrets, host, overTLS)
}

// Redact replaces every secret's value in s, in each of its forms, by
// its placeholder in the same form: for text that leaves airlock
// (events, logs) and may hold what the sandbox sent.
func (p *Policy) Redact(s string) string { return p.redactor.String(s) }

// CheckBodyEncoding says whether a request body with this
// Content-Encoding can be scanned for placeholders: any encoding but
// identity hides them, so it is refused (ReasonSecretUnrewritable) when
// the policy has secrets.
func (p *Policy) CheckBodyEncoding(contentEncoding string) error {
	switch contentEncoding {
	case "", "identity":
		return nil
	}
	if !p.HasSecrets() {
		return nil
	}
	return &BlockError{Reason: ReasonSecretUnrewritable, Detail: fmt.Sprintf("a body with Content-Encoding %q cannot be scanned for secret placeholders", contentEncoding)}
}

// Scrubber returns the scrubber of every response: it replaces every
// secret's value, in each of its forms (as it is, and, for values of
// MinValueLen bytes or more, percent-encoded, JSON-escaped, in base64
// and in hex), by its placeholder in the same form when ScrubResponses
// is set, and changes nothing otherwise. Responses to requests use
// ResponseScrubber, which covers more.
func (p *Policy) Scrubber() *Scrubber { return p.scrubber }

// ResponseScrubber returns the scrubber for the responses to requests
// that sub was made for. Whatever ScrubResponses says, it scrubs the
// values of the secrets scoped to sub's host, the only host airlock sends
// them to and so the only one that can echo them, in each form they may
// have gone out in or come back in: as they are, percent-encoded,
// JSON-escaped, in base64 (at any offset of a longer base64 text) and in
// hex (the encoded forms for values of MinValueLen bytes or more), and
// re-encoded in Basic credentials (base64 of "user:value", which the
// sandbox could decode). With ScrubResponses it also scrubs every other
// secret's value. Its Active method is false when there is nothing to
// scrub.
func (p *Policy) ResponseScrubber(sub *Substituter) *Scrubber {
	if sub == nil {
		return p.scrubber
	}
	sub.mu.Lock()
	defer sub.mu.Unlock()
	if sub.scrub == nil {
		var rules []rule
		seen := make(map[string]bool)
		for _, r := range slices.Concat(p.scrubber.e.rules, sub.scope, sub.encoded) {
			if !seen[string(r.from)] {
				seen[string(r.from)] = true
				rules = append(rules, r)
			}
		}
		sub.scrub = &Scrubber{e: newEngine(rules, "")}
	}
	return sub.scrub
}

// ScrubsResponses reports whether ScrubResponses is set: whether every
// response is scrubbed of every secret's value, not only of the values
// sent to its host.
func (p *Policy) ScrubsResponses() bool { return p.scrubResponses }

// ResponseHeaderTimeout returns how long an upstream server may take to
// begin its response (response_header_timeout_seconds).
func (p *Policy) ResponseHeaderTimeout() time.Duration { return p.responseHeaderTimeout }

// DNSServers returns the configured upstream resolvers; empty means the
// host's.
func (p *Policy) DNSServers() []netip.AddrPort { return slices.Clone(p.dnsServers) }

// ExtraRootCAs returns the certificates read from extra_root_cas, to be
// trusted in addition to the host's roots.
func (p *Policy) ExtraRootCAs() []*x509.Certificate { return slices.Clone(p.rootCAs) }

// RootCAs returns the host's roots plus the extra root CAs.
func (p *Policy) RootCAs() (*x509.CertPool, error) {
	pool, err := x509.SystemCertPool()
	if err != nil {
		return nil, fmt.Errorf("loading the system's root certificates: %w", err)
	}
	for _, c := range p.rootCAs {
		pool.AddCert(c)
	}
	return pool, nil
}

// HasRequestHooks reports whether FilterRequest can change or block a
// request (a script on_request or a Go OnRequest): callers that stream
// bodies need to buffer them (up to MaxHookBody) only then.
func (p *Policy) HasRequestHooks() bool {
	return p.onRequest != nil || p.script != nil && p.script.onRequest != nil
}

// HasResponseHooks reports whether FilterResponse can change or block a
// response.
func (p *Policy) HasResponseHooks() bool {
	return p.onResponse != nil || p.script != nil && p.script.onResponse != nil
}

// MaxHookBody is the longest body callers should buffer for hooks; a
// longer one is streamed and hooks see a nil Body.
func (p *Policy) MaxHookBody() int { return p.maxHookBody }

// FilterRequest runs the request hooks: the script's on_request, then
// the Go OnRequest. It returns the request to send, or a *BlockError
// (ReasonScriptBlocked or ReasonHookBlocked when a hook blocked it,
// ReasonPolicyError when one failed). req is not modified. Call it before
// secret substitution: hooks see placeholders, never values. Without
// hooks it returns req itself.
func (p *Policy) FilterRequest(ctx context.Context, req *Request) (*Request, error) {
	if !p.HasRequestHooks() {
		return req, nil
	}
	cur := req.Clone()
	if p.script != nil && p.script.onRequest != nil {
		out, err := p.script.request(ctx, cur)
		if err != nil {
			return nil, &BlockError{Reason: ReasonPolicyError, Err: err}
		}
		if out == nil {
			return nil, &BlockError{Reason: ReasonScriptBlocked, Detail: fmt.Sprintf("on_request returned None for %s %s", req.Method, req.URL)}
		}
		if err := checkRequest(req, out, "on_request"); err != nil {
			return nil, &BlockError{Reason: ReasonPolicyError, Err: err}
		}
		cur = out
	}
	if p.onRequest != nil {
		out, err := callHook(ctx, p.hookTimeout, "OnRequest", func(ctx context.Context) (*Request, error) {
			return p.onRequest(ctx, cur.Clone())
		})
		if err != nil {
			return nil, &BlockError{Reason: ReasonPolicyError, Err: err}
		}
		if out == nil {
			return nil, &BlockError{Reason: ReasonHookBlocked, Detail: fmt.Sprintf("OnRequest returned nil for %s %s", req.Method, req.URL)}
		}
		if err := checkRequest(req, out, "OnRequest"); err != nil {
			return nil, &BlockError{Reason: ReasonPolicyError, Err: err}
		}
		cur = out
	}
	return cur, nil
}

// FilterResponse runs the response hooks: the script's on_response,
// then the Go OnResponse. req is the request as the hooks returned it
// (with placeholders). It returns the response to hand to the sandbox,
// or a *BlockError, as FilterRequest does. Scrub the response before:
// hooks must not see secret values. Without hooks it returns resp
// itself.
func (p *Policy) FilterResponse(ctx context.Context, resp *Response, req *Request) (*Response, error) {
	if !p.HasResponseHooks() {
		return resp, nil
	}
	cur := resp.Clone()
	if p.script != nil && p.script.onResponse != nil {
		out, err := p.script.response(ctx, cur, req)
		if err != nil {
			return nil, &BlockError{Reason: ReasonPolicyError, Err: err}
		}
		if out == nil {
			return nil, &BlockError{Reason: ReasonScriptBlocked, Detail: fmt.Sprintf("on_response returned None for %s %s", req.Method, req.URL)}
		}
		if err := checkResponse(out, "on_response"); err != nil {
			return nil, &BlockError{Reason: ReasonPolicyError, Err: err}
		}
		cur = out
	}
	if p.onResponse != nil {
		out, err := callHook(ctx, p.hookTimeout, "OnResponse", func(ctx context.Context) (*Response, error) {
			return p.onResponse(ctx, cur.Clone(), req.Clone())
		})
		if err != nil {
			return nil, &BlockError{Reason: ReasonPolicyError, Err: err}
		}
		if out == nil {
			return nil, &BlockError{Reason: ReasonHookBlocked, Detail: fmt.Sprintf("OnResponse returned nil for %s %s", req.Method, req.URL)}
		}
		if err := checkResponse(out, "OnResponse"); err != nil {
			return nil, &BlockError{Reason: ReasonPolicyError, Err: err}
		}
		cur = out
	}
	return cur, nil
}

// callHook runs a Go hook with a deadline. A hook that does not return
// in time is abandoned (its result is dropped when it comes) and the
// call fails; a panic is an error.
func callHook[T any](ctx context.Context, timeout time.Duration, name string, f func(context.Context) (T, error)) (T, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	type result struct {
		v   T
		err error
	}
	ch := make(chan result, 1)
	go func() {
		defer func() {
			if r := recover(); r != nil {
				ch <- result{err: fmt.Errorf("%s hook panicked: %v", name, r)}
			}
		}()
		v, err := f(ctx)
		ch <- result{v: v, err: err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			return r.v, fmt.Errorf("%s hook: %w", name, r.err)
		}
		return r.v, nil
	case <-ctx.Done():
		var zero T
		return zero, fmt.Errorf("%s hook did not return: %w", name, context.Cause(ctx))
	}
}

// scriptCache remembers is_host_allowed's answers, up to a bound.
type scriptCache struct {
	mu sync.Mutex
	m  map[string]bool
}

const scriptCacheSize = 4096

func (c *scriptCache) get(host string) (allowed, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	allowed, ok = c.m[host]
	return allowed, ok
}

func (c *scriptCache) put(host string, allowed bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= scriptCacheSize {
		c.m = make(map[string]bool)
	}
	c.m[host] = allowed
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
