package client

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/airlock-sandbox/airlock/internal/unixsock"
)

// Dial connects to the control socket of a sandbox (a unix stream socket
// speaking the same JSON-RPC lines as `airlock rpc`, scoped to that
// sandbox) and asks the server for its limits. ctx bounds both.
// Options.Binary, Args, Env and Stderr do not apply. Requests on a control
// socket may omit the sandbox id: use c.Sandbox(""). Closing the client
// closes the connection only; the sandbox keeps running.
func Dial(ctx context.Context, socketPath string, opts Options) (*Client, error) {
	addr, release, err := unixsock.Addr(socketPath)
	if err != nil {
		return nil, fmt.Errorf("airlock client: control socket %s: %w", socketPath, err)
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", addr)
	release()
	if err != nil {
		return nil, fmt.Errorf("airlock client: connecting to control socket %s (is the sandbox still running? see `airlock ps`): %w", socketPath, err)
	}
	c := NewClient(conn, opts)
	// Learn max_message_bytes, so that an oversized request is refused
	// here rather than left unanswered.
	if _, err := c.Info(ctx); err != nil {
		var e *Error
		if !errors.As(err, &e) {
			c.Close()
			return nil, fmt.Errorf("airlock client: control socket %s: %w", socketPath, err)
		}
	}
	return c, nil
}

// DialSandbox connects to the control socket of the sandbox id, found in
// the state directory ($AIRLOCK_HOME, default ~/.airlock) as `airlock`
// keeps it. See Dial.
func DialSandbox(ctx context.Context, id string, opts Options) (*Client, error) {
	path, err := SocketPath(id)
	if err != nil {
		return nil, err
	}
	return Dial(ctx, path, opts)
}

// SocketPath returns where the control socket of sandbox id is:
// <state directory>/sandboxes/<id>/ctl.sock, the state directory being
// $AIRLOCK_HOME or ~/.airlock.
func SocketPath(id string) (string, error) {
	if id == "" || id == "." || id == ".." || strings.ContainsAny(id, `/\`) {
		return "", fmt.Errorf("airlock client: %q is not a sandbox id (like sb-5f21a0bd831e; see `airlock ps`)", id)
	}
	home := os.Getenv("AIRLOCK_HOME")
	if home == "" {
		h, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("airlock client: finding the state directory: set AIRLOCK_HOME: %w", err)
		}
		home = filepath.Join(h, ".airlock")
	}
	return filepath.Join(home, "sandboxes", id, "ctl.sock"), nil
}
