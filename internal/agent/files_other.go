//go:build !linux

package agent

import (
	"errors"

	"github.com/airlock-sandbox/airlock/internal/agentproto"
)

// sandboxFS needs openat2: the agent runs inside Linux sandboxes only.
type sandboxFS struct{}

func openSandboxFS(string) (*sandboxFS, error) {
	return nil, errors.New("file operations need the Linux agent (openat2)")
}

func (*sandboxFS) Close() error { return nil }

func (s *server) file(c *agentproto.Conn, _ *agentproto.Request) error {
	return replyErr(c, agentproto.Errorf(agentproto.CodeInvalid, "file operations need the Linux agent"))
}
