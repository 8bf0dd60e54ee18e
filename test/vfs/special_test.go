package vfs_test

import (
	"context"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
)

// specialScript makes a FIFO and a UNIX socket, and uses each between
// two processes; a device is refused. Each check prints its name; a
// failure raises.
const specialScript = `
import errno, os, socket, stat
os.chdir(os.environ["DIR"])
def check(name):
    print(name, flush=True)

os.mkfifo("fifo", 0o640)
st = os.lstat("fifo")
assert stat.S_ISFIFO(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o640, oct(st.st_mode)
pid = os.fork()
if pid == 0:
    with open("fifo", "wb") as f:
        f.write(b"through the fifo")
    os._exit(0)
with open("fifo", "rb") as f:
    data = f.read()
_, status = os.waitpid(pid, 0)
assert data == b"through the fifo" and status == 0, (data, status)
# Opening without a writer does not wait, and reads nothing.
fd = os.open("fifo", os.O_RDONLY | os.O_NONBLOCK)
assert os.read(fd, 10) == b""
os.close(fd)
try:
    os.open("fifo", os.O_WRONLY | os.O_NONBLOCK)
except OSError as x:
    assert x.errno == errno.ENXIO, x
else:
    raise AssertionError("a FIFO without a reader opened for writing")
check("fifo")

s = socket.socket(socket.AF_UNIX)
s.bind("sock")
s.listen(1)
assert stat.S_ISSOCK(os.lstat("sock").st_mode), oct(os.lstat("sock").st_mode)
pid = os.fork()
if pid == 0:
    c = socket.socket(socket.AF_UNIX)
    c.connect("sock")
    c.sendall(b"over the socket")
    c.close()
    os._exit(0)
conn, _ = s.accept()
data = b""
while True:
    chunk = conn.recv(100)
    if not chunk:
        break
    data += chunk
_, status = os.waitpid(pid, 0)
assert data == b"over the socket" and status == 0, (data, status)
conn.close()
s.close()
try:
    socket.socket(socket.AF_UNIX).bind("sock")
except OSError as x:
    assert x.errno == errno.EADDRINUSE, x
else:
    raise AssertionError("bind over an existing socket")
check("socket")

for kind in (stat.S_IFCHR, stat.S_IFBLK):
    try:
        os.mknod("dev", kind | 0o666, os.makedev(1, 3))
    except OSError as x:
        assert x.errno == errno.EPERM, x
    else:
        raise AssertionError("a device was made")
assert not os.path.lexists("dev")
check("device-refused")

os.mknod("reg", stat.S_IFREG | 0o600)
assert stat.S_ISREG(os.lstat("reg").st_mode)
if os.environ["LEVEL"] == "gvisor":
    # gVisor's file server refuses a new link to a FIFO (see the
    # README's "The gvisor level"): a copy stands in.
    try:
        os.link("fifo", "fifo2")
    except OSError as x:
        assert x.errno == errno.EOPNOTSUPP, x
    else:
        raise AssertionError("gVisor linked a FIFO: update the README and this test")
    if os.path.lexists("fifo2"):
        os.unlink("fifo2")
    os.mkfifo("fifo2")
else:
    os.link("fifo", "fifo2")
    assert os.lstat("fifo").st_nlink == 2
os.rename("fifo2", "moved")
assert stat.S_ISFIFO(os.lstat("moved").st_mode)
os.unlink("moved")
check("mknod-link-rename")
`

var specialChecks = []string{"fifo", "socket", "device-refused", "mknod-link-rename"}

// TestSpecialFiles makes FIFOs and UNIX sockets on every kind of mount
// and uses them between processes; devices are refused everywhere. The
// file API does not wait on a FIFO: it refuses to read one, and lists
// it as what it is (airlock cp skips it).
func TestSpecialFiles(t *testing.T) {
	eachLevel(t, func(t *testing.T, lv airlock.Isolation) {
		for _, p := range providers {
			t.Run(p.name, func(t *testing.T) {
				t.Parallel()
				cfg := airlock.Config{}
				var host string
				cfg.VFS, host = p.mount(t, t.TempDir())
				sb := box(t, lv, cfg)
				out := sh(t, sb, scriptDeadline(lv, 2*time.Minute), "mkdir -p /m/sp && LEVEL="+string(lv)+" DIR=/m/sp python3 -c '"+strings.ReplaceAll(specialScript, "'", `'"'"'`)+"'")
				if got := strings.Fields(out); strings.Join(got, " ") != strings.Join(specialChecks, " ") {
					t.Errorf("checks passed: %v, want %v", got, specialChecks)
				}

				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				if _, err := sb.ReadFile(ctx, "/m/sp/fifo"); err == nil || ctx.Err() != nil {
					t.Errorf("read_file of a FIFO: %v (context: %v), want a refusal at once", err, ctx.Err())
				}
				if _, err := sb.ReadFile(ctx, "/m/sp/sock"); err == nil || ctx.Err() != nil {
					t.Errorf("read_file of a socket: %v (context: %v), want a refusal at once", err, ctx.Err())
				}
				fi, err := sb.Stat(ctx, "/m/sp/fifo")
				if err != nil || fi.Mode.Type() != fs.ModeNamedPipe {
					t.Errorf("stat of the FIFO through the file API: %+v %v", fi, err)
				}
				// What airlock cp goes by to skip them.
				list, err := sb.ListFiles(ctx, "/m/sp")
				if err != nil {
					t.Fatal(err)
				}
				var types []string
				for _, e := range list {
					types = append(types, e.Name+":"+e.Mode.Type().String())
				}
				slices.Sort(types)
				if want := "fifo:p--------- reg:---------- sock:S---------"; strings.Join(types, " ") != want {
					t.Errorf("list_files: %v, want %s", types, want)
				}

				// On the host: real_fs and the direct mount hold the
				// FIFO and the socket (as inert files: their pipe and
				// listener were the sandbox kernel's), never a device.
				// At gvisor, the Sentry keeps the FIFOs and sockets its
				// programs make in a mount to itself (gVisor's
				// synthetic files), and writes none to the provider.
				if (p.name == "real_fs" || p.name == "direct") && lv != airlock.IsolationGVisor {
					for name, typ := range map[string]fs.FileMode{"fifo": fs.ModeNamedPipe, "sock": fs.ModeSocket} {
						if fi, err := os.Lstat(filepath.Join(host, "sp", name)); err != nil || fi.Mode().Type() != typ {
							t.Errorf("%s on the host: %v %v", name, fi, err)
						}
					}
				}
				if host != "" {
					if _, err := os.Lstat(filepath.Join(host, "sp", "dev")); !os.IsNotExist(err) {
						t.Errorf("a device on the host: %v", err)
					}
				}
			})
		}
	})
}

// crossScript tries the host's FIFO and socket through the mount: the
// sandbox's kernel has no pipe or listener for them.
const crossScript = `
import errno, os, socket
try:
    os.open("/m/hf", os.O_WRONLY | os.O_NONBLOCK)
except OSError as x:
    # No reader in the sandbox's kernel; gVisor's file server opens no
    # FIFO of the host at all.
    assert x.errno == errno.ENXIO or (os.environ["LEVEL"] == "gvisor" and x.errno == errno.EPERM), x
else:
    raise AssertionError("the host FIFO opened for writing")
s = socket.socket(socket.AF_UNIX)
try:
    s.connect("/m/hs")
except OSError as x:
    assert x.errno == errno.ECONNREFUSED, x
else:
    raise AssertionError("connected to the host socket")
print("apart")
`

// TestSpecialFilesApart: a FIFO or a socket of a real_fs directory, with
// a reader or a listener on the host, leads nowhere from the sandbox
// (its kernel serves the mount's files, not the host's).
func TestSpecialFilesApart(t *testing.T) {
	eachLevel(t, func(t *testing.T, lv airlock.Isolation) {
		for _, p := range providers {
			if p.name != "real_fs" && p.name != "overlay" {
				continue
			}
			t.Run(p.name, func(t *testing.T) {
				t.Parallel()
				cfg := airlock.Config{}
				var host string
				cfg.VFS, host = p.mount(t, t.TempDir())
				l, err := net.Listen("unix", filepath.Join(host, "hs"))
				if err != nil {
					t.Skipf("a socket in the host directory: %v", err)
				}
				defer l.Close()
				accepted := make(chan struct{}, 1)
				go func() {
					if c, err := l.Accept(); err == nil {
						c.Close()
						accepted <- struct{}{}
					}
				}()
				hf := filepath.Join(host, "hf")
				if err := syscall.Mkfifo(hf, 0o666); err != nil {
					t.Fatal(err)
				}
				os.Chmod(hf, 0o666)
				r, err := os.OpenFile(hf, os.O_RDONLY|syscall.O_NONBLOCK, 0)
				if err != nil {
					t.Fatal(err)
				}
				defer r.Close()
				sb := box(t, lv, cfg)
				if out := sh(t, sb, scriptDeadline(lv, time.Minute), "LEVEL="+string(lv)+" python3 -c '"+strings.ReplaceAll(crossScript, "'", `'"'"'`)+"'"); strings.TrimSpace(out) != "apart" {
					t.Errorf("output %q", out)
				}
				select {
				case <-accepted:
					t.Error("the host's listener accepted a connection from the sandbox")
				default:
				}
				buf := make([]byte, 16)
				if n, _ := r.Read(buf); n > 0 {
					t.Errorf("the host's FIFO got %q", buf[:n])
				}
			})
		}
	})
}
