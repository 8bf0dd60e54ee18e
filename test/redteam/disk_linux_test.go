package redteam_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/testbin"
)

// A sandbox's disk (its writable tree, /dev/shm included) is bounded in
// bytes and in files, a full disk fails writes with ENOSPC and never
// with an out-of-memory kill, and a disk larger than memory allows is
// either backed by a file (root) or refused with the reason.

// diskCase is a memory limit and a disk, and whether the disk is larger
// than half of the memory (so a file backs it, under root).
type diskCase struct {
	name     string
	memoryMB int64
	diskMB   int64
	onFile   bool
}

// diskBox creates the sandbox of c, or, for a disk that needs a file
// where airlock may not make one (not root), checks that the refusal
// says why and what to do, and returns nil.
func diskBox(t *testing.T, lv airlock.Isolation, c diskCase) *airlock.Sandbox {
	t.Helper()
	cfg := airlock.Config{Isolation: lv, Resources: airlock.Resources{MemoryMB: c.memoryMB}, DiskMB: c.diskMB}
	if !c.onFile || os.Geteuid() == 0 {
		return box(t, lv, cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sb, err := airlock.Create(ctx, cfg)
	if err == nil {
		sb.Close()
		t.Fatalf("without root, a disk of %d MiB with %d MiB of memory was made; want a refusal", c.diskMB, c.memoryMB)
	}
	for _, want := range []string{"does not fit in memory", "--memory", "root"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal %q does not say %q", err, want)
		}
	}
	return nil
}

// fillProg writes zeros to the file argv[1] until a write fails, and
// prints the errno and the bytes written.
const fillProg = `import os, sys
buf = bytes(1 << 20)
written, errno = 0, 0
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
try:
    while True:
        written += os.write(fd, buf)
except OSError as e:
    errno = e.errno
print(errno, written)
`

// fill runs fillProg on path in sb. The command must end by itself,
// killed by nothing and with no limit hit, and the write must fail with
// ENOSPC.
func fill(t *testing.T, sb *airlock.Sandbox, path string) (written int64) {
	t.Helper()
	res := runProbe(t, sb, "python3", "-c", fillProg, path)
	f := strings.Fields(string(res.Stdout))
	if res.ExitCode != 0 || res.KilledBy != "" || len(res.LimitsHit) > 0 || len(f) != 2 {
		t.Fatalf("filling %s: exit %d, killed_by %q, limits_hit %q, stdout %q, stderr %q; want a write that fails", path, res.ExitCode, res.KilledBy, res.LimitsHit, res.Stdout, res.Stderr)
	}
	errno, _ := strconv.Atoi(f[0])
	written, _ = strconv.ParseInt(f[1], 10, 64)
	if errno != int(unix.ENOSPC) {
		t.Errorf("filling %s stopped after %d MiB with errno %d (%v); want ENOSPC", path, written>>20, errno, unix.Errno(errno))
	}
	return written
}

// loopsOf lists the loop devices whose backing file airlock labelled
// with sandbox id.
func loopsOf(t *testing.T, id string) []string {
	t.Helper()
	devs, _ := filepath.Glob("/sys/block/loop*/loop")
	var out []string
	for _, d := range devs {
		name := "/dev/" + filepath.Base(filepath.Dir(d))
		f, err := os.Open(name)
		if err != nil {
			continue
		}
		info, err := unix.IoctlLoopGetStatus64(int(f.Fd()))
		f.Close()
		if err != nil {
			continue
		}
		if label, _, _ := bytes.Cut(info.File_name[:], []byte{0}); string(label) == "airlock "+id {
			out = append(out, name)
		}
	}
	return out
}

// With --memory 256m, a full disk is ENOSPC whatever its size: a disk of
// half the memory (a tmpfs) and one of four times the memory (a file,
// under root) fill up, the writer gets ENOSPC and is not killed, /dev/shm
// shares the disk, and the sandbox goes on. A disk-backed sandbox leaves
// no loop device behind.
func TestDiskFullIsENOSPC(t *testing.T) {
	eachLevel(t, func(t *testing.T, lv airlock.Isolation) {
		for _, c := range []diskCase{
			{name: "tmpfs", memoryMB: 256, diskMB: 128},
			{name: "file", memoryMB: 256, diskMB: 1024, onFile: true},
		} {
			t.Run(c.name, func(t *testing.T) {
				t.Parallel()
				sb := diskBox(t, lv, c)
				if sb == nil {
					return
				}
				fsType := strings.TrimSpace(ok(t, sb, "stat -f -c %T /"))
				t.Logf("%d MiB disk with %d MiB of memory: %s", c.diskMB, c.memoryMB, fsType)
				if c.onFile && fsType == "tmpfs" {
					t.Errorf("a disk of %d MiB with %d MiB of memory is a tmpfs", c.diskMB, c.memoryMB)
				}
				disk := c.diskMB << 20
				w := fill(t, sb, "/tmp/fill")
				if w > disk || w < disk*3/4 {
					t.Errorf("%d MiB written on a %d MiB disk", w>>20, c.diskMB)
				}
				// /dev/shm is part of the same disk: full too.
				if shm := fill(t, sb, "/dev/shm/fill"); shm > 1<<20 {
					t.Errorf("%d MiB written to /dev/shm with the disk full", shm>>20)
				}
				ok(t, sb, "rm /tmp/fill /dev/shm/fill")
				// Then /dev/shm takes the disk, and no more.
				if shm := fill(t, sb, "/dev/shm/fill"); shm > disk || shm < disk*3/4 {
					t.Errorf("%d MiB written to /dev/shm on a %d MiB disk", shm>>20, c.diskMB)
				}
				ok(t, sb, "rm /dev/shm/fill")
				if out := ok(t, sb, "echo ok > /tmp/x && cat /tmp/x"); out != "ok\n" {
					t.Errorf("after the disk was full: %q", out)
				}
				if !c.onFile || lv == airlock.IsolationVM {
					// A VM's disk is an unnamed file of QEMU's, on no
					// loop device (TestDiskGoneWithKilledSupervisor).
					return
				}
				if loops := loopsOf(t, sb.ID()); len(loops) != 1 {
					t.Errorf("loop devices of the sandbox while it runs: %q, want one", loops)
				}
				if err := sb.Close(); err != nil {
					t.Fatal(err)
				}
				if loops := loopsOf(t, sb.ID()); len(loops) != 0 {
					t.Errorf("loop devices left after the sandbox closed: %q", loops)
				}
			})
		}
	})
}

// userMemory reads, from the host, the memory charged to the cgroup of
// sb's user processes (kernel memory included), found through the
// agent's child, the spawner. ok is false where there is none to read.
func userMemory(t *testing.T, sb *airlock.Sandbox) (bytes int64, ok bool) {
	t.Helper()
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		_, rest, found := strings.Cut(string(stat), ") ")
		if f := strings.Fields(rest); !found || len(f) < 2 || f[1] != strconv.Itoa(sb.PID()) {
			continue
		}
		cg, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cgroup"))
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(cg), "\n") {
			parts := strings.SplitN(l, ":", 3)
			if len(parts) != 3 {
				continue
			}
			var file string
			switch {
			case strings.Contains(","+parts[1]+",", ",memory,"):
				file = filepath.Join("/sys/fs/cgroup/memory", parts[2], "memory.usage_in_bytes")
			case parts[0] == "0" && parts[1] == "":
				file = filepath.Join("/sys/fs/cgroup", parts[2], "memory.current")
			default:
				continue
			}
			b, err := os.ReadFile(file)
			if err != nil {
				continue
			}
			n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
			if err == nil {
				return n, true
			}
		}
	}
	return 0, false
}

// manyProg makes up to 400,000 empty files in the directory argv[1]
// until one cannot be made, and prints the errno and how many were.
const manyProg = `import os, sys
d = sys.argv[1]
n, errno = 0, 0
try:
    os.makedirs(d, exist_ok=True)
    while n < 400000:
        os.close(os.open("%s/%d" % (d, n), os.O_CREAT | os.O_WRONLY, 0o600))
        n += 1
except OSError as e:
    errno = e.errno
print(errno, n)
`

// Empty files cost no bytes but pin kernel memory each: every writable
// filesystem of the sandbox (its tree, /dev/shm in it, /dev) bounds their
// number, and making them stops with ENOSPC long before the 400,000
// that once pinned 330 MB of the host's kernel memory.
func TestDiskInodeBound(t *testing.T) {
	eachLevel(t, func(t *testing.T, lv airlock.Isolation) {
		for _, c := range []diskCase{
			{name: "tmpfs", diskMB: 64},
			{name: "file", memoryMB: 64, diskMB: 128, onFile: true},
		} {
			t.Run(c.name, func(t *testing.T) {
				t.Parallel()
				sb := diskBox(t, lv, c)
				if sb == nil {
					return
				}
				bound := c.diskMB << 20 / (8 << 10)
				before, measured := userMemory(t, sb)
				for _, dir := range []string{"/tmp/many", "/dev/shm/many"} {
					res := runProbe(t, sb, "python3", "-c", manyProg, dir)
					var errno, n int64
					if _, err := fmt.Sscan(string(res.Stdout), &errno, &n); err != nil || res.ExitCode != 0 || res.KilledBy != "" {
						t.Fatalf("making files in %s: exit %d, killed_by %q, stdout %q, stderr %q", dir, res.ExitCode, res.KilledBy, res.Stdout, res.Stderr)
					}
					t.Logf("%s: %d empty files, then errno %d", dir, n, errno)
					if errno != int64(unix.ENOSPC) {
						t.Errorf("making empty files in %s stopped after %d with errno %d (%v); want ENOSPC", dir, n, errno, unix.Errno(errno))
					}
					if dir == "/tmp/many" && (n > bound || n < bound/2) {
						t.Errorf("%d empty files made on a disk of %d MiB; want at most its bound of %d", n, c.diskMB, bound)
					}
				}
				if after, ok := userMemory(t, sb); measured && ok {
					t.Logf("the sandbox's memory went from %d to %d MiB", before>>20, after>>20)
					if !c.onFile && after-before > 32<<20 {
						t.Errorf("%d empty files pinned %d MiB of memory", bound, (after-before)>>20)
					}
				}
				res := runProbe(t, sb, "python3", "-c", manyProg, "/dev/many")
				var errno, n int64
				if _, err := fmt.Sscan(string(res.Stdout), &errno, &n); err != nil || errno != int64(unix.ENOSPC) || n > 64 {
					t.Errorf("empty files in /dev: %q %q; want at most 64, then ENOSPC", res.Stdout, res.Stderr)
				}
				ok(t, sb, "rm -rf /tmp/many /dev/shm/many /dev/many")
				if out := ok(t, sb, "echo ok > /tmp/x && cat /tmp/x"); out != "ok\n" {
					t.Errorf("after the files: %q", out)
				}
			})
		}
	})
}

// A supervisor killed with SIGKILL leaves no disk behind: the loop device
// and its file go with the last descriptor, which the kernel closes.
func TestDiskGoneWithKilledSupervisor(t *testing.T) {
	eachLevel(t, func(t *testing.T, lv airlock.Isolation) {
		if os.Geteuid() != 0 {
			t.Skip("a disk larger than memory allows needs root")
		}
		t.Parallel()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		out, err := exec.CommandContext(ctx, bins.cli, "run", "-d", "--isolation", string(lv), "--memory", "64m", "--disk", "256m").Output()
		if err != nil {
			t.Fatalf("airlock run -d: %v", err)
		}
		id := strings.TrimSpace(string(out))
		t.Cleanup(func() { _ = exec.Command(bins.cli, "rm", "-f", id).Run() })
		rec, err := exec.CommandContext(ctx, bins.cli, "get", id).Output()
		if err != nil {
			t.Fatalf("airlock get %s: %v", id, err)
		}
		var r struct {
			Supervisor struct{ PID int } `json:"supervisor"`
		}
		if err := json.Unmarshal(rec, &r); err != nil || r.Supervisor.PID <= 0 {
			t.Fatalf("airlock get %s: %q: %v", id, rec, err)
		}
		if lv == airlock.IsolationVM {
			// A VM's disk is an unnamed file that QEMU alone holds:
			// it goes with QEMU, which goes with its supervisor.
			qemu := agentOf(t, r.Supervisor.PID)
			if !holdsUnnamedDisk(t, qemu) {
				t.Fatalf("the VM's QEMU %d holds no unnamed disk file", qemu)
			}
			if err := unix.Kill(r.Supervisor.PID, unix.SIGKILL); err != nil {
				t.Fatal(err)
			}
			if !testbin.WaitFor(30*time.Second, func() bool { return !testbin.Alive(qemu) }) {
				t.Errorf("30 s after its supervisor was killed, the VM's QEMU %d, which holds its disk, runs", qemu)
			}
			return
		}
		if loops := loopsOf(t, id); len(loops) != 1 {
			t.Fatalf("loop devices of the running sandbox: %q, want one", loops)
		}
		if err := unix.Kill(r.Supervisor.PID, unix.SIGKILL); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(30 * time.Second)
		for len(loopsOf(t, id)) > 0 && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
		}
		if loops := loopsOf(t, id); len(loops) != 0 {
			t.Errorf("30 s after its supervisor was killed, the sandbox's disk is still on %q", loops)
		}
	})
}

// holdsUnnamedDisk reports whether process pid has a file open that no
// path reaches (O_TMPFILE, or removed), under the host's disks folder.
func holdsUnnamedDisk(t *testing.T, pid int) bool {
	t.Helper()
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, fd := range fds {
		l, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
		if err == nil && strings.Contains(l, "/disks/") && strings.HasSuffix(l, "(deleted)") {
			return true
		}
	}
	return false
}
