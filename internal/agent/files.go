package agent

import (
	"fmt"
	"path/filepath"

	"github.com/airlock-sandbox/airlock/internal/agentproto"
)

// maxPath bounds a path from the host (PATH_MAX).
const maxPath = 4096

// The agent's root is the sandbox's root, so paths need no rebasing here;
// they must still be absolute and clean so a relative path never resolves
// against the agent's working directory by accident.
func cleanPath(p string) (string, error) {
	if p == "" || !filepath.IsAbs(p) {
		return "", agentproto.Errorf(agentproto.CodeInvalid, fmt.Sprintf("path %q must be absolute", p))
	}
	if len(p) > maxPath {
		return "", agentproto.Errorf(agentproto.CodeInvalid, fmt.Sprintf("path %.40q... is longer than %d bytes", p, maxPath))
	}
	return filepath.Clean(p), nil
}

func replyErr(c *agentproto.Conn, err error) error {
	return c.Write(agentproto.Msg{K: agentproto.KErr, Err: agentproto.ToError(err)})
}
