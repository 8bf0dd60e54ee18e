package pjdfs_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
)

// knownFailuresDir holds, for each place the suite runs in a sandbox
// (see targets), the checks that fail there and pass on the host's
// tmpfs, by test file, with the reasons in its header:
// knownFailuresDir/<name>.txt. The test asserts exactly these lists: a
// new failure is a regression, and a check that starts to pass must
// leave its list (and the README's account of it).
const knownFailuresDir = "testdata/known-failures"

// knownFailuresFile is the list of the target called name.
func knownFailuresFile(name string) string { return path.Join(knownFailuresDir, name+".txt") }

// listFor names the list of known failures of target name at level lv:
// the level's own (LEVEL-NAME.txt) where the level differs, the
// target's otherwise.
func listFor(lv airlock.Isolation, name string) string {
	own := string(lv) + "-" + name
	if _, err := os.Stat(knownFailuresFile(own)); err == nil {
		return own
	}
	return name
}

// knownFailures reads the list of the target called name: test file ->
// failing checks.
func knownFailures(t *testing.T, name string) map[string][]string {
	t.Helper()
	file := knownFailuresFile(name)
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		test, checks, ok := strings.Cut(l, "\t")
		if !ok {
			t.Fatalf("%s: line %q is not FILE<tab>CHECKS", file, l)
		}
		if _, dup := out[test]; dup {
			t.Fatalf("%s: %s is listed twice", file, test)
		}
		out[test] = expand(checks)
	}
	return out
}

// What a run covers. The whole suite is 8,798 checks, each starting
// a few processes, which on the 2-core machines this project is built
// on costs about 320 s of CPU per run, host and sandbox each: more than
// a CI run can spend on it, let alone once per mount. So the normal run
// covers, on the sandbox's root and in the memory mount, the
// operations a provider and the FUSE layer carry out themselves
// (mountDirs: 1,928 checks, a fifth of the suite); in the real_fs and
// overlay mounts, a part of those (providerDirs); and in the direct
// mount, a bind mount of a host directory whose operations are the
// host kernel's, the parts that its id mapping decides (directDirs);
// -short runs open/ only; AIRLOCK_PJDFSTEST=all runs everything
// everywhere, and AIRLOCK_PJDFSTEST=DIR,DIR... those parts everywhere.
// The host's reference run covers the root's parts, and is kept for
// the next run (see hostReference).
var (
	shortDirs = []string{"open"}
	// gvisorDirs are the parts the gvisor level runs, unless
	// AIRLOCK_PJDFSTEST says otherwise: the Sentry runs the suite's
	// thousands of small processes about ten times slower than Linux
	// (the mounts' whole part took 17 minutes there).
	gvisorDirs = []string{"link", "mkfifo", "open"}
	mountDirs  = []string{"chmod", "chown/07.t", "ftruncate", "link", "mkdir", "mkfifo", "open", "rmdir", "symlink", "truncate", "utimensat"}
	directDirs = []string{"chmod", "chown/07.t", "open"}
	// providerDirs are the parts the real_fs and overlay mounts run:
	// the FUSE layer is the memory mount's, which runs all of
	// mountDirs, and what differs is the provider's own work on names,
	// modes and links.
	providerDirs = []string{"chmod", "chown/07.t", "link", "open", "symlink"}
)

// runDirs are the parts of the suite this run covers on the sandbox's
// root, and on its mounts ("" is all).
func runDirs() (root, mounts []string) {
	switch env := os.Getenv("AIRLOCK_PJDFSTEST"); {
	case env == "all":
		return []string{""}, []string{""}
	case env != "":
		dirs := strings.Split(env, ",")
		return dirs, dirs
	case testing.Short():
		return shortDirs, shortDirs
	}
	return mountDirs, mountDirs
}

// jobs is how many test files each run (the host's, a sandbox's) has
// prove run at once. A file's checks run one after the other, each
// starting a few processes, and many wait a second for a clock to
// move: more files at once than cores keep the cores busy.
const jobs = 4

// target is a place in the sandbox where the suite runs.
type target struct {
	// name names the target's list of known failures.
	name string
	// dir is the directory the suite runs in, made by the run.
	dir string
	// mount says what is mounted there, for the log.
	mount string
	// fuse: the mount is a programmable one, a FUSE file system.
	fuse bool
}

// dirs are the parts of the suite that run on tg.
func (tg target) dirs(root, mounts []string) []string {
	switch {
	case tg.name == "root":
		return root
	case tg.name == "direct" && slices.Equal(mounts, mountDirs):
		return directDirs
	case (tg.name == "real_fs" || tg.name == "overlay") && slices.Equal(mounts, mountDirs):
		return providerDirs
	}
	return mounts
}

// targets are the places in the sandbox where the suite runs: the
// sandbox's own root, for reference, and a mount of each kind (see
// sandboxConfig).
var targets = []target{
	{name: "root", dir: "/root/pjdfs", mount: "the sandbox's own root"},
	{name: "memory", dir: "/mnt/memory/pjdfs", mount: "a memory mount", fuse: true},
	{name: "real_fs", dir: "/mnt/real_fs/pjdfs", mount: "a real_fs mount of a host directory", fuse: true},
	{name: "overlay", dir: "/mnt/overlay/pjdfs", mount: "an overlay mount, memory over real_fs", fuse: true},
	{name: "direct", dir: "/mnt/direct/pjdfs", mount: "a direct mount of a host tmpfs's directory"},
}

// sandboxConfig is the configuration of the sandbox the suite runs in,
// with the mounts of targets (the programmable ones only if fuse), and
// the targets it has. The host directories are the test's.
func sandboxConfig(t *testing.T, lv airlock.Isolation, fuse bool) (airlock.Config, []target) {
	t.Helper()
	hostDir := func() string {
		d := t.TempDir()
		// As a tmpfs's root is: the suite's checks as other users
		// look up names in it.
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	// The direct mount's directory is on a tmpfs, as the reference's
	// is: which checks pjdfstest runs depends on the file system's type
	// (on ext4 it also checks that rename changes a file's ctime, for
	// example), and a bind mount shows the host's.
	directDir := filepath.Join(hostTmpfs(t), "direct")
	// The sandbox's root writes a direct mount as one of the sandbox's
	// unprivileged ids of the host: the directory is open to all, as
	// a host directory a sandbox is to write must be.
	if err := os.Mkdir(directDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(directDir, 0o777); err != nil {
		t.Fatal(err)
	}
	cfg := airlock.Config{
		Isolation: lv,
		VFS: airlock.VFSConfig{
			DirectMounts: map[string]airlock.DirectMount{"/mnt/direct": {HostPath: directDir}},
		},
	}
	if !fuse {
		return cfg, slices.DeleteFunc(slices.Clone(targets), func(tg target) bool { return tg.fuse })
	}
	cfg.VFS.Mounts = map[string]airlock.MountSpec{
		"/mnt/memory":  {Type: airlock.MountMemory, SizeMB: 1024},
		"/mnt/real_fs": {Type: airlock.MountRealFS, HostPath: hostDir()},
		"/mnt/overlay": {Type: airlock.MountOverlay,
			Upper: &airlock.MountSpec{Type: airlock.MountMemory, SizeMB: 1024},
			Lower: &airlock.MountSpec{Type: airlock.MountRealFS, HostPath: hostDir()}},
	}
	return cfg, targets
}

// TestPjdfstest runs pjdfstest on a tmpfs of the host and inside a
// sandbox of each isolation level, on the sandbox's own root and in a
// mount of each kind, all at once, and compares: every check passes on
// the host, and in the sandbox every check passes but those of the
// target's list of known failures.
func TestPjdfstest(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("pjdfstest checks what root may do, and the host's reference run mounts a tmpfs: it needs root")
	}
	build := buildSuite(t, suiteSource(t))
	rootDirs, mountDirs := runDirs()
	hostDirs := rootDirs
	if slices.Contains(mountDirs, "") {
		hostDirs = mountDirs
	}
	for _, d := range mountDirs {
		if !selected(d, hostDirs) {
			t.Fatalf("the mounts' part %s is not in the host's run %v", d, hostDirs)
		}
	}
	// For every level, one after the other: the process level's runs,
	// the host's beside them, took 20 minutes on a machine where the
	// whole suite of packages runs about 1.8 times slower than on the
	// one this was first measured on, and 26 minutes on a slower day,
	// when the gvisor level's took 11 and the three did not fit in 40.
	limit := 46 * time.Minute
	if os.Getenv("AIRLOCK_PJDFSTEST") == "all" {
		limit = 3 * time.Hour
	}
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()

	// The host's run and the sandboxes' go on at once: much of the
	// suite's time is each test file's checks one after the other, so
	// runs side by side share the cores better than one after the other.
	type hostRun struct {
		r      proveResult
		out    string
		cached bool
		err    error
		took   time.Duration
	}
	mnt := hostTmpfs(t)
	done := make(chan hostRun, 1)
	go func() {
		start := time.Now()
		r, out, cached, err := hostReference(ctx, mnt, build, jobs, hostDirs)
		done <- hostRun{r, out, cached, err, time.Since(start)}
	}()
	var host hostRun
	var once sync.Once
	hostResult := func(t *testing.T) proveResult {
		t.Helper()
		once.Do(func() {
			host = <-done
			switch {
			case host.err == nil && host.cached:
				t.Logf("host tmpfs: %d files, %d checks, all passed: this build's stored run on this kernel", host.r.Files, host.r.Tests)
			case host.err == nil:
				t.Logf("host tmpfs: %d files, %d checks, %d files with failures, in %s", host.r.Files, host.r.Tests, len(host.r.Failed), host.took.Round(time.Second))
			}
		})
		switch {
		case host.err != nil:
			t.Fatalf("%v\n%s", host.err, tail(host.out, 4000))
		case len(host.r.Failed) > 0 || !host.r.Passed:
			t.Fatalf("the reference run on the host's tmpfs fails (%v); the suite or this machine is broken:\n%s", host.r.Failed, tail(host.out, 8000))
		}
		return host.r
	}
	defer hostResult(t)

	eachLevel(t, func(t *testing.T, lv airlock.Isolation) {
		_, err := os.Stat("/dev/fuse")
		if err != nil {
			t.Logf("only the sandbox's root and a direct mount: the programmable mounts are FUSE file systems, and this host has no /dev/fuse (%v)", err)
		}
		cfg, targets := sandboxConfig(t, lv, err == nil)
		// A VM whose CPU is emulated runs the suite's thousands of
		// small processes tens of times slower: there, unless
		// AIRLOCK_PJDFSTEST says otherwise, the short part of the mounts'
		// list, on the sandbox's own root and a memory mount, with two
		// CPUs.
		rootDirs, mountDirs := rootDirs, mountDirs
		if lv == airlock.IsolationVM && os.Getenv("AIRLOCK_PJDFSTEST") == "" {
			rootDirs, mountDirs = shortDirs, shortDirs
			targets = slices.DeleteFunc(slices.Clone(targets), func(tg target) bool { return tg.name != "root" && tg.name != "memory" })
			cfg.Resources.CPUs = 2
		}
		if lv == airlock.IsolationGVisor && os.Getenv("AIRLOCK_PJDFSTEST") == "" {
			rootDirs, mountDirs = gvisorDirs, gvisorDirs
			targets = slices.DeleteFunc(slices.Clone(targets), func(tg target) bool { return tg.name != "root" && tg.name != "memory" })
		}
		sb, suite := newSandbox(ctx, t, cfg, build)
		// Every target's run goes on at once, whatever -parallel says.
		type run struct {
			r    proveResult
			out  string
			err  error
			took time.Duration
		}
		runs := make([]chan run, len(targets))
		for i, tg := range targets {
			runs[i] = make(chan run, 1)
			go func() {
				start := time.Now()
				r, out, err := runSandbox(ctx, sb, suite, tg.dir, tg.dirs(rootDirs, mountDirs))
				runs[i] <- run{r, out, err, time.Since(start)}
			}()
		}
		results := map[string]proveResult{}
		for i, tg := range targets {
			t.Run(tg.name, func(t *testing.T) {
				list := listFor(lv, tg.name)
				known := knownFailures(t, list)
				dirs := tg.dirs(rootDirs, mountDirs)
				res := <-runs[i]
				if res.err != nil {
					t.Fatalf("%v\n%s", res.err, tail(res.out, 4000))
				}
				got := res.r
				results[tg.name] = got
				n := 0
				for _, c := range got.Failed {
					n += len(c)
				}
				t.Logf("%s sandbox, %s (%s): %d files, %d checks, %d failed in %d files, in %s",
					lv, tg.mount, tg.dir, got.Files, got.Tests, n, len(got.Failed), res.took.Round(time.Second))
				if slices.Equal(dirs, hostDirs) {
					host := hostResult(t)
					if got.Files != host.Files || got.Tests != host.Tests {
						t.Errorf("the sandbox ran %d files and %d checks in %s, the host %d and %d", got.Files, got.Tests, tg.dir, host.Files, host.Tests)
					}
				}
				file := knownFailuresFile(list)
				want := map[string][]string{}
				for test, checks := range known {
					if selected(test, dirs) {
						want[test] = checks
					}
				}
				for _, test := range slices.Sorted(maps.Keys(got.Failed)) {
					if w, ok := want[test]; !ok || !slices.Equal(w, got.Failed[test]) {
						t.Errorf("%s: checks %v fail in %s, want %v (%s)", test, got.Failed[test], tg.dir, w, file)
					}
				}
				for _, test := range slices.Sorted(maps.Keys(want)) {
					if _, ok := got.Failed[test]; !ok {
						t.Errorf("%s: every check passes in %s, but %v are listed as failing: take it off %s and the README", test, tg.dir, want[test], file)
					}
				}
				if t.Failed() {
					t.Logf("the failures in %s, as %s lists them:\n%s", tg.dir, file, formatFailures(got.Failed))
					t.Logf("prove in %s:\n%s", tg.dir, tail(res.out, 16000))
				}
			})
		}
		// The mounts' runs of the same parts all ran the same checks.
		var ref *target
		for _, tg := range targets {
			r, ok := results[tg.name]
			if !ok || tg.name == "root" || ref != nil && !slices.Equal(tg.dirs(rootDirs, mountDirs), ref.dirs(rootDirs, mountDirs)) {
				continue
			}
			if ref == nil {
				ref = &tg
				continue
			}
			if rr := results[ref.name]; r.Files != rr.Files || r.Tests != rr.Tests {
				t.Errorf("%s ran %d files and %d checks, %s %d and %d", tg.dir, r.Files, r.Tests, ref.dir, rr.Files, rr.Tests)
			}
		}
	})
}

// selected says whether test file (below tests/) is in one of dirs ("" is
// every one), or is one of them.
func selected(file string, dirs []string) bool {
	for _, d := range dirs {
		if d == "" || d == file || strings.HasPrefix(file, d+"/") {
			return true
		}
	}
	return false
}

// newSandbox starts a sandbox of cfg and copies the build into it,
// under /root on its own writable root (with WriteFile); it returns the
// sandbox and where the build is.
func newSandbox(ctx context.Context, t *testing.T, cfg airlock.Config, build string) (*airlock.Sandbox, string) {
	t.Helper()
	sb, err := airlock.Create(ctx, cfg)
	if err != nil {
		t.Fatalf("create a %s sandbox: %v", cfg.Isolation, err)
	}
	t.Cleanup(func() { sb.Close() })
	const dest = "/root/pjdfstest"
	files, err := suiteFiles(build)
	if err != nil {
		t.Fatal(err)
	}
	made := map[string]bool{}
	for _, f := range files {
		p := path.Join(dest, filepath.ToSlash(f))
		if dir := path.Dir(p); !made[dir] {
			if err := sb.Mkdir(ctx, dir, 0o755, true); err != nil && !errors.Is(err, os.ErrExist) {
				t.Fatal(err)
			}
			made[dir] = true
		}
		data, err := os.ReadFile(filepath.Join(build, f))
		if err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(filepath.Join(build, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := sb.WriteFile(ctx, p, data, fi.Mode().Perm()); err != nil {
			t.Fatalf("copy %s into the sandbox: %v", f, err)
		}
	}
	return sb, dest
}

// runSandbox runs prove in sb, as root, in dir (made 0755 first), on
// the parts dirs of the suite at suite. It may run on a goroutine of
// its own.
func runSandbox(ctx context.Context, sb *airlock.Sandbox, suite, dir string, dirs []string) (proveResult, string, error) {
	cmd := []string{"prove", "-j" + strconv.Itoa(jobs), "-r"}
	for _, d := range dirs {
		cmd = append(cmd, path.Join(suite, "tests", d))
	}
	res, err := sb.Run(ctx, airlock.Command{
		Shell: fmt.Sprintf("mkdir -m 0755 %s && cd %s && exec %s", dir, dir, strings.Join(cmd, " ")),
		User:  "root",
	})
	if err != nil {
		return proveResult{}, "", fmt.Errorf("prove in %s: %w", dir, err)
	}
	out := string(res.Stdout) + string(res.Stderr)
	r, err := parseProve(out)
	if err != nil {
		return r, out, fmt.Errorf("prove in %s (exit %d, killed by %q): %w", dir, res.ExitCode, res.KilledBy, err)
	}
	return r, out, nil
}

// formatFailures writes failures as a list of known failures has them.
func formatFailures(failed map[string][]string) string {
	var b strings.Builder
	for _, test := range slices.Sorted(maps.Keys(failed)) {
		fmt.Fprintf(&b, "%s\t%s\n", test, compact(failed[test]))
	}
	return b.String()
}

// compact turns "1", "2", "3", "7" into "1-3, 7", as expand reads it.
func compact(checks []string) string {
	var parts []string
	for i := 0; i < len(checks); {
		a, err := strconv.Atoi(checks[i])
		if err != nil {
			parts = append(parts, checks[i])
			i++
			continue
		}
		j := i + 1
		for j < len(checks) {
			if n, err := strconv.Atoi(checks[j]); err != nil || n != a+(j-i) {
				break
			}
			j++
		}
		if j-i > 1 {
			parts = append(parts, fmt.Sprintf("%d-%d", a, a+j-i-1))
		} else {
			parts = append(parts, checks[i])
		}
		i = j
	}
	return strings.Join(parts, ", ")
}

// levels are the isolation levels the suite runs over, strongest last.
var levels = []airlock.Isolation{airlock.IsolationProcess, airlock.IsolationGVisor, airlock.IsolationVM}

// eachLevel runs f as a subtest for every isolation level that works
// here; a level that does not is skipped with airlock's reason, and so
// is one whose sandboxes cannot have FUSE mounts.
func eachLevel(t *testing.T, f func(t *testing.T, lv airlock.Isolation)) {
	t.Helper()
	for _, lv := range levels {
		t.Run(string(lv), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			sb, err := airlock.Create(ctx, airlock.Config{Isolation: lv})
			switch {
			case errors.Is(err, airlock.ErrUnavailable):
				t.Skip(err)
			case err != nil:
				t.Fatalf("create a %s sandbox: %v", lv, err)
			}
			sb.Close()
			f(t, lv)
		})
	}
}

// TestParseProve reads prove's summary as it prints it, wrapped lists
// and broken plans included.
func TestParseProve(t *testing.T) {
	out := `tests/a/00.t .. ok
tests/b/01.t .. Failed 9/40 subtests

Test Summary Report
-------------------
/x/tests/b/01.t (Wstat: 0 Tests: 40 Failed: 9)
  Failed tests:  1-3, 7, 9-10
                12, 30
tests/c/02.t    (Wstat: 256 (exited 1) Tests: 5 Failed: 0)
  Non-zero exit status: 1
  Parse errors: Bad plan.  You planned 10 tests but ran 5.
Files=3, Tests=55,  1 wallclock secs ( 0.01 usr  0.01 sys +  0.10 cusr  0.20 csys =  0.32 CPU)
Result: FAIL
`
	r, err := parseProve(out)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{"b/01.t": {"1", "2", "3", "7", "9", "10", "12", "30"}, "c/02.t": {"exit", "plan"}}
	if r.Files != 3 || r.Tests != 55 || r.Passed || !maps.EqualFunc(r.Failed, want, slices.Equal) {
		t.Errorf("parsed %+v, want 3 files, 55 tests, failures %v", r, want)
	}
	if _, err := parseProve("tests/a/00.t .. ok\n"); err == nil {
		t.Error("output without totals parsed")
	}
}

// TestKnownFailuresFiles reads the lists the suite is held to: every
// target has one, and every line names a test file and at least one
// check.
func TestKnownFailuresFiles(t *testing.T) {
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) { checkKnownFailures(t, tg.name) })
		for _, lv := range levels {
			if list := listFor(lv, tg.name); list != tg.name {
				t.Run(list, func(t *testing.T) { checkKnownFailures(t, list) })
			}
		}
	}
}

// checkKnownFailures checks the form of list name.
func checkKnownFailures(t *testing.T, name string) {
	file := knownFailuresFile(name)
	known := knownFailures(t, name)
	if len(known) == 0 {
		t.Errorf("%s lists nothing: the device nodes' checks fail everywhere in a sandbox", file)
	}
	for test, checks := range known {
		if !strings.HasSuffix(test, ".t") || len(checks) == 0 {
			t.Errorf("%s: %q: %v", file, test, checks)
		}
		for _, c := range checks {
			if c == "" || strings.Trim(c, "0123456789") != "" {
				t.Errorf("%s: %s: check %q is not a number", file, test, c)
			}
		}
		if got := expand(compact(checks)); !slices.Equal(got, checks) {
			t.Errorf("%s: %s: %v, written and read back, is %v", file, test, checks, got)
		}
	}
}
