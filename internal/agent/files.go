package agent

import (
	"errors"
	"fmt"
	"io/fs"
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

// replyFileErr answers a file operation on p with err, as fileErr words it.
func replyFileErr(c *agentproto.Conn, p string, err error) error {
	return c.Write(agentproto.Msg{K: agentproto.KErr, Err: fileErr(p, err)})
}

// fileErr is err for the host, which names the operation and p in front
// of it: an error that is only the operation on p and what went wrong
// (an *fs.PathError of p) goes as what went wrong, so that the user does
// not read the operation and the path twice. An error about another
// path (a parent, a link's target) goes whole.
func fileErr(p string, err error) *agentproto.Error {
	e := agentproto.ToError(err)
	if pe, ok := err.(*fs.PathError); ok && p != "" && pe.Path == p {
		var inner *agentproto.Error
		if !errors.As(pe.Err, &inner) {
			e = &agentproto.Error{Code: e.Code, Message: pe.Err.Error()}
		}
	}
	return e
}
