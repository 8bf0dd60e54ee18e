package agent

import (
	"bytes"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The control channel to the FUSE server: messages pass whole, one too
// large or malformed is refused, and the end of the other side is
// io.EOF.
func TestFUSEControlMessages(t *testing.T) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fds[0])
	buf := make([]byte, maxFUSEMsg)
	if err := writeFUSEMsg(fds[1], fuseMsg{Op: "serve", Target: "/workspace"}); err != nil {
		t.Fatal(err)
	}
	m, err := readFUSEMsg(fds[0], buf)
	if err != nil || m.Op != "serve" || m.Target != "/workspace" {
		t.Fatalf("read %+v, %v", m, err)
	}
	if err := writeFUSEMsg(fds[1], fuseMsg{Op: "serve", Target: string(bytes.Repeat([]byte("a"), maxFUSEMsg))}); err == nil {
		t.Error("a message larger than the bound was sent")
	}
	if _, err := unix.Write(fds[1], bytes.Repeat([]byte{0xa1}, maxFUSEMsg+1)); err != nil {
		t.Fatal(err)
	}
	if _, err := readFUSEMsg(fds[0], buf); err == nil {
		t.Error("a message larger than the buffer was taken")
	}
	if _, err := unix.Write(fds[1], []byte{0xff, 0x00}); err != nil {
		t.Fatal(err)
	}
	if _, err := readFUSEMsg(fds[0], buf); err == nil {
		t.Error("a malformed message was taken")
	}
	unix.Close(fds[1])
	if _, err := readFUSEMsg(fds[0], buf); !errors.Is(err, io.EOF) {
		t.Errorf("after the other end closed: %v, want io.EOF", err)
	}
}

// A mount's relay carries bytes both ways, and the end of either side
// ends both.
func TestRelay(t *testing.T) {
	host, hostEnd := net.Pipe()
	server, serverEnd := net.Pipe()
	relay(hostEnd, serverEnd)
	big := bytes.Repeat([]byte("0123456789abcdef"), relayBuffer/8) // two buffers' worth
	go host.Write(big)
	got := make([]byte, len(big))
	if _, err := io.ReadFull(server, got); err != nil || !bytes.Equal(got, big) {
		t.Fatalf("host to server: %v", err)
	}
	go server.Write([]byte("answer"))
	got = make([]byte, 6)
	if _, err := io.ReadFull(host, got); err != nil || string(got) != "answer" {
		t.Fatalf("server to host: %q %v", got, err)
	}
	server.Close()
	host.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := host.Read(got); !errors.Is(err, io.EOF) {
		t.Errorf("the host's side after the server's closed: %v, want io.EOF", err)
	}
}
