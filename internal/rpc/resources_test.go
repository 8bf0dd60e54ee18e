package rpc

import (
	"encoding/base64"
	"os"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/api"
)

// memory_mb -1 lifts the default memory limit and is the only negative
// one; a disk_mb beyond half the memory is a disk-backed tree as root and
// an invalid parameter, with the reason, otherwise.
func TestCreateMemoryAndDisk(t *testing.T) {
	t.Parallel()
	c := newClient(t, Options{AllowCreate: true}, ServeOptions{})
	id := c.create("unlimited", map[string]any{"resources": map[string]any{"memory_mb": -1}, "disk_mb": 64})
	c.result("closed", api.MethodClose, map[string]any{"sandbox_id": id}, nil)

	e := wantError(t, c.call("minus-two", api.MethodCreate, map[string]any{"resources": map[string]any{"memory_mb": -2}}), api.CodeInvalidParams)
	if !strings.Contains(e.Message, "memory_mb -1 is unlimited") {
		t.Errorf("memory_mb -2: %q should say what -1 means", e.Message)
	}

	big := map[string]any{"resources": map[string]any{"memory_mb": 64}, "disk_mb": 256}
	if os.Geteuid() != 0 {
		e := wantError(t, c.call("big", api.MethodCreate, big), api.CodeInvalidParams)
		if !strings.Contains(e.Message, "does not fit in memory") || !strings.Contains(e.Message, "disk_mb") {
			t.Errorf("disk_mb 256 with memory_mb 64: %q should say why and name disk_mb", e.Message)
		}
		return
	}
	id = c.create("big", big)
	var res api.ExecResult
	c.result("stat", api.MethodExec, map[string]any{"sandbox_id": id, "command": "stat -f -c %T /"}, &res)
	out, _ := base64.StdEncoding.DecodeString(res.Stdout)
	if strings.TrimSpace(string(out)) == "tmpfs" {
		t.Errorf("disk_mb 256 with memory_mb 64 is a tmpfs")
	}
}
