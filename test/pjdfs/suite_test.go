package pjdfs_test

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// suiteSource finds the suite's source tree.
func suiteSource(t *testing.T) string {
	t.Helper()
	if dir := os.Getenv("AIRLOCK_PJDFSTEST_SRC"); dir != "" {
		return dir
	}
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for d := wd; ; d = filepath.Dir(d) {
		p := filepath.Join(d, "shared", "testsuites", "pjdfstest")
		if fi, err := os.Stat(filepath.Join(p, "pjdfstest.c")); err == nil && fi.Mode().IsRegular() {
			return p
		}
		if d == filepath.Dir(d) {
			break
		}
	}
	t.Skip("no pjdfstest source: set AIRLOCK_PJDFSTEST_SRC, or keep shared/testsuites/pjdfstest beside the module")
	return ""
}

// treeHash is a digest of the names, modes and contents of the regular
// files under dir.
func treeHash(dir string) (string, error) {
	h := sha256.New()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		fmt.Fprintf(h, "%s\x00%o\x00%d\x00", rel, fi.Mode().Perm(), fi.Size())
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.Copy(h, f)
		return err
	})
	return hex.EncodeToString(h.Sum(nil))[:16], err
}

// buildSuite builds the suite from src, or finds it built: a directory
// holding the pjdfstest program and its tests/ tree. The build is kept
// in the user's cache directory, under the source's digest; it is made
// in a directory of its own and renamed into place whole, so that a
// failed or concurrent build never leaves a half one there.
func buildSuite(t *testing.T, src string) string {
	t.Helper()
	for _, tool := range []string{"autoreconf", "automake", "gcc", "make", "perl", "prove"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("building and running pjdfstest needs %s: run scripts/deps.sh (as root), or apt-get install autoconf automake gcc make perl", tool)
		}
	}
	sum, err := treeHash(src)
	if err != nil {
		t.Fatal(err)
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	parent := filepath.Join(cache, "airlock", "pjdfstest")
	final := filepath.Join(parent, sum)
	if _, err := os.Stat(filepath.Join(final, "pjdfstest")); err == nil {
		return final
	}
	if err := os.MkdirAll(parent, 0o755); err != nil {
		t.Fatal(err)
	}
	work, err := os.MkdirTemp(parent, "build-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(work)
	if err := os.CopyFS(work, os.DirFS(src)); err != nil {
		t.Fatalf("copy the pjdfstest source: %v", err)
	}
	for _, step := range [][]string{{"autoreconf", "-ifs"}, {"./configure"}, {"make", "pjdfstest"}} {
		cmd := exec.Command(step[0], step[1:]...)
		cmd.Dir = work
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("build pjdfstest: %s: %v\n%s", strings.Join(step, " "), err, tail(string(out), 4000))
		}
	}
	if err := os.Chmod(work, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(work, final); err != nil {
		if _, serr := os.Stat(filepath.Join(final, "pjdfstest")); serr != nil {
			t.Fatalf("keep the pjdfstest build: %v", err)
		}
		// Another run built it meanwhile.
	}
	return final
}

// suiteFiles lists what a run needs of a build, relative to it: the
// program, and the tests' scripts and configuration.
func suiteFiles(build string) ([]string, error) {
	files := []string{"pjdfstest"}
	err := filepath.WalkDir(filepath.Join(build, "tests"), func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		rel, _ := filepath.Rel(build, p)
		files = append(files, rel)
		return nil
	})
	return files, err
}

// proveResult is what prove said of a run.
type proveResult struct {
	Files, Tests int
	// Failed holds, by test file (relative to tests/, such as
	// "chown/00.t"), the numbers of its checks that failed, with
	// "plan" for a file whose plan was broken (it ended early) and
	// "exit" for one that exited non-zero.
	Failed map[string][]string
	Passed bool
}

var (
	summaryLine = regexp.MustCompile(`^Files=(\d+), Tests=(\d+),`)
	reportFile  = regexp.MustCompile(`^(\S+\.t)\s+\(Wstat: `)
	listLine    = regexp.MustCompile(`^\s+(Failed tests|TODO passed|Parse errors|Non-zero exit status|Non-zero wait status):\s*(.*)$`)
	numbers     = regexp.MustCompile(`^\s*[0-9][0-9, -]*$`)
)

// parseProve reads prove's output: the totals, and its summary report
// of failures.
func parseProve(out string) (proveResult, error) {
	r := proveResult{Failed: map[string][]string{}}
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	inReport, file, key := false, "", ""
	sawTotals := false
	for sc.Scan() {
		l := sc.Text()
		switch {
		case l == "Test Summary Report":
			inReport = true
			continue
		case summaryLine.MatchString(l):
			m := summaryLine.FindStringSubmatch(l)
			r.Files, _ = strconv.Atoi(m[1])
			r.Tests, _ = strconv.Atoi(m[2])
			sawTotals, inReport = true, false
			continue
		case l == "Result: PASS":
			r.Passed = true
		}
		if !inReport {
			continue
		}
		if m := reportFile.FindStringSubmatch(l); m != nil {
			file, key = testName(m[1]), ""
			continue
		}
		if m := listLine.FindStringSubmatch(l); m != nil && file != "" {
			key = m[1]
			switch key {
			case "Failed tests":
				r.Failed[file] = append(r.Failed[file], expand(m[2])...)
			case "Parse errors":
				r.Failed[file] = append(r.Failed[file], "plan")
			case "Non-zero exit status", "Non-zero wait status":
				r.Failed[file] = append(r.Failed[file], "exit")
			}
			continue
		}
		if key == "Failed tests" && numbers.MatchString(l) {
			r.Failed[file] = append(r.Failed[file], expand(l)...)
		}
	}
	if !sawTotals {
		return r, errors.New("prove printed no totals")
	}
	for f, v := range r.Failed {
		r.Failed[f] = slices.Compact(v)
	}
	return r, nil
}

// testName is a test file's name below tests/.
func testName(p string) string {
	if i := strings.LastIndex(p, "tests/"); i >= 0 {
		return p[i+len("tests/"):]
	}
	return p
}

// expand turns "1-3, 7" into "1", "2", "3", "7".
func expand(list string) []string {
	var out []string
	for _, part := range strings.Split(list, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		lo, hi, isRange := strings.Cut(part, "-")
		a, err1 := strconv.Atoi(lo)
		b, err2 := strconv.Atoi(hi)
		if !isRange || err1 != nil || err2 != nil || b < a {
			out = append(out, part)
			continue
		}
		for n := a; n <= b; n++ {
			out = append(out, strconv.Itoa(n))
		}
	}
	return out
}

// runHost runs the tests in mnt, a tmpfs of the host mounted for the
// purpose, as root of the host. It may run on a goroutine of its own.
func runHost(ctx context.Context, mnt, build string, jobs int, dirs []string) (proveResult, string, error) {
	args := []string{"-j" + strconv.Itoa(jobs), "-r"}
	for _, d := range dirs {
		args = append(args, filepath.Join(build, "tests", d))
	}
	cmd := exec.CommandContext(ctx, "prove", args...)
	cmd.Dir = mnt
	out, _ := cmd.CombinedOutput() // prove exits 1 when a test fails
	r, err := parseProve(string(out))
	if err != nil {
		return r, string(out), fmt.Errorf("prove on the host: %w", err)
	}
	return r, string(out), nil
}

// hostReference is the host's run on a tmpfs, from build's store of
// passing runs when it holds one for this kernel and these parts of the
// suite: which checks run, and that they pass, depends only on the
// suite (build is named by its source's digest), the kernel and the
// file system. A run that fails is never stored, so it runs again.
func hostReference(ctx context.Context, mnt, build string, jobs int, dirs []string) (r proveResult, out string, cached bool, err error) {
	release, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		return r, "", false, fmt.Errorf("read the kernel's release: %w", err)
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00tmpfs mode=0755,size=1g", strings.TrimSpace(string(release)), strings.Join(dirs, ","))
	store := filepath.Join(build, "reference", hex.EncodeToString(h.Sum(nil))[:16]+".txt")
	if b, err := os.ReadFile(store); err == nil {
		if r, err := parseProve(string(b)); err == nil && r.Passed && len(r.Failed) == 0 {
			return r, string(b), true, nil
		}
	}
	r, out, err = runHost(ctx, mnt, build, jobs, dirs)
	if err != nil || !r.Passed || len(r.Failed) > 0 {
		return r, out, false, err
	}
	if err := os.MkdirAll(filepath.Dir(store), 0o755); err == nil {
		tmp := store + ".tmp" + strconv.Itoa(os.Getpid())
		if os.WriteFile(tmp, []byte(out), 0o644) == nil {
			_ = os.Rename(tmp, store)
		}
	}
	return r, out, false, nil
}

// hostTmpfs mounts a tmpfs for the host's run, unmounted when the test
// ends.
func hostTmpfs(t *testing.T) string {
	t.Helper()
	mnt := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "mode=0755,size=1g", "pjdfs", mnt).CombinedOutput(); err != nil {
		t.Fatalf("mount a tmpfs for the host's run: %v\n%s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", mnt).Run() })
	return mnt
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "...\n" + s[len(s)-n:]
}
