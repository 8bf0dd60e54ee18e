package rpc

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/api"
)

// echoServer answers each connection with what it read, in upper case,
// once the client has half-closed.
const echoServer = `
import socket, threading
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 8000))
s.listen(16)
def serve(c):
    data = b""
    while True:
        b = c.recv(65536)
        if not b:
            break
        data += b
    c.sendall(data.upper())
    c.close()
while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
`

// upper sends msg to addr, half-closes, and reads the answer, retrying
// until the server answers.
func upper(t *testing.T, addr, msg string) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got, err := func() (string, error) {
			c, err := net.DialTimeout("tcp", addr, 5*time.Second)
			if err != nil {
				return "", err
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(10 * time.Second))
			if _, err := io.WriteString(c, msg); err != nil {
				return "", err
			}
			c.(*net.TCPConn).CloseWrite()
			b, err := io.ReadAll(c)
			return string(b), err
		}()
		if err == nil && got != "" {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("no answer through %s: %v", addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func pubAddr(p api.PortForward) string { return net.JoinHostPort(p.HostIP, fmt.Sprint(p.HostPort)) }

// TestPortForward publishes ports of a sandbox through create's ports
// and port_forward, reaches its server through them, and stops them.
func TestPortForward(t *testing.T) {
	needAgent(t)
	if os.Geteuid() != 0 {
		t.Skip("a sandbox's network needs root here")
	}
	c := newClient(t, Options{AllowCreate: true}, ServeOptions{})
	var cr api.CreateResult
	c.result(1, api.MethodCreate, map[string]any{"ports": []any{map[string]any{"sandbox_port": 8000}}}, &cr)
	if len(cr.Ports) != 1 || cr.Ports[0].SandboxPort != 8000 || cr.Ports[0].HostIP != "127.0.0.1" || cr.Ports[0].HostPort == 0 || cr.Ports[0].Protocol != "tcp" {
		t.Fatalf("create's ports: %+v", cr.Ports)
	}
	sb := c.sandboxFor(cr.SandboxID)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := sb.Start(ctx, airlock.Command{Argv: []string{"python3", "-c", echoServer}, Stdout: io.Discard, Stderr: io.Discard}); err != nil {
		t.Fatal(err)
	}
	if got := upper(t, pubAddr(cr.Ports[0]), "through create"); got != "THROUGH CREATE" {
		t.Errorf("through create's port: %q", got)
	}

	var pf api.PortForward
	c.result(2, api.MethodPortForward, map[string]any{"sandbox_id": cr.SandboxID, "sandbox_port": 8000, "host_ip": "127.0.0.1"}, &pf)
	if pf.SandboxPort != 8000 || pf.HostPort == 0 || pf.HostPort == cr.Ports[0].HostPort {
		t.Fatalf("port_forward: %+v", pf)
	}
	if got := upper(t, pubAddr(pf), "through port_forward"); got != "THROUGH PORT_FORWARD" {
		t.Errorf("through port_forward: %q", got)
	}
	var info api.InfoResult
	c.result(3, api.MethodInfo, nil, &info)
	if len(info.Sandboxes) != 1 || len(info.Sandboxes[0].Ports) != 2 {
		t.Errorf("info: %+v", info.Sandboxes)
	}

	// Refusals.
	if e := wantError(t, c.call(10, api.MethodPortForward, map[string]any{}), api.CodeInvalidParams); !strings.Contains(e.Message, `"sandbox_port" is required`) {
		t.Errorf("port_forward without sandbox_port: %q", e.Message)
	}
	if e := wantError(t, c.call(11, api.MethodPortForward, map[string]any{"sandbox_port": 53, "protocol": "udp"}), api.CodeInvalidParams); !strings.Contains(e.Message, "only TCP ports") {
		t.Errorf("port_forward of udp: %q", e.Message)
	}
	wantError(t, c.call(12, api.MethodPortForward, map[string]any{"sandbox_port": 70000}), api.CodeInvalidParams)
	if e := wantError(t, c.call(13, api.MethodPortForward, map[string]any{"sandbox_port": 8000, "host_port": pf.HostPort}), api.CodeInvalidParams); !strings.Contains(e.Message, "in use") {
		t.Errorf("port_forward on a host port in use: %q", e.Message)
	}
	if e := wantError(t, c.call(14, api.MethodPortForward, map[string]any{"sandbox_port": 8000, "host_ip": "localhost"}), api.CodeInvalidParams); !strings.Contains(e.Message, "not an IP address") {
		t.Errorf("port_forward on host_ip localhost: %q", e.Message)
	}
	if e := wantError(t, c.call(15, api.MethodPortForwardClose, map[string]any{}), api.CodeInvalidParams); !strings.Contains(e.Message, `"host_port" is required`) {
		t.Errorf("port_forward_close without host_port: %q", e.Message)
	}

	var closed api.PortForwardCloseResult
	c.result(20, api.MethodPortForwardClose, map[string]any{"host_port": pf.HostPort}, &closed)
	if len(closed.Closed) != 1 || closed.Closed[0] != pf {
		t.Errorf("port_forward_close: %+v", closed)
	}
	if conn, err := net.DialTimeout("tcp", pubAddr(pf), 2*time.Second); err == nil {
		conn.Close()
		t.Errorf("%s accepts after port_forward_close", pubAddr(pf))
	}
	if e := wantError(t, c.call(21, api.MethodPortForwardClose, map[string]any{"host_port": pf.HostPort}), api.CodeNotFound); !strings.Contains(e.Message, "publishes nothing at host port") {
		t.Errorf("port_forward_close twice: %q", e.Message)
	}

	// close frees the host port.
	c.result(30, api.MethodClose, nil, nil)
	ln, err := net.Listen("tcp", pubAddr(cr.Ports[0]))
	if err != nil {
		t.Fatalf("host port of a closed sandbox still taken: %v", err)
	}
	ln.Close()
	wantError(t, c.call(31, api.MethodPortForward, map[string]any{"sandbox_id": cr.SandboxID, "sandbox_port": 8000}), api.CodeNotRunning)
}

// TestPortForwardRefusals checks create's ports and port_forward on a
// sandbox without a network.
func TestPortForwardRefusals(t *testing.T) {
	needAgent(t)
	c := newClient(t, Options{AllowCreate: true}, ServeOptions{})
	if e := wantError(t, c.call(1, api.MethodCreate, map[string]any{"ports": []any{map[string]any{"sandbox_port": 53, "protocol": "udp"}}}), api.CodeInvalidParams); !strings.Contains(e.Message, "only TCP ports") {
		t.Errorf("create with a udp port: %q", e.Message)
	}
	if e := wantError(t, c.call(2, api.MethodCreate, map[string]any{"ports": []any{map[string]any{"sandbox_prot": 8000}}}), api.CodeInvalidParams); !strings.Contains(e.Message, `"ports[0].sandbox_prot"`) || !strings.Contains(e.Message, "sandbox_port") {
		t.Errorf("create with a misspelt port field: %q", e.Message)
	}
	id := c.create(3, nil)
	e := wantError(t, c.call(4, api.MethodPortForward, map[string]any{"sandbox_port": 8000}), api.CodeUnsupported)
	if !strings.Contains(e.Message, "publishing ports needs the sandbox's network") || !strings.Contains(e.Message, id) {
		t.Errorf("port_forward without a network: %q", e.Message)
	}
}
