//go:build linux

package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/bench/internal/httpclient"
	"github.com/airlock-sandbox/airlock/internal/testnet"
)

// slirpReadyTimeout bounds how long slirp4netns may take to set up the
// namespace's interface.
const slirpReadyTimeout = 10 * time.Second

// slirpPath finds slirp4netns, the user-mode network of rootless
// containers: a peer for the bulk downloads that forwards packets
// between a TAP device and host sockets without inspecting anything. It
// says why when the comparison cannot run.
func slirpPath() (string, string) {
	p, err := exec.LookPath("slirp4netns")
	if err != nil {
		return "", "slirp4netns not on PATH (apt-get install -y slirp4netns)"
	}
	return p, ""
}

// slirp runs the client in a new network namespace whose only way out
// is slirp4netns, started from this namespace with the same settings a
// fast rootless container would use (MTU 65520), and with the direct
// client's name server and trust store: the same download through a
// user-mode network that does no interception.
func (m *egressRunner) slirp(ctx context.Context, slirp string, o httpclient.Options) (_ *httpclient.Result, err error) {
	o.DNS = testnet.DNSAddr
	// The client waits on gate until the namespace has its interface.
	gateR, gateW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer gateR.Close()
	defer gateW.Close()
	args := append([]string{"-c", `read -r _ <&3 && exec "$@"`, "sh", m.p.Client}, o.Args()...)
	client := exec.CommandContext(ctx, "/bin/sh", args...)
	client.Env = []string{"PATH=/usr/bin:/bin", "SSL_CERT_FILE=" + m.caFile}
	var stdout, stderr bytes.Buffer
	client.Stdout, client.Stderr = &stdout, &stderr
	client.ExtraFiles = []*os.File{gateR}
	client.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET, Pdeathsig: syscall.SIGKILL}
	if err := client.Start(); err != nil {
		return nil, fmt.Errorf("start the client in a new network namespace: %w", err)
	}
	defer func() {
		if err != nil {
			_ = client.Process.Kill()
			_ = client.Wait()
		}
	}()

	// slirp4netns writes "1" to its ready fd once the interface is
	// configured, and exits when its exit fd is closed.
	readyR, readyW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer readyR.Close()
	exitR, exitW, err := os.Pipe()
	if err != nil {
		readyW.Close()
		return nil, err
	}
	var slirpErr bytes.Buffer
	s := exec.Command(slirp, "--configure", "--mtu=65520", "--disable-host-loopback",
		"--ready-fd=3", "--exit-fd=4", fmt.Sprint(client.Process.Pid), "tap0")
	s.Stdout, s.Stderr = &slirpErr, &slirpErr
	s.ExtraFiles = []*os.File{readyW, exitR}
	s.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	err = s.Start()
	readyW.Close()
	exitR.Close()
	if err != nil {
		exitW.Close()
		return nil, fmt.Errorf("start slirp4netns: %w", err)
	}
	defer func() {
		exitW.Close()
		if werr := s.Wait(); werr != nil && err == nil {
			err = fmt.Errorf("slirp4netns: %w: %s", werr, strings.TrimSpace(slirpErr.String()))
		}
	}()
	if err := readyR.SetReadDeadline(time.Now().Add(slirpReadyTimeout)); err != nil {
		return nil, err
	}
	b := make([]byte, 1)
	if _, err := readyR.Read(b); err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			err = fmt.Errorf("not ready after %v", slirpReadyTimeout)
		}
		return nil, fmt.Errorf("slirp4netns: %w: %s", err, strings.TrimSpace(slirpErr.String()))
	}

	if _, err := gateW.Write([]byte("\n")); err != nil {
		return nil, err
	}
	if err := client.Wait(); err != nil {
		return nil, fmt.Errorf("client behind slirp4netns: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	return decodeClient("client behind slirp4netns", stdout.Bytes())
}
