//go:build linux

package ctrshim

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/containerd/containerd/mount"
	"github.com/containerd/containerd/namespaces"
	"github.com/containerd/containerd/runtime/v2/shim"

	"github.com/airlock-sandbox/airlock"
)

// RuntimeName is the runtime's name in containerd's configuration and in
// `ctr run --runtime`.
const RuntimeName = "io.containerd.airlock.v2"

// Manager starts and cleans up shim processes, as containerd asks by
// running the shim binary with "start" and "delete".
type Manager struct{}

// Name is the runtime's name.
func (Manager) Name() string { return RuntimeName }

// Start starts the shim process that serves task id (containerd runs it
// in the task's bundle directory) on a socket of its own, and returns
// the socket's address. A pod's containers share their pod's shim.
func (Manager) Start(ctx context.Context, id string, opts shim.StartOpts) (_ string, retErr error) {
	ns, err := namespaces.NamespaceRequired(ctx)
	if err != nil {
		return "", err
	}
	self, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("find the shim's own binary: %w", err)
	}
	cwd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	group := id
	if spec, err := readSpec(filepath.Join(cwd, "config.json")); err == nil {
		group, _ = podOf(id, spec)
	}
	address, err := shim.SocketAddress(ctx, opts.Address, group)
	if err != nil {
		return "", err
	}
	socket, err := shim.NewSocket(address)
	if err != nil {
		if !shim.SocketEaddrinuse(err) {
			return "", fmt.Errorf("create the shim's socket: %w", err)
		}
		if shim.CanConnect(address) {
			// The pod's shim is running: it serves this container too.
			if err := shim.WriteAddress("address", address); err != nil {
				return "", err
			}
			return address, nil
		}
		// A shim that died left its socket.
		if err := shim.RemoveSocket(address); err != nil {
			return "", fmt.Errorf("remove a dead shim's socket: %w", err)
		}
		if socket, err = shim.NewSocket(address); err != nil {
			return "", fmt.Errorf("create the shim's socket: %w", err)
		}
	}
	defer func() {
		if retErr != nil {
			socket.Close()
			_ = shim.RemoveSocket(address)
		}
	}()
	if err := shim.WriteAddress("address", address); err != nil {
		return "", err
	}
	f, err := socket.File()
	if err != nil {
		return "", err
	}
	defer f.Close()
	args := []string{"-namespace", ns, "-id", id, "-address", opts.Address}
	if opts.Debug {
		args = append(args, "-debug")
	}
	cmd := exec.Command(self, args...)
	cmd.Dir = cwd
	cmd.Env = os.Environ()
	// Its own process group: containerd's signals to its own group do
	// not reach the shim.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.ExtraFiles = []*os.File{f}
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("start the shim: %w", err)
	}
	defer func() {
		if retErr != nil {
			_ = cmd.Process.Kill()
		}
	}()
	go func() { _ = cmd.Wait() }()
	if err := shim.AdjustOOMScore(cmd.Process.Pid); err != nil {
		return "", fmt.Errorf("adjust the shim's OOM score: %w", err)
	}
	return address, nil
}

// Stop cleans up after the shim of task id when it is gone (containerd
// runs "delete" when a shim died or would not start): whatever the
// task's sandbox left on the host, and the task's root mount.
func (Manager) Stop(ctx context.Context, id string) (shim.StopStatus, error) {
	cwd, err := os.Getwd()
	if err != nil {
		return shim.StopStatus{}, err
	}
	bundle := filepath.Join(filepath.Dir(cwd), id)
	if err := airlock.Reclaim(SandboxID(id)); err != nil {
		return shim.StopStatus{}, fmt.Errorf("reclaim the sandbox of task %s: %w", id, err)
	}
	if err := mount.UnmountAll(filepath.Join(bundle, "rootfs"), 0); err != nil && !os.IsNotExist(err) {
		return shim.StopStatus{}, fmt.Errorf("unmount the root of task %s: %w", id, err)
	}
	return shim.StopStatus{ExitedAt: time.Now(), ExitStatus: 128 + int(syscall.SIGKILL)}, nil
}
