package cli

import (
	"bytes"
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/api"
)

// TestRPCBinaryPool drives the built binary: a sandbox taken from a pool
// is recorded as the session's others are, and its control socket serves
// it (airlock exec), with its events.
func TestRPCBinaryPool(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, cliBin, "rpc")
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := newRPCPeer(t, in, out)
	var pr api.PoolCreateResult
	p.result(1, api.MethodPoolCreate, map[string]any{"size": 1, "env": map[string]string{"FROM": "pool"}}, &pr)
	var cr api.CreateResult
	p.result(2, api.MethodCreate, map[string]any{"pool": pr.PoolID}, &cr)
	if !strings.HasPrefix(cr.SandboxID, "sb-") || cr.Env["FROM"] != "pool" {
		t.Fatalf("create from a pool: %+v", cr)
	}
	got, err := exec.CommandContext(ctx, cliBin, "exec", cr.SandboxID, "--", "sh", "-c", "echo $FROM").CombinedOutput()
	if err != nil || string(got) != "pool\n" {
		t.Errorf("airlock exec in a sandbox taken from a pool: %v: %q", err, got)
	}
	var info api.InfoResult
	p.result(3, api.MethodInfo, nil, &info)
	if len(info.Sandboxes) != 1 {
		t.Fatalf("info: %+v", info)
	}
	pid := info.Sandboxes[0].PID
	in.Close()
	if err := cmd.Wait(); err != nil {
		t.Errorf("airlock rpc after the end of stdin: %v; stderr:\n%s", err, stderr.String())
	}
	if !rpcAgentGone(pid) {
		t.Errorf("the sandbox's agent (pid %d) outlived airlock rpc", pid)
	}
	if strings.Contains(stderr.String(), "panic") {
		t.Errorf("airlock rpc panicked:\n%s", stderr.String())
	}
}
