package unixsock

import (
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

func TestLongPath(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("long socket paths are reached through /proc/self/fd on Linux")
	}
	dir := filepath.Join(t.TempDir(), strings.Repeat("d", 60), strings.Repeat("e", 60))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "ctl.sock")
	if len(path) <= maxPath {
		t.Fatalf("test path is only %d bytes", len(path))
	}
	ln, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("socket not at its long path: %v", err)
	}
	go func() {
		c, err := ln.Accept()
		if err == nil {
			c.Write([]byte("hi"))
			c.Close()
		}
	}()
	addr, release, err := Addr(path)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("unix", addr)
	release()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	b := make([]byte, 2)
	if _, err := c.Read(b); err != nil || string(b) != "hi" {
		t.Fatalf("read %q, %v", b, err)
	}
}
