package cli

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/vmkernel"
)

// TestKernelCommands checks the kernel commands on a cache that holds no
// kernel: they list nothing and refuse an unknown architecture by name.
func TestKernelCommands(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	r := runCLI(t, nil, "kernel", "list", "--json", "--cache-dir", dir)
	var ks []vmkernel.Kernel
	if err := json.Unmarshal([]byte(r.stdout), &ks); err != nil || r.code != 0 || len(ks) != 0 {
		t.Fatalf("kernel list --json on an empty cache: exit %d, %v, %q", r.code, err, r.stdout)
	}
	r = runCLI(t, nil, "kernel", "list", "--cache-dir", dir)
	if r.code != 0 || !strings.HasPrefix(r.stdout, "ARCH") {
		t.Fatalf("kernel list: exit %d, %q, %q", r.code, r.stdout, r.stderr)
	}
	r = runCLI(t, nil, "kernel", "prune", "--json", "--cache-dir", dir)
	if err := json.Unmarshal([]byte(r.stdout), &ks); err != nil || r.code != 0 || len(ks) != 0 {
		t.Fatalf("kernel prune --json on an empty cache: exit %d, %v, %q", r.code, err, r.stdout)
	}
	r = runCLI(t, nil, "kernel", "rm", "6588c2a5", "--cache-dir", dir)
	if r.code != 1 || !strings.Contains(r.stderr, `no such guest kernel "6588c2a5"`) || !strings.Contains(r.stderr, "airlock kernel list") {
		t.Fatalf("kernel rm of no kernel: exit %d, stderr %q", r.code, r.stderr)
	}
	r = runCLI(t, nil, "kernel", "build", "--arch", "riscv64", "--cache-dir", dir)
	if r.code == 0 || !strings.Contains(r.stderr, `unknown kernel architecture "riscv64"`) {
		t.Fatalf("kernel build --arch riscv64: exit %d, stderr %q", r.code, r.stderr)
	}
}
