package airlock_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/policy"
)

// upperServer is a TCP server for the sandbox: on each connection it
// reads to the end, then answers with what it read in upper case and
// closes, so that a client sees its half-close passed on.
const upperServer = `
import socket, sys, threading
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2])))
s.listen(64)
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

// portSandbox creates a sandbox with a network for the port tests, or
// skips when this machine cannot give it one.
func portSandbox(t *testing.T, cfg airlock.Config) *airlock.Sandbox {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sb, err := airlock.Create(ctx, cfg)
	if errors.Is(err, airlock.ErrUnavailable) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatalf("create sandbox: %v", err)
	}
	t.Cleanup(func() { sb.Close() })
	return sb
}

// serveUpper starts upperServer in sb on addr:port.
func serveUpper(t *testing.T, ctx context.Context, sb *airlock.Sandbox, addr string, port int) {
	t.Helper()
	var stderr bytes.Buffer
	_, err := sb.Start(ctx, airlock.Command{Argv: []string{"python3", "-c", upperServer, addr, fmt.Sprint(port)}, Stdout: io.Discard, Stderr: &stderr})
	if err != nil {
		t.Fatalf("start the server in the sandbox: %v", err)
	}
}

// exchange connects to addr, sends msg, half-closes and reads the answer
// to its end.
func exchange(ctx context.Context, addr string, msg []byte) ([]byte, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	go func() {
		c.Write(msg)
		c.(*net.TCPConn).CloseWrite()
	}()
	return io.ReadAll(c)
}

// waitUpper retries exchange until the server in the sandbox answers.
func waitUpper(t *testing.T, ctx context.Context, addr string) {
	t.Helper()
	for {
		got, err := exchange(ctx, addr, []byte("ping"))
		if err == nil && string(got) == "PING" {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("the server in the sandbox never answered through %s: %v (%q)", addr, err, got)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func hostAddr(p airlock.PublishedPort) string {
	return net.JoinHostPort(p.HostIP, fmt.Sprint(p.HostPort))
}

func TestPortPublish(t *testing.T) {
	ctx := testCtx(t, 2*time.Minute)
	var mu sync.Mutex
	var events []airlock.NetworkEvent
	sb := portSandbox(t, airlock.Config{
		Ports: []airlock.PortMapping{{SandboxPort: 8000}},
		OnEvent: func(e airlock.Event) {
			if e.Network != nil {
				mu.Lock()
				events = append(events, *e.Network)
				mu.Unlock()
			}
		},
	})
	if !sb.HasNetwork() {
		t.Fatal("a sandbox created with ports has no network")
	}
	ports := sb.Ports()
	if len(ports) != 1 || ports[0].HostIP != "127.0.0.1" || ports[0].HostPort == 0 || ports[0].SandboxPort != 8000 || ports[0].Protocol != "tcp" {
		t.Fatalf("Ports() = %+v, want 127.0.0.1:<free> -> 8000/tcp", ports)
	}
	addr := hostAddr(ports[0])
	serveUpper(t, ctx, sb, "0.0.0.0", 8000)
	waitUpper(t, ctx, addr)

	t.Run("half-close and bulk, many at once", func(t *testing.T) {
		big := bytes.Repeat([]byte("abcdefgh"), 256<<10) // 2 MiB
		var wg sync.WaitGroup
		for i := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				msg := big
				if i%2 == 1 {
					msg = []byte(fmt.Sprintf("small %d", i))
				}
				got, err := exchange(ctx, addr, msg)
				if err != nil {
					t.Errorf("exchange %d: %v", i, err)
					return
				}
				if !bytes.Equal(got, bytes.ToUpper(msg)) {
					t.Errorf("exchange %d: got %d bytes, want %d", i, len(got), len(msg))
				}
			}()
		}
		wg.Wait()
	})

	t.Run("nothing listening is a closed connection", func(t *testing.T) {
		p, err := sb.Publish(ctx, airlock.PortMapping{SandboxPort: 9})
		if err != nil {
			t.Fatal(err)
		}
		cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		defer cancel()
		start := time.Now()
		got, err := exchange(cctx, hostAddr(p), []byte("hello"))
		if cctx.Err() != nil {
			t.Fatalf("a connection to a sandbox port nobody listens on hung for %s", time.Since(start))
		}
		if len(got) != 0 {
			t.Errorf("read %q from a port nobody listens on (err %v)", got, err)
		}
		if _, err := sb.Unpublish(p.HostIP, p.HostPort); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("egress stays closed", func(t *testing.T) {
		res := run(t, ctx, sb, `python3 -c '
import socket
s = socket.socket()
s.settimeout(5)
try:
    s.connect(("192.0.2.10", 80))
    print("connected")
except OSError as e:
    print("refused", e)
'`)
		if out := string(res.Stdout); !strings.HasPrefix(out, "refused") {
			t.Fatalf("the sandbox reached 192.0.2.10:80 while a port is published: %q %q", out, res.Stderr)
		}
		deadline := time.Now().Add(5 * time.Second)
		for {
			mu.Lock()
			found := false
			for _, e := range events {
				if e.IP == "192.0.2.10" && e.Blocked {
					found = true
				}
			}
			mu.Unlock()
			if found {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("no blocked network event for the connection to 192.0.2.10:80")
			}
			time.Sleep(20 * time.Millisecond)
		}
		allowed, _, err := sb.Hosts()
		if err != nil || len(allowed) != 0 {
			t.Errorf("allowed hosts of a sandbox with ports and no network policy = %v, %v; want none", allowed, err)
		}
	})

	t.Run("inbound events", func(t *testing.T) {
		var served, refused bool
		deadline := time.Now().Add(5 * time.Second)
		for !(served && refused) && time.Now().Before(deadline) {
			mu.Lock()
			for _, e := range events {
				if e.Kind != api.NetInbound {
					continue
				}
				if e.Blocked {
					t.Errorf("an inbound connection is reported blocked: %+v", e)
				}
				switch {
				case e.Port == 8000 && e.Host == addr && e.IP == "10.88.0.2" && e.Reason == "" && e.RequestBytes > 0 && e.ResponseBytes == e.RequestBytes:
					served = true
				case e.Port == 9 && strings.HasPrefix(e.Reason, policy.ReasonUpstreamError+": "):
					refused = true
				}
			}
			mu.Unlock()
			time.Sleep(20 * time.Millisecond)
		}
		if !served || !refused {
			t.Errorf("inbound events: one served through %s %v, one refused at port 9 %v", addr, served, refused)
		}
	})

	t.Run("host port in use", func(t *testing.T) {
		_, err := sb.Publish(ctx, airlock.PortMapping{SandboxPort: 8000, HostPort: ports[0].HostPort})
		if err == nil || !strings.Contains(err.Error(), "in use") {
			t.Fatalf("publishing on a host port in use: %v, want an error that says it is in use", err)
		}
	})

	t.Run("bad mappings", func(t *testing.T) {
		for _, m := range []airlock.PortMapping{
			{SandboxPort: 8000, Protocol: "udp"},
			{SandboxPort: 8000, Protocol: "sctp"},
			{SandboxPort: 0},
			{SandboxPort: 8000, HostIP: "localhost"},
		} {
			if p, err := sb.Publish(ctx, m); err == nil {
				t.Errorf("Publish(%+v) = %+v, want an error", m, p)
			} else {
				t.Logf("Publish(%+v): %v", m, err)
			}
		}
		if _, err := sb.Unpublish("", 1); !errors.Is(err, airlock.ErrPortNotPublished) {
			t.Errorf("Unpublish of a port not published: %v", err)
		}
	})

	t.Run("unpublish and publish again", func(t *testing.T) {
		var got [][]airlock.PublishedPort
		stop := sb.WatchPorts(func(p []airlock.PublishedPort) { got = append(got, p) })
		defer stop()
		p, err := sb.Publish(ctx, airlock.PortMapping{SandboxPort: 8000, HostIP: "127.0.0.1"})
		if err != nil {
			t.Fatal(err)
		}
		waitUpper(t, ctx, hostAddr(p))
		closed, err := sb.Unpublish("", p.HostPort)
		if err != nil || len(closed) != 1 || closed[0] != p {
			t.Fatalf("Unpublish = %+v, %v", closed, err)
		}
		if c, err := net.DialTimeout("tcp", hostAddr(p), 2*time.Second); err == nil {
			c.Close()
			t.Fatalf("%s still accepts once unpublished", hostAddr(p))
		}
		if len(got) != 2 || len(got[0]) != 2 || len(got[1]) != 1 {
			t.Errorf("WatchPorts saw %+v, want the two ports, then the first alone", got)
		}
	})

	t.Run("close frees the host port", func(t *testing.T) {
		// A connection open through the port ends with the sandbox.
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if err := sb.Close(); err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.ReadAll(c); errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("a connection through a published port outlived the sandbox: %v", err)
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("the host port %s is not free once the sandbox closed: %v", addr, err)
		}
		ln.Close()
		if _, err := sb.Publish(ctx, airlock.PortMapping{SandboxPort: 8000}); !errors.Is(err, airlock.ErrClosed) {
			t.Errorf("Publish on a closed sandbox: %v, want ErrClosed", err)
		}
	})
}

func TestPortFixedHostPortAndNetworkPolicy(t *testing.T) {
	ctx := testCtx(t, time.Minute)
	// A free port, then published on it.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := uint16(ln.Addr().(*net.TCPAddr).Port)
	ln.Close()
	sb := portSandbox(t, airlock.Config{
		Network: &policy.Config{AllowedHosts: []string{"example.com"}},
		Ports:   []airlock.PortMapping{{SandboxPort: 8080, HostPort: port, HostIP: "127.0.0.1", Protocol: "tcp"}},
	})
	if p := sb.Ports(); len(p) != 1 || p[0].HostPort != port {
		t.Fatalf("Ports() = %+v, want host port %d", p, port)
	}
	// A server on the sandbox's own address is reached too.
	serveUpper(t, ctx, sb, "10.88.0.2", 8080)
	waitUpper(t, ctx, fmt.Sprintf("127.0.0.1:%d", port))
	if allowed, _, _ := sb.Hosts(); len(allowed) != 1 || allowed[0] != "example.com" {
		t.Errorf("the network policy changed: allowed %v", allowed)
	}
}

func TestPortNeedsNetwork(t *testing.T) {
	ctx := testCtx(t, time.Minute)
	sb := newSandbox(t, airlock.Config{})
	_, err := sb.Publish(ctx, airlock.PortMapping{SandboxPort: 8000})
	if !errors.Is(err, airlock.ErrNoNetwork) || !strings.Contains(err.Error(), "publishing ports needs the sandbox's network") {
		t.Fatalf("Publish on a sandbox without a network: %v", err)
	}
	if p := sb.Ports(); len(p) != 0 {
		t.Errorf("Ports() = %+v", p)
	}
	// Where the boundary cannot run, that is what is said.
	t.Setenv("AIRLOCK_RUNSC", "/nonexistent/airlock-runsc")
	_, err = airlock.Create(ctx, airlock.Config{Isolation: airlock.IsolationGVisor, Ports: []airlock.PortMapping{{SandboxPort: 8000}}})
	if !errors.Is(err, airlock.ErrUnavailable) || !strings.Contains(err.Error(), "AIRLOCK_RUNSC names /nonexistent/airlock-runsc") {
		t.Errorf("Create with ports where no network can be given: %v", err)
	}
}

func TestPortConfigValidation(t *testing.T) {
	for _, c := range []struct {
		ports []airlock.PortMapping
		want  string
	}{
		{[]airlock.PortMapping{{SandboxPort: 53, Protocol: "udp"}}, "only TCP ports"},
		{[]airlock.PortMapping{{}}, "sandbox_port is required"},
		{[]airlock.PortMapping{{SandboxPort: 1, HostIP: "example.com"}}, "not an IP address"},
		{[]airlock.PortMapping{{SandboxPort: 1, HostPort: 8080}, {SandboxPort: 2, HostPort: 8080}}, "given twice"},
		{make([]airlock.PortMapping, airlock.MaxPublishedPorts+1), "publish fewer"},
	} {
		cfg := airlock.Config{Ports: c.ports}
		err := cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Validate(%+v) = %v, want %q", c.ports, err, c.want)
		}
	}
}

// holdServer greets each connection and holds it open until the client
// closes it.
const holdServer = `
import socket, sys, threading
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", int(sys.argv[1])))
s.listen(1024)
def hold(c):
    c.sendall(b"+")
    while c.recv(100):
        pass
    c.close()
while True:
    c, _ = s.accept()
    threading.Thread(target=hold, args=(c,), daemon=True).start()
`

// TestPortConnectionLimit opens MaxPortConns connections through one
// published port: the next is reset at once, and one closed makes room.
// It also publishes on the host's IPv6 loopback.
func TestPortConnectionLimit(t *testing.T) {
	ctx := testCtx(t, 2*time.Minute)
	sb := portSandbox(t, airlock.Config{Ports: []airlock.PortMapping{{SandboxPort: 7000, HostIP: "::1"}}})
	p := sb.Ports()[0]
	if p.HostIP != "::1" {
		t.Fatalf("published on %q, want ::1", p.HostIP)
	}
	addr := hostAddr(p)
	if _, err := sb.Start(ctx, airlock.Command{Argv: []string{"python3", "-c", holdServer, "7000"}, Stdout: io.Discard, Stderr: io.Discard}); err != nil {
		t.Fatal(err)
	}
	// open connects and waits for the server's "+": the connection
	// reached the sandbox.
	open := func() (net.Conn, error) {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			return nil, err
		}
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		b := make([]byte, 1)
		if _, err := io.ReadFull(c, b); err != nil {
			c.Close()
			return nil, err
		}
		c.SetReadDeadline(time.Time{})
		return c, nil
	}
	var first net.Conn
	for deadline := time.Now().Add(30 * time.Second); ; {
		c, err := open()
		if err == nil {
			first = c
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server in the sandbox never answered: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	conns := []net.Conn{first}
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	start := time.Now()
	for len(conns) < airlock.MaxPortConns {
		c, err := open()
		if err != nil {
			t.Fatalf("connection %d of %d through the port: %v", len(conns)+1, airlock.MaxPortConns, err)
		}
		conns = append(conns, c)
	}
	t.Logf("%d connections in %s", len(conns), time.Since(start))
	start = time.Now()
	if c, err := open(); err == nil {
		c.Close()
		t.Fatalf("connection %d through one port reached the sandbox; the most is %d", airlock.MaxPortConns+1, airlock.MaxPortConns)
	}
	t.Logf("one more refused in %s", time.Since(start))
	conns[0].Close()
	conns = conns[1:]
	for deadline := time.Now().Add(10 * time.Second); ; {
		c, err := open()
		if err == nil {
			conns = append(conns, c)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no room once a connection closed: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// deafServer accepts, says "+" and then holds each connection open,
// reading nothing and never closing it, whatever the client does.
const deafServer = `
import socket, sys, time
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", int(sys.argv[1])))
s.listen(64)
held = []
while True:
    c, _ = s.accept()
    c.sendall(b"+")
    held.append(c)
`

// TestPortStopEndsHeldConnections: stopping a published port, and closing
// the sandbox, end the connections through it even when the sandbox's
// side holds them open and reads nothing.
func TestPortStopEndsHeldConnections(t *testing.T) {
	ctx := testCtx(t, 2*time.Minute)
	sb := portSandbox(t, airlock.Config{Ports: []airlock.PortMapping{{SandboxPort: 7100}, {SandboxPort: 7200}}})
	for _, port := range []string{"7100", "7200"} {
		if _, err := sb.Start(ctx, airlock.Command{Argv: []string{"python3", "-c", deafServer, port}, Stdout: io.Discard, Stderr: io.Discard}); err != nil {
			t.Fatal(err)
		}
	}
	held := func(p airlock.PublishedPort) net.Conn {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); ; {
			c, err := net.DialTimeout("tcp", hostAddr(p), 5*time.Second)
			if err == nil {
				c.SetReadDeadline(time.Now().Add(10 * time.Second))
				b := make([]byte, 1)
				if _, err = io.ReadFull(c, b); err == nil {
					c.SetReadDeadline(time.Time{})
					return c
				}
				c.Close()
			}
			if time.Now().After(deadline) {
				t.Fatalf("the server in the sandbox never answered through %s: %v", hostAddr(p), err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	// returns fails the test when f does not return while the test may
	// still run: a hang, not a slow machine.
	returns := func(what string, f func()) {
		t.Helper()
		done := make(chan struct{})
		go func() { f(); close(done) }()
		select {
		case <-done:
		case <-ctx.Done():
			t.Fatalf("%s did not return: a connection the sandbox holds kept it waiting", what)
		}
	}
	ports := sb.Ports()
	c1 := held(ports[0])
	defer c1.Close()
	returns("Unpublish", func() {
		if _, err := sb.Unpublish(ports[0].HostIP, ports[0].HostPort); err != nil {
			t.Errorf("Unpublish: %v", err)
		}
	})
	c1.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := c1.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("the host's connection through the stopped port: %v, want it ended", err)
	}
	c2 := held(ports[1])
	defer c2.Close()
	returns("Close", func() { sb.Close() })
}
