package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/api"
)

// TestRealServerPortForward publishes a port of a sandbox through a real
// server, reaches a server in the sandbox through it, and stops it.
func TestRealServerPortForward(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("a sandbox's network needs root")
	}
	c := startReal(t, Options{})
	ctx := testCtx(t)
	sb, err := c.Create(ctx, api.CreateParams{Ports: []api.PortMapping{{SandboxPort: 8000}}})
	if err != nil {
		t.Fatal(err)
	}
	// A server that says hello to each connection.
	server := `import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 8000)); s.listen(8)
while True:
    c, _ = s.accept(); c.sendall(b"hello"); c.close()`
	if _, err := sb.StartWith(ctx, api.ExecParams{Argv: []string{"python3", "-c", server}}, nil, io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	pf, err := sb.PortForward(ctx, api.PortMapping{SandboxPort: 8000, HostIP: "127.0.0.1"})
	if err != nil || pf.HostPort == 0 || pf.HostIP != "127.0.0.1" || pf.SandboxPort != 8000 {
		t.Fatalf("PortForward = %+v, %v", pf, err)
	}
	addr := net.JoinHostPort(pf.HostIP, fmt.Sprint(pf.HostPort))
	deadline := time.Now().Add(30 * time.Second)
	for {
		got, err := func() (string, error) {
			conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
			if err != nil {
				return "", err
			}
			defer conn.Close()
			conn.SetDeadline(time.Now().Add(10 * time.Second))
			b, err := io.ReadAll(conn)
			return string(b), err
		}()
		if got == "hello" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no hello through %s: %q, %v", addr, got, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	closed, err := sb.ClosePortForward(ctx, "", pf.HostPort)
	if err != nil || len(closed) != 1 || closed[0] != pf {
		t.Errorf("ClosePortForward = %+v, %v", closed, err)
	}
	if _, err := sb.ClosePortForward(ctx, "", pf.HostPort); !errors.Is(err, ErrNotFound) {
		t.Errorf("ClosePortForward of a port no longer published: %v, want ErrNotFound", err)
	}
	if _, err := sb.PortForward(ctx, api.PortMapping{SandboxPort: 53, Protocol: "udp"}); !errors.Is(err, ErrInvalidParams) {
		t.Errorf("PortForward of a UDP port: %v, want ErrInvalidParams", err)
	}

	plain, err := c.Create(ctx, api.CreateParams{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := plain.PortForward(ctx, api.PortMapping{SandboxPort: 8000}); !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "publishing ports needs") {
		t.Errorf("PortForward without a network: %v, want ErrUnsupported saying so", err)
	}
}

// A command whose context ends just before Close is cancelled before the
// server's input ends: the server, which finishes what is running once
// its input ends, then exits at once rather than waiting for a command
// that never ends.
func TestCloseAfterContextEnds(t *testing.T) {
	for i := range 4 {
		c := startReal(t, Options{CloseTimeout: 20 * time.Second})
		sb, err := c.Create(testCtx(t), api.CreateParams{})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		p, err := sb.StartWith(ctx, api.ExecParams{Argv: []string{"sleep", "1000"}}, nil, io.Discard, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		cancel()
		if i > 0 {
			// The client has let the command go, and sends its
			// cancel in the background.
			if _, err := p.Wait(); !errors.Is(err, context.Canceled) {
				t.Fatalf("Wait after the context ended: %v", err)
			}
		}
		if err := c.Close(); err != nil {
			t.Fatalf("round %d: Close: %v", i, err)
		}
	}
}
