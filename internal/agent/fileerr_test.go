package agent

import (
	"errors"
	"io/fs"
	"syscall"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/agentproto"
)

// TestFileErr: an error that is the operation on the path asked for goes
// as what went wrong, with its code; any other goes whole.
func TestFileErr(t *testing.T) {
	for _, c := range []struct {
		err  error
		code agentproto.Code
		msg  string
	}{
		{&fs.PathError{Op: "stat", Path: "/w/x", Err: syscall.ENOENT}, agentproto.CodeNotFound, "no such file or directory"},
		{&fs.PathError{Op: "mkdir", Path: "/w", Err: syscall.ENOTDIR}, agentproto.CodeNotDir, "mkdir /w: not a directory"},
		{&fs.PathError{Op: "open", Path: "/w/x", Err: agentproto.Errorf(agentproto.CodePermission, "refused: a link out of the root")}, agentproto.CodePermission, "refused: a link out of the root"},
		{errors.New("open /w/x: something else"), agentproto.CodeInternal, "open /w/x: something else"},
	} {
		got := fileErr("/w/x", c.err)
		if got.Code != c.code || got.Message != c.msg {
			t.Errorf("fileErr(%v) = %q %q, want %q %q", c.err, got.Code, got.Message, c.code, c.msg)
		}
	}
}
