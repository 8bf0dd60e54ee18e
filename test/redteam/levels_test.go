package redteam_test

import (
	"context"
	"errors"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
)

// levels are the isolation levels the suite runs over, strongest last.
var levels = []airlock.Isolation{airlock.IsolationProcess, airlock.IsolationGVisor, airlock.IsolationVM}

// availability remembers, per level, why it cannot run here ("" when it
// can), found once by creating a sandbox of that level.
var availability sync.Map // airlock.Isolation -> *levelProbe

type levelProbe struct {
	once   sync.Once
	reason string
}

// unavailable reports why level lv cannot run on this machine, or "".
// Only airlock's own "unavailable" refusal counts: any other failure to
// create a sandbox fails the test that asked.
func unavailable(t *testing.T, lv airlock.Isolation) string {
	t.Helper()
	v, _ := availability.LoadOrStore(lv, &levelProbe{})
	p := v.(*levelProbe)
	var err error
	p.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		sb, cerr := airlock.Create(ctx, airlock.Config{Isolation: lv})
		switch {
		case errors.Is(cerr, airlock.ErrUnavailable):
			p.reason = cerr.Error()
		case cerr != nil:
			err = cerr
		default:
			sb.Close()
		}
	})
	if err != nil {
		t.Fatalf("create a %s sandbox: %v", lv, err)
	}
	return p.reason
}

// eachLevel runs f as a subtest for every isolation level that works
// here; a level that does not is skipped with airlock's reason.
func eachLevel(t *testing.T, f func(t *testing.T, lv airlock.Isolation)) {
	t.Helper()
	for _, lv := range levels {
		t.Run(string(lv), func(t *testing.T) {
			if why := unavailable(t, lv); why != "" {
				t.Skip(why)
			}
			f(t, lv)
		})
	}
}

// box creates a sandbox of level lv from cfg, closed when the test ends.
func box(t *testing.T, lv airlock.Isolation, cfg airlock.Config) *airlock.Sandbox {
	t.Helper()
	cfg.Isolation = lv
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sb, err := airlock.Create(ctx, cfg)
	if err != nil {
		t.Fatalf("create a %s sandbox: %v", lv, err)
	}
	t.Cleanup(func() { sb.Close() })
	return sb
}

// sh runs a shell command line in sb, with a deadline, and returns its
// result whatever its exit code.
func sh(t *testing.T, sb *airlock.Sandbox, command string) *airlock.ExecResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := sb.Exec(ctx, command)
	if err != nil {
		t.Fatalf("exec %q: %v", command, err)
	}
	return res
}

// ok runs a shell command line that must exit 0 and returns its stdout.
func ok(t *testing.T, sb *airlock.Sandbox, command string) string {
	t.Helper()
	res := sh(t, sb, command)
	if res.ExitCode != 0 {
		t.Fatalf("exec %q: exit %d (killed by %q)\nstdout: %s\nstderr: %s", command, res.ExitCode, res.KilledBy, res.Stdout, res.Stderr)
	}
	return string(res.Stdout)
}

// py runs a python3 program in sb that must exit 0 and returns its
// stdout. Attacks that need raw syscalls use ctypes.
func py(t *testing.T, sb *airlock.Sandbox, prog string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := sb.Run(ctx, airlock.Command{Argv: []string{"python3", "-c", prog}})
	if err != nil {
		t.Fatalf("python3: %v", err)
	}
	if res.ExitCode != 0 {
		t.Fatalf("python3 exited %d\nstdout: %s\nstderr: %s", res.ExitCode, res.Stdout, res.Stderr)
	}
	return string(res.Stdout)
}

// run runs cmd in sb, with a deadline, and returns its result whatever
// its exit code.
func run(t *testing.T, sb *airlock.Sandbox, cmd airlock.Command) *airlock.ExecResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := sb.Run(ctx, cmd)
	if err != nil {
		t.Fatalf("run %q: %v", cmd.Argv, err)
	}
	return res
}

// needNetwork skips a test that gives its sandbox a network when this
// caller cannot have one here: without root, a network needs a
// /dev/net/tun open to the caller, which these machines keep 0600 (the
// egress suite covers that path with a node of its own).
func needNetwork(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("a network without root needs /dev/net/tun open to the caller; it is 0600 here")
	}
}

// guestIDs is why a test of how a sandbox's ids map to the host's does
// not apply at the vm level.
const guestIDs = "a VM's uids and gids are its guest kernel's own and map to nothing on the host; the host process is QEMU, as one leased uid (TestIDsDistinct, TestVMJail)"

// processIDsOnly skips t at a level whose ids do not map to the host's.
func processIDsOnly(t *testing.T, lv airlock.Isolation) {
	t.Helper()
	if lv == airlock.IsolationVM {
		t.Skip(guestIDs)
	}
}
