package vfs_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
)

// posixScript checks, from inside the sandbox, what programs rely on a
// file system for. Each check prints its name; a failure raises.
const posixScript = `
import errno, fcntl, mmap, os, stat, threading, time
os.chdir(os.environ["DIR"])
def expect_errno(e, f, *a):
    try:
        f(*a)
    except OSError as x:
        assert x.errno == e, (f.__name__, a, x)
        return
    raise AssertionError("%s%r did not fail with %s" % (f.__name__, a, errno.errorcode[e]))
def check(name):
    print(name)

with open("f", "wb") as f:
    f.write(b"hello")
assert open("f", "rb").read() == b"hello"
check("create-read-write")

fd = os.open("sparse", os.O_RDWR | os.O_CREAT, 0o644)
far = 5 << 30
os.pwrite(fd, b"beyond", far)
assert os.pread(fd, 6, far) == b"beyond"
assert os.pread(fd, 4, 4096) == b"\0\0\0\0"
assert os.fstat(fd).st_size == far + 6
os.ftruncate(fd, 10)
assert os.fstat(fd).st_size == 10
os.close(fd)
check("pread-pwrite-beyond-4GiB-truncate")

open("a", "w").write("A")
open("b", "w").write("B")
os.rename("a", "b")
assert open("b").read() == "A" and not os.path.exists("a")
check("rename-over")

fd = os.open("b", os.O_RDONLY)
os.unlink("b")
assert os.pread(fd, 1, 0) == b"A"
assert os.fstat(fd).st_size == 1
os.close(fd)
assert not os.path.exists("b")
check("unlink-open")

os.mkdir("d")
open("d/x", "w").close()
expect_errno(errno.ENOTEMPTY, os.rmdir, "d")
expect_errno(errno.EEXIST, os.mkdir, "d")
expect_errno(errno.ENOENT, os.stat, "nope")
expect_errno(errno.ENOTDIR, os.listdir, "f")
check("errnos")

os.symlink("d/x", "l")
assert os.readlink("l") == "d/x" and os.path.islink("l")
os.link("f", "h")
assert os.stat("f").st_nlink == 2 and os.stat("f").st_ino == os.stat("h").st_ino
os.unlink("h")
assert os.stat("f").st_nlink == 1
check("symlink-hardlink")

os.chmod("f", 0o600)
assert stat.S_IMODE(os.stat("f").st_mode) == 0o600
os.utime("f", (1000000000, 1200000000))
st = os.stat("f")
assert int(st.st_atime) == 1000000000 and int(st.st_mtime) == 1200000000, st
check("chmod-utimes")

fd = os.open("app", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
os.write(fd, b"1")
fd2 = os.open("app", os.O_WRONLY | os.O_APPEND)
os.write(fd2, b"2")
os.write(fd, b"3")
os.close(fd); os.close(fd2)
assert open("app").read() == "123"
expect_errno(errno.EEXIST, os.open, "app", os.O_WRONLY | os.O_CREAT | os.O_EXCL)
check("append-excl")

fd = os.open("lock", os.O_RDWR | os.O_CREAT, 0o644)
fcntl.flock(fd, fcntl.LOCK_EX)
fd2 = os.open("lock", os.O_RDWR)
expect_errno(errno.EWOULDBLOCK, fcntl.flock, fd2, fcntl.LOCK_EX | fcntl.LOCK_NB)
fcntl.flock(fd, fcntl.LOCK_UN)
fcntl.flock(fd2, fcntl.LOCK_EX | fcntl.LOCK_NB)
pid = os.fork()
if pid == 0:
    try:
        fcntl.lockf(os.open("lock", os.O_RDWR), fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)
        os._exit(0)
    except OSError:
        os._exit(1)
_, status = os.waitpid(pid, 0)
assert os.WEXITSTATUS(status) == 0, "a record lock nobody holds was refused"
fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)
pid = os.fork()
if pid == 0:
    try:
        fcntl.lockf(os.open("lock", os.O_RDWR), fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)
        os._exit(0)
    except OSError:
        os._exit(7)
_, status = os.waitpid(pid, 0)
assert os.WEXITSTATUS(status) == 7, "a process took a record lock another holds"
check("flock-fcntl")

many = int(os.environ["MANY"])
os.mkdir("many")
for i in range(many):
    open("many/%05d" % i, "w").close()
names = os.listdir("many")
assert len(names) == many and sorted(names)[-1] == "%05d" % (many - 1)
check("many-entries")

size = 1 << 20
with open("two", "wb") as f:
    f.truncate(2 * size)
def writer(n):
    fd = os.open("two", os.O_WRONLY)
    for i in range(64):
        os.pwrite(fd, bytes([n + 1]) * (size // 64), n * size + i * (size // 64))
    os.close(fd)
ts = [threading.Thread(target=writer, args=(n,)) for n in range(2)]
[t.start() for t in ts]; [t.join() for t in ts]
data = open("two", "rb").read()
assert data == b"\1" * size + b"\2" * size
check("two-writers")

with open("mm", "wb") as f:
    f.write(b"x" * 8192)
with open("mm", "r+b") as f:
    m = mmap.mmap(f.fileno(), 8192)
    m[0:5] = b"mmap!"
    m.flush()
    m.close()
assert open("mm", "rb").read(5) == b"mmap!"
check("mmap")
`

var posixChecks = []string{"create-read-write", "pread-pwrite-beyond-4GiB-truncate", "rename-over", "unlink-open", "errnos",
	"symlink-hardlink", "chmod-utimes", "append-excl", "flock-fcntl", "many-entries", "two-writers", "mmap"}

// manyEntries is how many files posixScript makes in one directory: ten
// pages of a directory listing, or a page and a half in a VM, whose
// every request costs milliseconds where no hardware virtualisation
// helps.
func manyEntries(lv airlock.Isolation) int {
	if lv == airlock.IsolationVM {
		return 1500
	}
	return 10000
}

// scriptDeadline bounds one script of the suite: four times longer in a
// VM, whose CPU may be emulated, and twice in gVisor's Sentry, whose
// every file operation also crosses its file server (and, under the
// race detector, a supervisor that serves the mount several times
// slower).
func scriptDeadline(lv airlock.Isolation, d time.Duration) time.Duration {
	switch lv {
	case airlock.IsolationVM:
		return 4 * d
	case airlock.IsolationGVisor:
		return 2 * d
	}
	return d
}

// TestPOSIX runs posixScript on every kind of mount, and on the
// sandbox's own tree for reference.
func TestPOSIX(t *testing.T) {
	eachLevel(t, func(t *testing.T, lv airlock.Isolation) {
		for _, p := range append([]provider{{name: "own-tree"}}, providers...) {
			t.Run(p.name, func(t *testing.T) {
				t.Parallel()
				var cfg airlock.Config
				dir := "/m"
				if p.mount != nil {
					cfg.VFS, _ = p.mount(t, t.TempDir())
				} else {
					dir = "/tmp/own"
				}
				sb := box(t, lv, cfg)
				out := sh(t, sb, scriptDeadline(lv, 3*time.Minute), "mkdir -p "+dir+" && MANY="+strconv.Itoa(manyEntries(lv))+" DIR="+dir+" python3 -c '"+strings.ReplaceAll(posixScript, "'", `'"'"'`)+"'")
				if got := strings.Fields(out); strings.Join(got, " ") != strings.Join(posixChecks, " ") {
					t.Errorf("checks passed: %v, want %v", got, posixChecks)
				}
			})
		}
	})
}
