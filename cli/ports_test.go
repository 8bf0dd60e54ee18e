package cli

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/api"
)

func TestParsePublish(t *testing.T) {
	for _, c := range []struct {
		in   string
		want airlock.PortMapping
	}{
		{"8000", airlock.PortMapping{SandboxPort: 8000}},
		{"8000/tcp", airlock.PortMapping{SandboxPort: 8000, Protocol: "tcp"}},
		{"8080:8000", airlock.PortMapping{HostPort: 8080, SandboxPort: 8000}},
		{":8000", airlock.PortMapping{SandboxPort: 8000}},
		{"0:8000", airlock.PortMapping{SandboxPort: 8000}},
		{"127.0.0.1:8080:8000", airlock.PortMapping{HostIP: "127.0.0.1", HostPort: 8080, SandboxPort: 8000}},
		{"0.0.0.0::8000/TCP", airlock.PortMapping{HostIP: "0.0.0.0", SandboxPort: 8000, Protocol: "tcp"}},
		{"[::1]:8080:8000", airlock.PortMapping{HostIP: "::1", HostPort: 8080, SandboxPort: 8000}},
		{"[::1]::8000", airlock.PortMapping{HostIP: "::1", SandboxPort: 8000}},
	} {
		got, err := parsePublish(c.in)
		if err != nil || got != c.want {
			t.Errorf("parsePublish(%q) = %+v, %v; want %+v", c.in, got, err, c.want)
		}
	}
	for _, c := range []struct{ in, want string }{
		{"8000/udp", "only TCP ports"},
		{"8000/sctp", "is not a protocol"},
		{"", "sandbox port \"\""},
		{"0", "sandbox port \"0\""},
		{"70000", "sandbox port \"70000\""},
		{"http", "sandbox port \"http\""},
		{"8080:", "sandbox port \"\""},
		{"99999:80", "host port \"99999\""},
		{"localhost:8080:80", "not an IP address"},
		{":8080:80", "host address before the first : is empty"},
		{"::1:8080:80", "too many colons"},
		{"[::1:8080:80", "no closing ]"},
		{"[::1]8080:80", "followed by :HOST_PORT:SANDBOX_PORT"},
		{"8000-8010:8000-8010", "ranges"},
	} {
		_, err := parsePublish(c.in)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("parsePublish(%q) = %v, want an error with %q", c.in, err, c.want)
		}
	}
}

// portJSON is airlock port --json.
type portJSON struct {
	SandboxID string                  `json:"sandbox_id"`
	Ports     []airlock.PublishedPort `json:"ports"`
}

// httpGet fetches url until it answers 200, or fails the test.
func httpGet(t *testing.T, url string) string {
	t.Helper()
	c := &http.Client{Timeout: 5 * time.Second}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := c.Get(url)
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return string(b)
			}
			err = fmt.Errorf("status %s", resp.Status)
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s through a published port: %v", url, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestPortDetached publishes ports of a detached sandbox with -p, reaches
// its web server from the host, and lists them with airlock port and get.
func TestPortDetached(t *testing.T) {
	t.Parallel()
	needRoot(t)
	h := newCLIHome(t)
	var out struct {
		SandboxID string                  `json:"sandbox_id"`
		Ports     []airlock.PublishedPort `json:"ports"`
	}
	line := h.must(nil, "run", "-d", "--json", "--timeout", "5m", "-p", "127.0.0.1::8000/tcp", "-p", "8001", "-w", "/tmp",
		"--", "sh", "-c", "echo served > /tmp/index.html; exec python3 -m http.server 8000")
	if err := json.Unmarshal([]byte(line), &out); err != nil || len(out.Ports) != 2 {
		t.Fatalf("run -d --json -p: %q (%v)", line, err)
	}
	id := out.SandboxID
	var web airlock.PublishedPort
	for _, p := range out.Ports {
		if p.SandboxPort == 8000 {
			web = p
		}
	}
	if web.HostIP != "127.0.0.1" || web.HostPort == 0 {
		t.Fatalf("ports of run -d --json: %+v", out.Ports)
	}
	addr := net.JoinHostPort(web.HostIP, fmt.Sprint(web.HostPort))
	if body := httpGet(t, "http://"+addr+"/index.html"); body != "served\n" {
		t.Errorf("GET through the published port: %q", body)
	}

	// ps shows them as docker ps does.
	if table := h.must(nil, "ps"); !strings.Contains(table, "PORTS") || !strings.Contains(table, addr+"->8000/tcp") {
		t.Errorf("ps:\n%s", table)
	}
	lines := h.must(nil, "port", id[:7])
	if !strings.Contains(lines, "8000/tcp -> "+addr+"\n") || !strings.Contains(lines, "8001/tcp -> 127.0.0.1:") || strings.Count(lines, "\n") != 2 {
		t.Errorf("airlock port:\n%s", lines)
	}
	if got := h.must(nil, "port", id, "8000/tcp"); got != "8000/tcp -> "+addr+"\n" {
		t.Errorf("airlock port ID 8000/tcp: %q", got)
	}
	var pj portJSON
	if err := json.Unmarshal([]byte(h.must(nil, "port", "--json", id)), &pj); err != nil || pj.SandboxID != id || len(pj.Ports) != 2 {
		t.Errorf("airlock port --json: %+v (%v)", pj, err)
	}
	if r := h.run(nil, "port", id, "9999"); r.code != 125 || !strings.Contains(r.stderr, "no host port for its port 9999/tcp") {
		t.Errorf("airlock port of a sandbox port not published: code %d, stderr %q", r.code, r.stderr)
	}
	if r := h.run(nil, "port", id, "9999/udp"); r.code != 125 || !strings.Contains(r.stderr, "only TCP") {
		t.Errorf("airlock port of a UDP port: code %d, stderr %q", r.code, r.stderr)
	}
	var rec struct {
		Ports []airlock.PublishedPort `json:"ports"`
	}
	if err := json.Unmarshal([]byte(h.must(nil, "get", id)), &rec); err != nil || len(rec.Ports) != 2 {
		t.Errorf("airlock get: ports %+v (%v)", rec.Ports, err)
	}

	// Ports published and stopped at run time through the control
	// socket are recorded as they change.
	var pf airlock.PublishedPort
	controlCall(t, filepath.Join(h.home, "sandboxes", id, "ctl.sock"), api.MethodPortForward, map[string]any{"sandbox_port": 8000}, &pf)
	if lines := h.must(nil, "port", id, "8000"); !strings.Contains(lines, fmt.Sprintf("8000/tcp -> 127.0.0.1:%d\n", pf.HostPort)) || strings.Count(lines, "\n") != 2 {
		t.Errorf("airlock port after port_forward:\n%s", lines)
	}
	if body := httpGet(t, fmt.Sprintf("http://127.0.0.1:%d/index.html", pf.HostPort)); body != "served\n" {
		t.Errorf("GET through the port of port_forward: %q", body)
	}
	controlCall(t, filepath.Join(h.home, "sandboxes", id, "ctl.sock"), api.MethodPortForwardClose, map[string]any{"host_port": pf.HostPort}, nil)
	if lines := h.must(nil, "port", id, "8000"); lines != "8000/tcp -> "+addr+"\n" {
		t.Errorf("airlock port after port_forward_close:\n%s", lines)
	}

	h.must(nil, "kill", id)
	if r := h.run(nil, "port", id); r.code != 125 || !strings.Contains(r.stderr, "not running") {
		t.Errorf("airlock port of a stopped sandbox: code %d, stderr %q", r.code, r.stderr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("host port %s still taken after the sandbox was killed: %v", addr, err)
	}
	ln.Close()
}

// controlCall makes one JSON-RPC call on a sandbox's control socket.
func controlCall(t *testing.T, sock, method string, params, result any) {
	t.Helper()
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	req, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
	if _, err := c.Write(append(req, '\n')); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(c).ReadBytes('\n')
	if err != nil {
		t.Fatalf("%s on the control socket: %v", method, err)
	}
	var resp struct {
		Result json.RawMessage `json:"result"`
		Error  *api.Error      `json:"error"`
	}
	if err := json.Unmarshal(line, &resp); err != nil || resp.Error != nil {
		t.Fatalf("%s on the control socket: %s (%v)", method, line, err)
	}
	if result != nil {
		if err := json.Unmarshal(resp.Result, result); err != nil {
			t.Fatal(err)
		}
	}
}

// TestRunPublishForeground publishes a port for one command, which
// reaches nothing outside the sandbox; -p with UDP is refused.
func TestRunPublishForeground(t *testing.T) {
	t.Parallel()
	needRoot(t)
	r := runCLI(t, nil, "run", "-p", "8000", "--", "sh", "-c", "cat /etc/resolv.conf")
	if r.code != 0 || !strings.Contains(r.stderr, "sandbox port 8000/tcp published at 127.0.0.1:") || !strings.Contains(r.stdout, "nameserver 10.88.0.1") {
		t.Errorf("run -p: code %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	r = runCLI(t, nil, "run", "--json", "-p", "[::1]::8000", "--", "true")
	var res struct {
		ExitCode int                     `json:"exit_code"`
		Ports    []airlock.PublishedPort `json:"ports"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &res); err != nil || res.ExitCode != 0 || len(res.Ports) != 1 || res.Ports[0].HostIP != "::1" || res.Ports[0].SandboxPort != 8000 {
		t.Errorf("run --json -p [::1]::8000: %q (%v)", r.stdout, err)
	}
	if r := runCLI(t, nil, "run", "-p", "53/udp", "--", "true"); r.code != 125 || !strings.Contains(r.stderr, "only TCP ports") {
		t.Errorf("run -p 53/udp: code %d, stderr %q", r.code, r.stderr)
	}
	// A host port in use.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	if r := runCLI(t, nil, "run", "-p", fmt.Sprintf("%d:8000", port), "--", "true"); r.code != 125 || !strings.Contains(r.stderr, "in use by another program") {
		t.Errorf("run -p on a host port in use: code %d, stderr %q", r.code, r.stderr)
	}
}
