//go:build !linux

package agent

import (
	"net"

	"github.com/airlock-sandbox/airlock/internal/agentproto"
)

// vfsMounts are a sandbox's programmable mounts, which only the Linux
// agent makes.
type vfsMounts struct{}

func (s *server) serveVFS(c *agentproto.Conn, _ net.Conn, _ string) (bool, error) {
	return false, c.Write(agentproto.Msg{K: agentproto.KErr, Err: agentproto.Errorf(agentproto.CodeInvalid, "programmable mounts need the Linux agent")})
}
