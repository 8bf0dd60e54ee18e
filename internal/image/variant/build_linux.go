//go:build linux

package variant

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/internal/image/store"
)

// hostPath is the PATH mmdebstrap runs with: the system's own tools
// (apt, dpkg, Debian's python3 for mmtarfilter), never a user's shims
// (a pyenv python3 shim costs seconds for each of hundreds of packages).
const hostPath = "/usr/sbin:/usr/bin:/sbin:/bin"

// mergedUsrHooks sets up /bin, /sbin and /lib as links into /usr before
// any package is unpacked, as Debian does since bookworm, so that the
// usrmerge package (and the Perl it needs, 47 MB) is not installed to
// convert the tree afterwards.
const mergedUsrHooks = "/usr/share/mmdebstrap/hooks/merged-usr"

// stripped are the dpkg path filters kept in the image
// (/etc/dpkg/dpkg.cfg.d/99mmdebstrap), so that packages installed later
// inside a sandbox are stripped as well: docs but their copyright
// files, man and info pages, translations.
var stripped = []string{
	"path-exclude=/usr/share/doc/*",
	"path-include=/usr/share/doc/*/copyright",
	"path-exclude=/usr/share/man/*",
	"path-exclude=/usr/share/info/*",
	"path-exclude=/usr/share/groff/*",
	"path-exclude=/usr/share/lintian/*",
	"path-exclude=/usr/share/linda/*",
	"path-exclude=/usr/share/locale/*",
	"path-include=/usr/share/locale/locale.alias",
}

// customize runs (as sh, $1 the root) once every package is installed:
// what the host lent the build (its resolver and name) goes, as do the
// backups dpkg and debconf keep, and the links dpkg leaves in
// /usr/share/doc to docs it did not unpack. mmdebstrap removes apt's
// lists and caches, logs and /tmp itself afterwards.
const customize = `rm -f "$1/etc/resolv.conf" "$1/etc/hostname" "$1"/var/cache/debconf/*-old "$1"/var/lib/dpkg/*-old && ` +
	`chroot "$1" find /usr/share/doc -xtype l -delete`

// fill builds v's root tree into dir/rootfs with mmdebstrap.
func (b *Builder) fill(ctx context.Context, v Variant, dir string, t *throttle) error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("building image variants needs root, for mmdebstrap to give the image's files the owners their packages say: run `sudo airlock image build %s`", v.Name)
	}
	bin, err := lookHostPath("mmdebstrap")
	if err != nil {
		return errors.New("building image variants needs mmdebstrap (Debian, Ubuntu: apt-get install mmdebstrap)")
	}
	root := filepath.Join(dir, "rootfs")
	if err := os.Mkdir(root, 0o755); err != nil {
		return err
	}
	args := []string{
		"--verbose",
		// As root, unshare mode keeps the build's mounts (/proc, /sys,
		// /dev) in a mount namespace of its own, and its processes in a
		// PID namespace of their own: a build killed half-way leaves
		// neither behind.
		"--mode=unshare",
		"--format=directory",
		"--variant=apt",
		"--architectures=" + b.Source.Arch,
		"--include=" + strings.Join(v.Packages, ","),
		`--aptopt=Acquire::Languages "none"`,
		"--dpkgopt=force-unsafe-io",
		"--customize-hook=" + customize,
	}
	if fi, err := os.Stat(mergedUsrHooks); err == nil && fi.IsDir() {
		args = append(args, "--hook-dir="+mergedUsrHooks)
	}
	for _, f := range stripped {
		args = append(args, "--dpkgopt="+f)
	}
	args = append(args, "--", b.Source.Suite, root)
	args = append(args, b.Source.lines()...)

	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Env = buildEnv(dir)
	// Its own process group, so that a cancel reaches apt, dpkg and the
	// maintainer scripts as well as mmdebstrap; and gone with us.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	pr, pw, err := os.Pipe()
	if err != nil {
		return err
	}
	defer pr.Close()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		pw.Close()
		return fmt.Errorf("start mmdebstrap: %w", err)
	}
	pw.Close()
	pgid := cmd.Process.Pid

	p := &progressParser{image: v.Name}
	tail := &lineTail{max: 30}
	read := make(chan struct{})
	go func() {
		defer close(read)
		eachLine(pr, func(line string) {
			b.log().Debug("mmdebstrap", "image", v.Name, "line", line)
			tail.add(line)
			if r, ok := p.line(line); ok {
				t.send(r)
			}
		})
	}()
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	var werr error
	select {
	case werr = <-waited:
	case <-ctx.Done():
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-waited
	}
	// Nothing of the group may still write into dir when it goes.
	killGroup(pgid)
	select {
	case <-read:
	case <-time.After(5 * time.Second):
		pr.Close()
		<-read
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if werr != nil {
		return fmt.Errorf("mmdebstrap failed (%v); its last lines:\n%s", werr, tail.String())
	}
	t.send(store.Progress{Image: v.Name, Step: StepStrip})
	return stripDev(root)
}

// lines are the apt sources of s, one-line style, for mmdebstrap.
func (s Source) lines() []string {
	out := []string{
		fmt.Sprintf("deb %s %s main", s.Mirror, s.Suite),
		fmt.Sprintf("deb %s %s-updates main", s.Mirror, s.Suite),
	}
	if s.SecurityMirror != "" {
		out = append(out, fmt.Sprintf("deb %s %s-security main", s.SecurityMirror, s.Suite))
	}
	return out
}

// lookHostPath finds a system tool on hostPath.
func lookHostPath(name string) (string, error) {
	for _, d := range filepath.SplitList(hostPath) {
		p := filepath.Join(d, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", exec.ErrNotFound
}

// buildEnv is mmdebstrap's environment: the system's PATH, a C locale,
// temporary files in the build's own folder (gone with it), and the
// caller's proxy settings.
func buildEnv(dir string) []string {
	env := []string{"PATH=" + hostPath, "LC_ALL=C.UTF-8", "TMPDIR=" + dir}
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch strings.ToLower(k) {
		case "home", "http_proxy", "https_proxy", "no_proxy", "ftp_proxy", "all_proxy":
			env = append(env, kv)
		}
	}
	return env
}

// killGroup kills what is left of process group pgid and waits, up to
// ten seconds, until none of it is left.
func killGroup(pgid int) {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if err := syscall.Kill(-pgid, syscall.SIGKILL); errors.Is(err, syscall.ESRCH) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stripDev empties the image's /dev: a sandbox gets a /dev of its own,
// and device nodes have no place in an image.
func stripDev(root string) error {
	dev := filepath.Join(root, "dev")
	fi, err := os.Lstat(dev)
	if errors.Is(err, os.ErrNotExist) {
		return os.Mkdir(dev, 0o755)
	}
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("the image's /dev is not a directory")
	}
	ents, err := os.ReadDir(dev)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if err := store.RemoveTree(filepath.Join(dev, e.Name())); err != nil {
			return fmt.Errorf("strip the image's /dev: %w", err)
		}
	}
	return nil
}

// maxLine bounds a line of mmdebstrap's output that is kept or parsed.
const maxLine = 4096

// eachLine calls fn with each line read from r, cut to maxLine bytes,
// until r ends.
func eachLine(r io.Reader, fn func(string)) {
	br := bufio.NewReaderSize(r, maxLine)
	var long []byte
	for {
		frag, isPrefix, err := br.ReadLine()
		if len(frag) > 0 || (err == nil && !isPrefix) {
			if len(long) < maxLine {
				long = append(long, frag[:min(len(frag), maxLine-len(long))]...)
			}
			if !isPrefix {
				fn(string(long))
				long = long[:0]
			}
		}
		if err != nil {
			if len(long) > 0 {
				fn(string(long))
			}
			return
		}
	}
}

// lineTail keeps the last max lines, for an error message.
type lineTail struct {
	max   int
	lines []string
}

func (t *lineTail) add(s string) {
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	t.lines = append(t.lines, s)
	if len(t.lines) > t.max {
		t.lines = t.lines[len(t.lines)-t.max:]
	}
}

func (t *lineTail) String() string { return strings.Join(t.lines, "\n") }
