// Package vfs_test runs programs inside real sandboxes on programmable
// mounts (FUSE in the sandbox, providers on the host) and on host
// directories bound in: POSIX behaviour that programs rely on, real
// workloads (git, a Python venv, tar, npm), limits, and escapes. Every
// test runs over every isolation level that works on this machine.
package vfs_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/testbin"
)

func TestMain(m *testing.M) { os.Exit(testMain(m)) }

func testMain(m *testing.M) int {
	dir, err := testbin.Dir("airlock-vfs-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "TestMain:", err)
		return 2
	}
	defer os.RemoveAll(dir)
	built, err := testbin.Build(dir, "airlock-guest")
	if err != nil {
		fmt.Fprintln(os.Stderr, "TestMain:", err)
		return 2
	}
	home, err := os.MkdirTemp(dir, "home-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "TestMain:", err)
		return 2
	}
	os.Setenv("AIRLOCK_AGENT", built[0])
	os.Setenv("AIRLOCK_HOME", home)
	return m.Run()
}

// levels are the isolation levels the suite runs over.
var levels = []airlock.Isolation{airlock.IsolationProcess, airlock.IsolationGVisor, airlock.IsolationVM}

var availability sync.Map // airlock.Isolation -> *probe

type probe struct {
	once   sync.Once
	reason string
	err    error
}

// eachLevel runs f as a subtest for every isolation level that works
// here and can serve programmable mounts; another is skipped with
// airlock's reason.
func eachLevel(t *testing.T, f func(t *testing.T, lv airlock.Isolation)) {
	t.Helper()
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skip("no /dev/fuse on this machine: programmable mounts need FUSE")
	}
	for _, lv := range levels {
		t.Run(string(lv), func(t *testing.T) {
			v, _ := availability.LoadOrStore(lv, &probe{})
			p := v.(*probe)
			p.once.Do(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				defer cancel()
				sb, err := airlock.Create(ctx, airlock.Config{Isolation: lv, VFS: airlock.VFSConfig{Mounts: map[string]airlock.MountSpec{"/probe": {Type: airlock.MountMemory}}}})
				switch {
				case errors.Is(err, airlock.ErrUnavailable) && lv == airlock.IsolationGVisor && os.Getenv("AIRLOCK_REQUIRE_GVISOR") != "" && os.Geteuid() == 0:
					// make test builds runsc, and as root gvisor
					// serves mounts.
					p.err = err
				case errors.Is(err, airlock.ErrUnavailable):
					p.reason = err.Error()
				case err != nil:
					p.err = err
				default:
					sb.Close()
				}
			})
			if p.err != nil {
				t.Fatalf("create a %s sandbox with a mount: %v", lv, p.err)
			}
			if p.reason != "" {
				t.Skip(p.reason)
			}
			f(t, lv)
		})
	}
}

// box creates a sandbox of level lv from cfg, closed when the test ends.
func box(t *testing.T, lv airlock.Isolation, cfg airlock.Config) *airlock.Sandbox {
	t.Helper()
	cfg.Isolation = lv
	if cfg.Resources.MemoryMB == 0 {
		cfg.Resources.MemoryMB = 1024
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sb, err := airlock.Create(ctx, cfg)
	if err != nil {
		t.Fatalf("create a %s sandbox: %v", lv, err)
	}
	t.Cleanup(func() { sb.Close() })
	return sb
}

// sh runs a shell script in sb and fails the test unless it exits 0;
// it returns stdout.
func sh(t *testing.T, sb *airlock.Sandbox, timeout time.Duration, script string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	res, err := sb.Exec(ctx, script)
	if err != nil {
		t.Fatalf("exec: %v", err)
	}
	if res.ExitCode != 0 {
		t.Fatalf("script exited %d (killed by %q)\nscript:\n%s\nstdout:\n%s\nstderr:\n%s", res.ExitCode, res.KilledBy, script, res.Stdout, res.Stderr)
	}
	return string(res.Stdout)
}

// provider is one kind of mount the suite runs on.
type provider struct {
	name string
	// mount returns the spec of a mount of this kind whose host side,
	// if any, is under dir.
	mount func(t *testing.T, dir string) (airlock.VFSConfig, string)
}

// providers are the mounts the POSIX and workload tests run on; the
// mount is at /m.
var providers = []provider{
	{"memory", func(t *testing.T, _ string) (airlock.VFSConfig, string) {
		return airlock.VFSConfig{Mounts: map[string]airlock.MountSpec{"/m": {Type: airlock.MountMemory, SizeMB: 8192}}}, ""
	}},
	{"overlay", func(t *testing.T, dir string) (airlock.VFSConfig, string) {
		lower := hostDir(t, dir, "lower")
		return airlock.VFSConfig{Mounts: map[string]airlock.MountSpec{"/m": {Type: airlock.MountOverlay,
			Upper: &airlock.MountSpec{Type: airlock.MountMemory, SizeMB: 8192},
			Lower: &airlock.MountSpec{Type: airlock.MountRealFS, HostPath: lower}}}}, lower
	}},
	{"real_fs", func(t *testing.T, dir string) (airlock.VFSConfig, string) {
		d := hostDir(t, dir, "real")
		return airlock.VFSConfig{Mounts: map[string]airlock.MountSpec{"/m": {Type: airlock.MountRealFS, HostPath: d}}}, d
	}},
	{"direct", func(t *testing.T, dir string) (airlock.VFSConfig, string) {
		d := hostDir(t, dir, "direct")
		return airlock.VFSConfig{DirectMounts: map[string]airlock.DirectMount{"/m": {HostPath: d}}}, d
	}},
}

// hostDir makes a directory that the sandbox's root may write.
func hostDir(t *testing.T, dir, name string) string {
	t.Helper()
	d := dir + "/" + name
	if err := os.MkdirAll(d, 0o777); err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o755)
	os.Chmod(d, 0o777)
	return d
}
