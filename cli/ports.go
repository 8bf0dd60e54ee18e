package cli

import (
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/state"
)

// publishUsage is the syntax of -p, for errors.
const publishUsage = "give SANDBOX_PORT, HOST_PORT:SANDBOX_PORT, IP:HOST_PORT:SANDBOX_PORT or IP::SANDBOX_PORT, optionally with /tcp (such as 8080:8000, 127.0.0.1::8000, [::1]:8080:8000)"

// parsePublish reads one -p value, in docker's syntax:
// [[IP:][HOST_PORT]:]SANDBOX_PORT[/tcp], an IPv6 address in brackets.
func parsePublish(v string) (airlock.PortMapping, error) {
	var m airlock.PortMapping
	bad := func(format string, args ...any) (airlock.PortMapping, error) {
		return m, fmt.Errorf("-p %q: %s: %s", v, fmt.Sprintf(format, args...), publishUsage)
	}
	spec := v
	if i := strings.LastIndexByte(spec, '/'); i >= 0 {
		switch proto := strings.ToLower(spec[i+1:]); proto {
		case "tcp":
		case "udp":
			return m, fmt.Errorf("-p %q: only TCP ports can be published (UDP is not forwarded): publish a TCP port, with /tcp or no suffix", v)
		default:
			return bad("%q is not a protocol", proto)
		}
		spec = spec[:i]
		m.Protocol = "tcp"
	}
	var hostIP, hostPort, sandboxPort string
	if strings.HasPrefix(spec, "[") {
		end := strings.IndexByte(spec, ']')
		if end < 0 {
			return bad("the IPv6 address has no closing ]")
		}
		hostIP = spec[1:end]
		rest, ok := strings.CutPrefix(spec[end+1:], ":")
		if !ok {
			return bad("the address must be followed by :HOST_PORT:SANDBOX_PORT")
		}
		if hostPort, sandboxPort, ok = strings.Cut(rest, ":"); !ok {
			return bad("the address must be followed by :HOST_PORT:SANDBOX_PORT")
		}
	} else {
		parts := strings.Split(spec, ":")
		switch len(parts) {
		case 1:
			sandboxPort = parts[0]
		case 2:
			hostPort, sandboxPort = parts[0], parts[1]
		case 3:
			hostIP, hostPort, sandboxPort = parts[0], parts[1], parts[2]
			if hostIP == "" {
				return bad("the host address before the first : is empty")
			}
		default:
			return bad("too many colons (an IPv6 address goes in brackets)")
		}
	}
	if strings.Contains(hostPort, "-") || strings.Contains(sandboxPort, "-") {
		return bad("port ranges are not supported; give one -p per port")
	}
	sp, err := strconv.ParseUint(sandboxPort, 10, 16)
	if err != nil || sp == 0 {
		return bad("the sandbox port %q is not a port from 1 to 65535", sandboxPort)
	}
	m.SandboxPort = uint16(sp)
	if hostPort != "" {
		hp, err := strconv.ParseUint(hostPort, 10, 16)
		if err != nil {
			return bad("the host port %q is not a port from 1 to 65535", hostPort)
		}
		m.HostPort = uint16(hp)
	}
	if hostIP != "" {
		if net.ParseIP(hostIP) == nil {
			return bad("the host address %q is not an IP address", hostIP)
		}
		m.HostIP = hostIP
	}
	return m, nil
}

// parsePublishes reads every -p value.
func parsePublishes(vs []string) ([]airlock.PortMapping, error) {
	var out []airlock.PortMapping
	for _, v := range vs {
		m, err := parsePublish(v)
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, nil
}

func (a *app) newPortCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "port ID [SANDBOX_PORT[/tcp]]",
		Short: "List the ports a running sandbox publishes on the host",
		Long: `List the ports a running sandbox publishes on the host (those of run -p,
and those a client of its control socket published while it runs), as
docker port does: one line per port, SANDBOX_PORT/tcp -> HOST_IP:HOST_PORT.
With a sandbox port, only the host addresses that lead to it.`,
		Example: `  airlock run -d -p 8080:8000 -- python3 -m http.server 8000
  airlock port sb-3f              # 8000/tcp -> 127.0.0.1:8080
  airlock port sb-3f 8000
  airlock port --json sb-3f`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.runPort(args, asJSON)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print {sandbox_id, ports: [{host_ip, host_port, sandbox_port, protocol}]} as JSON")
	return cmd
}

func (a *app) runPort(args []string, asJSON bool) error {
	var only uint16
	if len(args) == 2 {
		v := args[1]
		if p, proto, ok := strings.Cut(v, "/"); ok {
			if !strings.EqualFold(proto, "tcp") {
				return fmt.Errorf("%q: only TCP ports are published: give SANDBOX_PORT or SANDBOX_PORT/tcp", v)
			}
			v = p
		}
		n, err := strconv.ParseUint(v, 10, 16)
		if err != nil || n == 0 {
			return fmt.Errorf("%q is not a sandbox port: give a port from 1 to 65535, such as 8000 or 8000/tcp", args[1])
		}
		only = uint16(n)
	}
	store, id, err := resolveSandbox(args[0])
	if err != nil {
		return err
	}
	r, err := store.Get(id)
	if err != nil {
		return err
	}
	a.warnDamaged(r)
	if r.Status != state.StatusRunning {
		return fmt.Errorf("sandbox %s is %s, not running: a sandbox publishes ports only while it runs", id, r.Status)
	}
	ports := []state.Port{}
	for _, p := range r.Ports {
		if only == 0 || p.SandboxPort == only {
			ports = append(ports, p)
		}
	}
	if only != 0 && len(ports) == 0 {
		return fmt.Errorf("sandbox %s publishes no host port for its port %d/tcp: `%s port %s` lists what it publishes", id, only, a.name, id)
	}
	if asJSON {
		return writeJSON(map[string]any{"sandbox_id": id, "ports": ports})
	}
	for _, p := range ports {
		if _, err := fmt.Printf("%d/%s -> %s\n", p.SandboxPort, p.Protocol, net.JoinHostPort(p.HostIP, strconv.Itoa(int(p.HostPort)))); err != nil {
			return err
		}
	}
	return nil
}
