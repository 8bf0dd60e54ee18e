package airlock_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/policy"
	"github.com/airlock-sandbox/airlock/vfs"
)

// needFUSE skips where programmable mounts cannot work: no FUSE device,
// or no way to give one to a sandbox.
func needFUSE(t *testing.T) {
	t.Helper()
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skip("no /dev/fuse here")
	}
	if os.Getuid() != 0 {
		if f, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0); err != nil {
			t.Skipf("this user cannot open /dev/fuse: %v", err)
		} else {
			f.Close()
		}
	}
}

// events collects a sandbox's file events.
type events struct {
	mu   sync.Mutex
	list []airlock.FileEvent
}

func (e *events) on(ev airlock.Event) {
	if ev.File == nil {
		return
	}
	e.mu.Lock()
	e.list = append(e.list, *ev.File)
	e.mu.Unlock()
}

func (e *events) find(match func(airlock.FileEvent) bool) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, f := range e.list {
		if match(f) {
			return true
		}
	}
	return false
}

// waitEvent waits for an event that matches.
func (e *events) wait(t *testing.T, what string, match func(airlock.FileEvent) bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !e.find(match) {
		if time.Now().After(deadline) {
			e.mu.Lock()
			t.Errorf("no file event %s among %+v", what, e.list)
			e.mu.Unlock()
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// The seed's own usage: a memory mount at /workspace, written and read
// by commands and by the file API, with events.
func TestVFSMemoryMount(t *testing.T) {
	needFUSE(t)
	t.Parallel()
	ctx := testCtx(t, 90*time.Second)
	var ev events
	sb := newSandbox(t, airlock.Config{
		VFS:     airlock.VFSConfig{Mounts: map[string]airlock.MountSpec{"/workspace": {Type: airlock.MountMemory}}},
		OnEvent: ev.on,
	})
	if err := sb.WriteFile(ctx, "/workspace/hello.py", []byte("print('hello from the mount')\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out := mustRun(t, ctx, sb, "python3 /workspace/hello.py"); out != "hello from the mount\n" {
		t.Errorf("output %q", out)
	}
	// The mount is a FUSE file system, not the sandbox's own tree.
	if out := mustRun(t, ctx, sb, "stat -f -c %T /workspace; grep ' /workspace ' /proc/mounts | cut -d' ' -f3"); !strings.Contains(out, "fuse") {
		t.Errorf("/workspace is not a FUSE mount: %q", out)
	}
	mustRun(t, ctx, sb, "cd /workspace && echo data > out.txt && mkdir -p d/e && mv out.txt d/e/ && ln -s d/e/out.txt l")
	got, err := sb.ReadFile(ctx, "/workspace/l")
	if err != nil || string(got) != "data\n" {
		t.Fatalf("read through the mount: %q %v", got, err)
	}
	list, err := sb.ListFiles(ctx, "/workspace")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range list {
		names = append(names, f.Name)
	}
	if strings.Join(names, ",") != "d,hello.py,l" {
		t.Errorf("listing %v", names)
	}
	ev.wait(t, "write of hello.py", func(f airlock.FileEvent) bool { return f.Path == "/workspace/hello.py" && f.Op == "write" })
	ev.wait(t, "rename of out.txt", func(f airlock.FileEvent) bool {
		return f.Op == "rename" && f.Path == "/workspace/out.txt" && f.To == "/workspace/d/e/out.txt"
	})
	ev.wait(t, "mkdir of d", func(f airlock.FileEvent) bool { return f.Op == "mkdir" && f.Path == "/workspace/d" })
}

// Go providers: the embed API's own, changed from the host while the
// sandbox runs, and seen at once; hooks refuse with an errno.
func TestVFSGoProvidersAndHooks(t *testing.T) {
	needFUSE(t)
	t.Parallel()
	ctx := testCtx(t, 90*time.Second)
	mem := vfs.NewMemory(vfs.MemoryOptions{})
	var ev events
	sb := newSandbox(t, airlock.Config{
		VFS: airlock.VFSConfig{
			Providers: map[string]vfs.Provider{"/data": mem},
			Hooks: vfs.Hooks{
				BeforeOpen: func(_ context.Context, p string, flags int) error {
					if strings.HasSuffix(p, ".secret") {
						return syscall.EACCES
					}
					return nil
				},
				BeforeRemove: func(_ context.Context, p string) error {
					if p == "/data/keep" {
						return syscall.EPERM
					}
					return nil
				},
			},
		},
		OnEvent: ev.on,
	})
	put := func(p, data string) {
		t.Helper()
		h, err := mem.Create(context.Background(), p, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := h.WriteAt(context.Background(), []byte(data), 0); err != nil {
			t.Fatal(err)
		}
		h.Close()
	}
	put("/keep", "v1")
	if out := mustRun(t, ctx, sb, "cat /data/keep"); out != "v1" {
		t.Fatalf("read %q", out)
	}
	put("/keep", "version two")
	if out := mustRun(t, ctx, sb, "cat /data/keep"); out != "version two" {
		t.Errorf("a host change is not seen at once: read %q", out)
	}
	if res := run(t, ctx, sb, "rm /data/keep"); res.ExitCode == 0 {
		t.Error("the hook did not refuse the remove")
	}
	if out := mustRun(t, ctx, sb, "rm /data/keep 2>&1 || true"); !strings.Contains(out, "Operation not permitted") {
		t.Errorf("rm said %q, want EPERM", out)
	}
	if out := mustRun(t, ctx, sb, "(echo x > /data/a.secret) 2>&1 || true"); !strings.Contains(out, "Permission denied") {
		t.Errorf("create of a .secret said %q, want EACCES", out)
	}
	ev.wait(t, "blocked remove", func(f airlock.FileEvent) bool { return f.Op == "remove" && f.Path == "/data/keep" && f.Blocked })
}

// real_fs, read-only mounts, an overlay whose host directory never
// changes, nested mounts, direct mounts and blocked paths, together.
func TestVFSHostDirectories(t *testing.T) {
	needFUSE(t)
	t.Parallel()
	ctx := testCtx(t, 90*time.Second)
	host := t.TempDir()
	os.Chmod(host, 0o755)
	write := func(p, data string) {
		t.Helper()
		p = filepath.Join(host, p)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o666); err != nil {
			t.Fatal(err)
		}
	}
	write("rw/a.txt", "a")
	write("ro/b.txt", "b")
	write("base/c.txt", "c")
	write("base/.env", "SECRET=1")
	write("direct/d.txt", "d")
	write("directro/e.txt", "e")
	write("directro/.ssh/id", "key")
	for _, d := range []string{"rw", "direct"} {
		os.Chmod(filepath.Join(host, d), 0o777)
	}
	sb := newSandbox(t, airlock.Config{VFS: airlock.VFSConfig{
		Mounts: map[string]airlock.MountSpec{
			"/rw":         {Type: airlock.MountRealFS, HostPath: filepath.Join(host, "rw")},
			"/rw/inner":   {Type: airlock.MountMemory, SizeMB: 1},
			"/ro":         {Type: airlock.MountRealFS, HostPath: filepath.Join(host, "ro"), Readonly: true},
			"/work/layer": {Type: airlock.MountOverlay, Upper: &airlock.MountSpec{Type: airlock.MountMemory}, Lower: &airlock.MountSpec{Type: airlock.MountRealFS, HostPath: filepath.Join(host, "base")}},
		},
		DirectMounts: map[string]airlock.DirectMount{
			"/mnt/direct":   {HostPath: filepath.Join(host, "direct")},
			"/mnt/directro": {HostPath: filepath.Join(host, "directro"), Readonly: true},
		},
		BlockedPaths: []string{"/work/layer/.env", "/mnt/directro/.ssh", "/etc/shadow"},
	}})
	mustRun(t, ctx, sb, "echo new > /rw/new.txt && cat /rw/a.txt && echo inner > /rw/inner/x && test ! -e /rw/inner/a.txt")
	if b, err := os.ReadFile(filepath.Join(host, "rw/new.txt")); err != nil || string(b) != "new\n" {
		t.Errorf("real_fs write did not reach the host: %q %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(host, "rw/inner")); err == nil {
		t.Error("the nested memory mount wrote to the host directory beneath it")
	}
	if out := mustRun(t, ctx, sb, "cat /ro/b.txt; (echo x > /ro/b.txt) 2>&1; (echo y > /ro/new) 2>&1; true"); strings.Count(out, "Read-only file system") != 2 {
		t.Errorf("read-only real_fs: %q", out)
	}
	mustRun(t, ctx, sb, "cd /work/layer && cat c.txt && echo changed > c.txt && rm -f gone && echo n > n.txt && mkdir sub && rm c.txt && echo back > c.txt")
	if b, _ := os.ReadFile(filepath.Join(host, "base/c.txt")); string(b) != "c" {
		t.Errorf("the overlay changed its lower: c.txt is %q", b)
	}
	if _, err := os.Stat(filepath.Join(host, "base/n.txt")); err == nil {
		t.Error("the overlay wrote into its lower")
	}
	if out := mustRun(t, ctx, sb, "cat /work/layer/c.txt"); out != "back\n" {
		t.Errorf("overlay reads %q", out)
	}
	// Blocked paths: gone inside a programmable mount, covered elsewhere,
	// and no link leads around them.
	if out := mustRun(t, ctx, sb, "ls -a /work/layer; cat /work/layer/.env 2>&1; (echo x > /work/layer/.env) 2>&1; ln -s /work/layer/.env /tmp/l; cat /tmp/l 2>&1; true"); strings.Contains(out, "SECRET") || strings.Contains(out, " .env") {
		t.Errorf("a blocked path in a mount is visible: %q", out)
	}
	if out := mustRun(t, ctx, sb, "ls -a /mnt/directro/.ssh; cat /mnt/directro/.ssh/id 2>&1; cat /etc/shadow 2>&1; true"); strings.Contains(out, "key") || strings.Contains(out, "root:") {
		t.Errorf("a blocked path is visible: %q", out)
	}
	// Direct mounts: the host's files as they are.
	mustRun(t, ctx, sb, "cat /mnt/direct/d.txt && echo w > /mnt/direct/w.txt && cat /mnt/directro/e.txt")
	if b, err := os.ReadFile(filepath.Join(host, "direct/w.txt")); err != nil || string(b) != "w\n" {
		t.Errorf("direct mount write: %q %v", b, err)
	}
	if out := mustRun(t, ctx, sb, "(echo x > /mnt/directro/e.txt) 2>&1 || true"); !strings.Contains(out, "Read-only file system") {
		t.Errorf("read-only direct mount: %q", out)
	}
	// The file API sees the same tree.
	if b, err := sb.ReadFile(ctx, "/rw/a.txt"); err != nil || string(b) != "a" {
		t.Errorf("file API on a mount: %q %v", b, err)
	}
	if _, err := sb.ReadFile(ctx, "/work/layer/.env"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("file API read of a blocked path: %v", err)
	}
}

// TestVFSDirectMountFile binds host files, as docker's -v binds one: a
// read-only one over a file of the sandbox's, a writable one where the
// sandbox has none (made, with its directory). Writes reach the host
// file, the sandbox cannot unlink or replace it, and the file API reads
// what the sandbox sees. A host file cannot land on a directory.
func TestVFSDirectMountFile(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 90*time.Second)
	host := t.TempDir()
	os.Chmod(host, 0o755)
	ro, rw := filepath.Join(host, "ro.conf"), filepath.Join(host, "rw.txt")
	for _, f := range []string{ro, rw} {
		if err := os.WriteFile(f, []byte("host\n"), 0o666); err != nil {
			t.Fatal(err)
		}
		os.Chmod(f, 0o666)
	}
	sb := newSandbox(t, airlock.Config{VFS: airlock.VFSConfig{DirectMounts: map[string]airlock.DirectMount{
		"/etc/hostname":      {HostPath: ro, Readonly: true},
		"/srv/app/rw.txt":    {HostPath: rw},
		"/srv/app/again.txt": {HostPath: rw, Readonly: true},
	}}})
	out := mustRun(t, ctx, sb, `cat /etc/hostname /srv/app/rw.txt
echo sandbox >> /srv/app/rw.txt
cat /srv/app/again.txt
(echo x >> /etc/hostname) 2>&1
(echo x >> /srv/app/again.txt) 2>&1
rm /srv/app/rw.txt 2>/dev/null || echo kept
mv /tmp /srv/app/rw.txt 2>/dev/null || echo not-replaced
true`)
	if want := "host\nhost\nhost\nsandbox\n"; !strings.HasPrefix(out, want) || strings.Count(out, "Read-only file system") != 2 || !strings.Contains(out, "kept") || !strings.Contains(out, "not-replaced") {
		t.Errorf("in the sandbox:\n%s", out)
	}
	if b, _ := os.ReadFile(rw); string(b) != "host\nsandbox\n" {
		t.Errorf("the host's writable file holds %q", b)
	}
	if b, _ := os.ReadFile(ro); string(b) != "host\n" {
		t.Errorf("the host's read-only file holds %q", b)
	}
	if b, err := sb.ReadFile(ctx, "/srv/app/rw.txt"); err != nil || string(b) != "host\nsandbox\n" {
		t.Errorf("the file API reads %q %v", b, err)
	}

	// The file API writes a bound file in place (it cannot be replaced),
	// and refuses the read-only one as a write inside would be.
	if err := sb.WriteFile(ctx, "/srv/app/rw.txt", []byte("api\n"), 0o644); err != nil {
		t.Errorf("the file API's write of a bound file: %v", err)
	}
	if b, _ := os.ReadFile(rw); string(b) != "api\n" {
		t.Errorf("after the file API's write, the host's file holds %q", b)
	}
	if err := sb.WriteFile(ctx, "/etc/hostname", []byte("api\n"), 0o644); err == nil || !strings.Contains(err.Error(), "read-only") {
		t.Errorf("the file API's write of a read-only bound file: %v", err)
	}
	if b, _ := os.ReadFile(ro); string(b) != "host\n" {
		t.Errorf("the host's read-only file holds %q", b)
	}

	other, err := airlock.Create(ctx, airlock.Config{VFS: airlock.VFSConfig{DirectMounts: map[string]airlock.DirectMount{"/tmp": {HostPath: rw}}}})
	if err == nil {
		other.Close()
	}
	if err == nil || !strings.Contains(err.Error(), "only over a file") {
		t.Errorf("a host file bound over a directory: %v", err)
	}
}

// A full memory mount refuses writes with ENOSPC and keeps working.
func TestVFSQuota(t *testing.T) {
	needFUSE(t)
	t.Parallel()
	ctx := testCtx(t, 90*time.Second)
	sb := newSandbox(t, airlock.Config{VFS: airlock.VFSConfig{Mounts: map[string]airlock.MountSpec{"/small": {Type: airlock.MountMemory, SizeMB: 2}}}})
	out := mustRun(t, ctx, sb, "dd if=/dev/zero of=/small/big bs=1M count=4 2>&1 || true")
	if !strings.Contains(out, "No space left on device") {
		t.Errorf("a write past the quota said %q", out)
	}
	if out := mustRun(t, ctx, sb, "rm /small/big && echo ok > /small/after && cat /small/after"); out != "ok\n" {
		t.Errorf("after a full mount: %q", out)
	}
}

// Bad configurations are refused before anything starts, with what to
// change.
func TestVFSConfigErrors(t *testing.T) {
	dir := t.TempDir()
	fifo, file := filepath.Join(dir, "fifo"), filepath.Join(dir, "file")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	// A regular file is a direct mount's source, as docker's -v takes one.
	if err := (&airlock.Config{VFS: airlock.VFSConfig{DirectMounts: map[string]airlock.DirectMount{"/f": {HostPath: file}}}}).Validate(); err != nil {
		t.Errorf("a direct mount of a file: %v", err)
	}
	for _, c := range []struct {
		v    airlock.VFSConfig
		want string
	}{
		{airlock.VFSConfig{Mounts: map[string]airlock.MountSpec{"/w": {Type: "ramdisk"}}}, "unknown mount type"},
		{airlock.VFSConfig{Mounts: map[string]airlock.MountSpec{"w": {Type: "memory"}}}, "absolute"},
		{airlock.VFSConfig{Mounts: map[string]airlock.MountSpec{"/proc/x": {Type: "memory"}}}, "/proc"},
		{airlock.VFSConfig{Mounts: map[string]airlock.MountSpec{"/d": {Type: "real_fs", HostPath: filepath.Join(dir, "missing")}}}, "no such file"},
		{airlock.VFSConfig{Mounts: map[string]airlock.MountSpec{"/d": {Type: "overlay", Upper: &airlock.MountSpec{Type: "memory"}}}}, "needs upper and lower"},
		{airlock.VFSConfig{Mounts: map[string]airlock.MountSpec{"/d": {Type: "memory"}}, DirectMounts: map[string]airlock.DirectMount{"/d": {HostPath: dir}}}, "give each target once"},
		{airlock.VFSConfig{Mounts: map[string]airlock.MountSpec{"/d": {Type: "memory"}}, DirectMounts: map[string]airlock.DirectMount{"/d/x": {HostPath: dir}}}, "inside the programmable mount"},
		{airlock.VFSConfig{BlockedPaths: []string{"rel"}}, "absolute"},
		{airlock.VFSConfig{Mounts: map[string]airlock.MountSpec{"/w/": {Type: "memory"}}}, "not clean"},
		{airlock.VFSConfig{DirectMounts: map[string]airlock.DirectMount{"/f": {HostPath: fifo}}}, "neither a directory nor a regular file (a FIFO)"},
		{airlock.VFSConfig{Mounts: map[string]airlock.MountSpec{"/d": {Type: "real_fs", HostPath: file}}}, "not a directory"},
	} {
		err := (&airlock.Config{VFS: c.v}).Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want one with %q", c.v, err, c.want)
		}
	}
}

// The policy script's on_file decides on files as Go hooks do, for
// JSON-RPC users.
func TestVFSPolicyScriptOnFile(t *testing.T) {
	needFUSE(t)
	if os.Getuid() != 0 {
		t.Skip("a network policy needs root here")
	}
	t.Parallel()
	ctx := testCtx(t, 90*time.Second)
	var ev events
	sb := newSandbox(t, airlock.Config{
		Network: &policy.Config{PolicyScript: `
def on_file(op, path, size):
    if path.startswith("/workspace/locked"):
        return "EROFS"
    if op == "write" and size > 1000:
        return False
    return True
`},
		VFS:     airlock.VFSConfig{Mounts: map[string]airlock.MountSpec{"/workspace": {Type: airlock.MountMemory}}},
		OnEvent: ev.on,
	})
	out := mustRun(t, ctx, sb, `cd /workspace; echo small > ok; (echo x > locked) 2>&1; head -c 5000 /dev/zero > big 2>&1 || echo big-refused; cat ok`)
	if !strings.Contains(out, "Read-only file system") || !strings.Contains(out, "big-refused") || !strings.HasSuffix(out, "small\n") {
		t.Errorf("on_file decisions: %q", out)
	}
	ev.wait(t, "blocked create of locked", func(f airlock.FileEvent) bool { return f.Path == "/workspace/locked" && f.Blocked })
}

// A sandbox is closed, or its agent killed (as the OOM killer or a
// dying supervisor would), while the agent itself waits on one of its
// mounts: a file API read whose open the provider never answers (a
// provider that ignores its context, which no hook timeout bounds). The
// kernel cannot interrupt a request that its server has read, so the
// mount's connection must end for the wait to end: whichever process
// holds its FUSE device dies, or the supervisor that serves it aborts
// it. Close returns, and no process of the sandbox is left.
func TestVFSCloseWhileFileAPIWaitsOnMount(t *testing.T) {
	needFUSE(t)
	t.Parallel()
	eachIsolation(t, func(t *testing.T, lv airlock.Isolation) {
		for _, kill := range []bool{false, true} {
			name := "close"
			if kill {
				name = "kill"
			}
			t.Run(name, func(t *testing.T) { closeWhileFileAPIWaits(t, lv, kill) })
		}
	})
}

// stuckOpen is a provider whose open of a file named "stuck" never
// returns while the test runs.
type stuckOpen struct {
	vfs.Provider
	entered chan struct{}
	release chan struct{}
}

func (p *stuckOpen) Open(ctx context.Context, name string, flags int, mode fs.FileMode) (vfs.Handle, error) {
	if path.Base(name) == "stuck" {
		select {
		case p.entered <- struct{}{}:
		default:
		}
		<-p.release
	}
	return p.Provider.Open(ctx, name, flags, mode)
}

func closeWhileFileAPIWaits(t *testing.T, lv airlock.Isolation, kill bool) {
	var st unix.Statfs_t
	if lv == airlock.IsolationProcess && os.Geteuid() != 0 && (unix.Statfs("/sys/fs/fuse/connections", &st) != nil || st.Type != 0x65735543) {
		t.Skip("without root, the supervisor aborts its mounts' FUSE connections through fusectl, which is not mounted at /sys/fs/fuse/connections here (make deps mounts it)")
	}
	ctx := testCtx(t, 90*time.Second)
	mem := vfs.NewMemory(vfs.MemoryOptions{})
	h, err := mem.Create(ctx, "/stuck", 0o644)
	if err != nil {
		t.Fatal(err)
	}
	h.Close()
	stuck := &stuckOpen{Provider: mem, entered: make(chan struct{}, 1), release: make(chan struct{})}
	entered := stuck.entered
	t.Cleanup(func() { close(stuck.release) })
	sb, err := airlock.Create(ctx, airlock.Config{
		Isolation: lv,
		VFS:       airlock.VFSConfig{Providers: map[string]vfs.Provider{"/data": stuck}},
	})
	if err != nil {
		t.Fatalf("create a %s sandbox: %v", lv, err)
	}
	t.Cleanup(func() { sb.Close() })
	agent := sb.PID()
	conns := fuseConnections(t, agent)
	readDone := make(chan error, 1)
	go func() {
		_, err := sb.ReadFile(ctx, "/data/stuck")
		readDone <- err
	}()
	select {
	case <-entered:
	case err := <-readDone:
		t.Fatalf("the read returned before its open was answered: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the file API's open never reached the provider")
	}
	procs := descendants(agent)
	if kill {
		if err := syscall.Kill(agent, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
	}
	closed := make(chan error, 1)
	go func() { closed <- sb.Close() }()
	select {
	case err := <-closed:
		if err != nil && !kill {
			t.Errorf("close: %v", err)
		}
	case <-time.After(30 * time.Second):
		// Free what is stuck, so that the rest of the suite runs.
		abortFUSE(t, conns)
		t.Fatalf("Close did not return within 30 s while the agent waited on its own mount")
	}
	if err := <-readDone; err == nil {
		t.Error("the read of a file whose open was never answered succeeded")
	}
	if !waitFor(10*time.Second, func() bool {
		for _, p := range procs {
			if alive(p) {
				return false
			}
		}
		return true
	}) {
		var left []string
		for _, p := range procs {
			if alive(p) {
				b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p))
				left = append(left, fmt.Sprintf("%d %q", p, b))
			}
		}
		t.Errorf("processes of the closed sandbox remain: %v", left)
	}
}

// fuseConnections lists the FUSE connections (their numbers under
// /sys/fs/fuse/connections) of the mounts that the process pid sees.
func fuseConnections(t *testing.T, pid int) []string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", pid))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		i := slices.Index(f, "-")
		if i < 0 || i+1 >= len(f) || f[i+1] != "fuse.airlock" {
			continue
		}
		if _, minor, ok := strings.Cut(f[2], ":"); ok {
			out = append(out, minor)
		}
	}
	return out
}

// abortFUSE aborts the FUSE connections conns, which ends every request
// waiting on them.
func abortFUSE(t *testing.T, conns []string) {
	t.Helper()
	for _, c := range conns {
		if err := os.WriteFile(filepath.Join("/sys/fs/fuse/connections", c, "abort"), []byte("1"), 0); err != nil {
			t.Logf("abort FUSE connection %s: %v", c, err)
		}
	}
}

// No command can see, signal or trace the mounts' FUSE server, nor read
// or write a mount's FUSE device. At the process level the supervisor
// serves the mounts itself: no process of the sandbox holds a device
// once the sandbox is ready. Elsewhere the server is a process of the
// sandbox's own kernel, in the agent's PID namespace, above the
// commands' own.
func TestVFSServerHidden(t *testing.T) {
	needFUSE(t)
	t.Parallel()
	eachIsolation(t, func(t *testing.T, lv airlock.Isolation) {
		ctx := testCtx(t, 90*time.Second)
		sb := newSandbox(t, airlock.Config{Isolation: lv, VFS: airlock.VFSConfig{Mounts: map[string]airlock.MountSpec{"/workspace": {Type: airlock.MountMemory}}}})
		out := mustRun(t, ctx, sb, `echo x > /workspace/f; for f in /proc/[0-9]*/cmdline; do printf '%s: ' "$f"; tr '\0' ' ' < "$f"; echo; done`)
		if strings.Contains(out, "fuse-server") {
			t.Errorf("a command sees the FUSE server:\n%s", out)
		}
		if lv != airlock.IsolationProcess {
			return
		}
		if got := mustRun(t, ctx, sb, "cat /workspace/f"); got != "x\n" {
			t.Errorf("the mount holds %q", got)
		}
		for _, p := range descendants(sb.PID()) {
			b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p))
			if strings.Contains(string(b), "fuse-server") {
				t.Errorf("a FUSE server runs in the sandbox: %d %q", p, b)
			}
			fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", p))
			for _, fd := range fds {
				if l, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", p, fd.Name())); l == "/dev/fuse" {
					t.Errorf("process %d of the sandbox (%q) holds a FUSE device at descriptor %s", p, b, fd.Name())
				}
			}
		}
	})
}

// hostReads is a provider whose files are host files, which it offers
// the kernel to read itself (vfs.HostFiler), and which counts the reads
// that reach it.
type hostReads struct {
	vfs.Provider
	dir   string
	reads *atomic.Int64
}

func (p hostReads) Open(ctx context.Context, name string, flags int, mode fs.FileMode) (vfs.Handle, error) {
	h, err := p.Provider.Open(ctx, name, flags, mode)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(filepath.Join(p.dir, name))
	if err != nil {
		h.Close()
		return nil, err
	}
	return &hostReadsHandle{Handle: h, f: f, reads: p.reads}, nil
}

type hostReadsHandle struct {
	vfs.Handle
	f     *os.File
	reads *atomic.Int64
}

func (h *hostReadsHandle) ReadAt(ctx context.Context, p []byte, off int64) (int, error) {
	h.reads.Add(1)
	return h.Handle.ReadAt(ctx, p, off)
}

func (h *hostReadsHandle) HostFile() *os.File { return h.f }

func (h *hostReadsHandle) Close() error {
	h.f.Close()
	return h.Handle.Close()
}

// A read-only mount whose files are host files is read by the sandbox's
// kernel straight from them at the process level, as root on Linux 6.9
// and later (FUSE passthrough), through every layer the sandbox's mounts
// have (blocked paths, hooks, events): no read reaches the provider.
// Elsewhere the reads go through the provider, and read the same.
func TestVFSReadonlyPassthrough(t *testing.T) {
	needFUSE(t)
	t.Parallel()
	eachIsolation(t, func(t *testing.T, lv airlock.Isolation) {
		ctx := testCtx(t, 90*time.Second)
		dir := t.TempDir()
		want := strings.Repeat("passthrough\n", 50_000)
		if err := os.WriteFile(filepath.Join(dir, "f"), []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		real, err := vfs.NewRealFS(dir)
		if err != nil {
			t.Fatal(err)
		}
		var reads atomic.Int64
		sb := newSandbox(t, airlock.Config{Isolation: lv, VFS: airlock.VFSConfig{
			Providers:    map[string]vfs.Provider{"/ro": vfs.NewReadonly(hostReads{Provider: real, dir: dir, reads: &reads})},
			BlockedPaths: []string{"/ro/secret"},
			Hooks:        vfs.Hooks{BeforeWrite: func(context.Context, string, int64, int) error { return nil }},
		}})
		if got := mustRun(t, ctx, sb, "md5sum < /ro/f"); got != mustRun(t, ctx, sb, "printf 'passthrough\\n%.0s' $(seq 50000) | md5sum") {
			t.Errorf("the file read through the mount differs: %s", got)
		}
		var u unix.Utsname
		_ = unix.Uname(&u)
		var major, minor int
		_, _ = fmt.Sscanf(unix.ByteSliceToString(u.Release[:]), "%d.%d", &major, &minor)
		if lv == airlock.IsolationProcess && os.Getuid() == 0 && (major > 6 || major == 6 && minor >= 9) {
			if n := reads.Load(); n != 0 {
				t.Errorf("%d reads reached the provider, want none (FUSE passthrough)", n)
			}
		} else if reads.Load() == 0 {
			t.Error("no read reached the provider")
		}
	})
}

// The providers a sandbox makes from its config are released when it
// closes: a real_fs mount's directory, also as an overlay's lower, is
// no longer held open by this process.
func TestVFSProvidersReleasedOnClose(t *testing.T) {
	needFUSE(t)
	t.Parallel()
	ctx := testCtx(t, 90*time.Second)
	a, b := t.TempDir(), t.TempDir()
	sb, err := airlock.Create(ctx, airlock.Config{VFS: airlock.VFSConfig{Mounts: map[string]airlock.MountSpec{
		"/a": {Type: airlock.MountRealFS, HostPath: a},
		"/b": {Type: airlock.MountOverlay, Upper: &airlock.MountSpec{Type: airlock.MountMemory}, Lower: &airlock.MountSpec{Type: airlock.MountRealFS, HostPath: b}},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	held := func() []string {
		var out []string
		fds, _ := os.ReadDir("/proc/self/fd")
		for _, fd := range fds {
			if l, err := os.Readlink("/proc/self/fd/" + fd.Name()); err == nil && (l == a || l == b) {
				out = append(out, l)
			}
		}
		return out
	}
	if h := held(); len(h) < 2 {
		sb.Close()
		t.Fatalf("the running sandbox's providers hold %q, want both directories", h)
	}
	if err := sb.Close(); err != nil {
		t.Fatal(err)
	}
	if h := held(); len(h) != 0 {
		t.Errorf("after Close this process still holds %q", h)
	}
}
