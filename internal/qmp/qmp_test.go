package qmp

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// startQEMU starts a paused microvm with its QMP socket, and returns the
// socket's path.
func startQEMU(t *testing.T) (string, *exec.Cmd) {
	t.Helper()
	bin, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		if os.Getenv("AIRLOCK_REQUIRE_QEMU") != "" {
			t.Fatal("qemu-system-x86_64 is not installed: run scripts/deps.sh (Debian: apt-get install qemu-system-x86)")
		}
		t.Skip("qemu-system-x86_64 is not installed (Debian: qemu-system-x86)")
	}
	sock := filepath.Join(t.TempDir(), "qmp.sock")
	var out bytes.Buffer
	cmd := exec.Command(bin, "-M", "microvm", "-accel", "tcg", "-nodefaults", "-no-user-config", "-display", "none",
		"-S", "-qmp", "unix:"+sock+",server=on,wait=off")
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			t.Logf("QEMU's output:\n%s", out.String())
		}
	})
	for deadline := time.Now().Add(20 * time.Second); ; {
		if _, err := os.Stat(sock); err == nil {
			return sock, cmd
		}
		if time.Now().After(deadline) {
			t.Fatalf("QEMU made no QMP socket: %s", out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestRealQEMU(t *testing.T) {
	ctx := testCtx(t)
	sock, cmd := startQEMU(t)
	// QEMU makes the socket's file before it listens on it.
	m, err := Dial(ctx, sock)
	for errors.Is(err, syscall.ECONNREFUSED) && ctx.Err() == nil {
		time.Sleep(5 * time.Millisecond)
		m, err = Dial(ctx, sock)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	st, err := m.QueryStatus(ctx)
	if err != nil || st.Running || st.Status != "prelaunch" {
		t.Fatalf("query-status of a VM started with -S: %+v, %v", st, err)
	}
	if _, err := m.Execute(ctx, "cont", nil); err != nil {
		t.Fatal(err)
	}
	if st, err := m.QueryStatus(ctx); err != nil || !st.Running {
		t.Errorf("after cont: %+v, %v", st, err)
	}
	if _, err := m.Execute(ctx, "stop", nil); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, ctx, m, "STOP")
	var qe *Error
	if _, err := m.Execute(ctx, "no-such-command", nil); !errors.As(err, &qe) || qe.Class != "CommandNotFound" || qe.Command != "no-such-command" {
		t.Errorf("an unknown command: %v", err)
	}
	// Arguments go through: a human-monitor command's output comes back.
	raw, err := m.Execute(ctx, "human-monitor-command", map[string]string{"command-line": "info version"})
	if err != nil || !strings.Contains(string(raw), "7.") && !strings.Contains(string(raw), "8.") && !strings.Contains(string(raw), "9.") {
		t.Errorf("human-monitor-command: %s, %v", raw, err)
	}
	// Many commands at once each get their own answer.
	errs := make(chan error, 16)
	for range 16 {
		go func() { _, err := m.QueryStatus(ctx); errs <- err }()
	}
	for range 16 {
		if err := <-errs; err != nil {
			t.Errorf("concurrent query-status: %v", err)
		}
	}
	if _, err := m.Execute(ctx, "quit", nil); err != nil && !errors.Is(err, ErrClosed) {
		t.Errorf("quit: %v", err)
	}
	select {
	case <-m.Done():
	case <-ctx.Done():
		t.Fatal("the connection did not end when QEMU quit")
	}
	cmd.Wait()
	if _, err := m.QueryStatus(ctx); !errors.Is(err, ErrClosed) {
		t.Errorf("a command after QEMU quit: %v, want ErrClosed", err)
	}
}

func waitEvent(t *testing.T, ctx context.Context, m *Monitor, name string) {
	t.Helper()
	for {
		select {
		case ev, ok := <-m.Events():
			if !ok {
				t.Fatalf("the connection ended before event %s", name)
			}
			if ev.Event == name {
				return
			}
		case <-ctx.Done():
			t.Fatalf("no event %s", name)
		}
	}
}

// fakeQEMU serves one connection on a unix socket with script: it writes
// the greeting, answers qmp_capabilities, then runs then(conn).
func fakeQEMU(t *testing.T, then func(net.Conn)) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "fake.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		c.Write([]byte(`{"QMP": {"version": {}, "capabilities": []}}` + "\n"))
		buf := make([]byte, 4096)
		n, _ := c.Read(buf)
		id := "1"
		if i := bytes.Index(buf[:n], []byte(`"id":"`)); i >= 0 {
			rest := buf[i+6 : n]
			id = string(rest[:bytes.IndexByte(rest, '"')])
		}
		c.Write([]byte(`{"return": {}, "id": "` + id + `"}` + "\n"))
		then(c)
	}()
	return sock
}

// A peer that is not a well-behaved QEMU (the VMM runs next to untrusted
// guest code) ends the connection with an error: it cannot make the
// monitor read without bound, hang a command, or block on events.
func TestHostilePeer(t *testing.T) {
	ctx := testCtx(t)
	for name, then := range map[string]func(net.Conn){
		"endless line": func(c net.Conn) {
			chunk := bytes.Repeat([]byte("x"), 64<<10)
			for range (maxMessage >> 16) + 4 {
				if _, err := c.Write(chunk); err != nil {
					return
				}
			}
			time.Sleep(time.Second)
		},
		"not JSON": func(c net.Conn) { c.Write([]byte("garbage\n")); time.Sleep(time.Second) },
		"event flood": func(c net.Conn) {
			for range eventBuffer * 4 {
				c.Write([]byte(`{"event": "RESET", "timestamp": {"seconds": 1, "microseconds": 2}}` + "\n"))
			}
			c.Write([]byte("garbage\n"))
			time.Sleep(time.Second)
		},
	} {
		t.Run(name, func(t *testing.T) {
			m, err := Dial(ctx, fakeQEMU(t, then))
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			select {
			case <-m.Done():
			case <-ctx.Done():
				t.Fatal("the monitor went on reading a peer that broke the protocol")
			}
			if _, err := m.QueryStatus(ctx); !errors.Is(err, ErrClosed) {
				t.Errorf("a command after the peer broke the protocol: %v", err)
			}
			if name == "event flood" && m.Dropped() == 0 {
				t.Error("a flood of events nobody read dropped none")
			}
		})
	}
	// A peer that greets as something else is refused.
	sock := filepath.Join(t.TempDir(), "other.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		if c, err := ln.Accept(); err == nil {
			c.Write([]byte("SSH-2.0-OpenSSH\n"))
			time.Sleep(time.Second)
			c.Close()
		}
	}()
	if _, err := Dial(ctx, sock); err == nil || !strings.Contains(err.Error(), "did not greet") {
		t.Errorf("a peer that is not QEMU: %v", err)
	}
}

// FuzzRead: whatever QEMU's side sends, the reader neither panics nor
// keeps more than its bounds, and ends at the end of the stream.
func FuzzRead(f *testing.F) {
	f.Add([]byte(`{"return": {}, "id": "1"}` + "\n" + `{"event": "STOP", "timestamp": {"seconds": 1, "microseconds": 2}}` + "\n"))
	f.Add([]byte(`{"error": {"class": "GenericError", "desc": "x"}, "id": "1"}` + "\n"))
	f.Add([]byte(`{"id": 1}` + "\n" + `{"event": 5}` + "\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		a, b := net.Pipe()
		m := &Monitor{conn: a, waiting: map[string]chan response{"1": make(chan response, 1)}, events: make(chan Event, eventBuffer), done: make(chan struct{})}
		go func() { b.Write(data); b.Close() }()
		m.read(bufio.NewReader(a))
		a.Close() // a writer stopped midway is let go
		<-m.done
		if len(m.waiting) != 0 {
			t.Fatal("a command still waits after the connection ended")
		}
	})
}
