package cli

import (
	"os"
	"strings"
	"testing"
)

// --memory takes "unlimited"; --disk beyond half of --memory is a file as
// root and refused otherwise; --help says what backs the disk.
func TestRunMemoryAndDisk(t *testing.T) {
	t.Parallel()
	if r := runCLI(t, nil, "run", "--memory", "unlimited", "--disk", "64m", "--", "stat", "-f", "-c", "%T", "/"); r.code != 0 || strings.TrimSpace(r.stdout) != "tmpfs" {
		t.Errorf("--memory unlimited: exit %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
	}
	if r := runCLI(t, nil, "run", "--memory", "unlimitedx", "--", "true"); r.code != 125 || !strings.Contains(r.stderr, "--memory") {
		t.Errorf("--memory unlimitedx: exit %d stderr %q, want 125 naming the flag", r.code, r.stderr)
	}
	r := runCLI(t, nil, "run", "--memory", "64m", "--disk", "256m", "--", "stat", "-f", "-c", "%T", "/")
	switch {
	case os.Geteuid() == 0 && (r.code != 0 || strings.TrimSpace(r.stdout) == "tmpfs"):
		t.Errorf("--memory 64m --disk 256m as root: exit %d stdout %q stderr %q, want a disk that is not a tmpfs", r.code, r.stdout, r.stderr)
	case os.Geteuid() != 0 && (r.code != 125 || !strings.Contains(r.stderr, "does not fit in memory")):
		t.Errorf("--memory 64m --disk 256m unprivileged: exit %d stderr %q, want 125 and the reason", r.code, r.stderr)
	}
	help := runCLI(t, nil, "run", "--help").stdout
	for _, want := range []string{"unlimited", "tmpfs", "$AIRLOCK_HOME", "ENOSPC"} {
		if !strings.Contains(help, want) {
			t.Errorf("run --help does not say %q", want)
		}
	}
}
