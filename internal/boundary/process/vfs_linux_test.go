package process

import (
	"os"
	"strings"
	"testing"

	"github.com/fxamacker/cbor/v2"
	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/agentproto"
	"github.com/airlock-sandbox/airlock/internal/boundary"
	"github.com/airlock-sandbox/airlock/internal/vfsfuse"
	"github.com/airlock-sandbox/airlock/vfs"
)

// The supervisor writes, as root, to the FUSE connection a hand-over
// names (abort, read-ahead): one that is not the sandbox's own (another
// uid's mount, or a number that names no connection) is refused, and
// the mount with it.
func TestHandOverChecksConnection(t *testing.T) {
	if os.Geteuid() != 0 || !vfsfuse.ConnectionsListed() {
		t.Skip("needs root and the kernel's list of FUSE connections")
	}
	// A FUSE mount of this process's, owned by root (user_id=0).
	dir := t.TempDir()
	dev, err := vfsfuse.OpenDevice(nil)
	if err != nil {
		t.Skip(err)
	}
	defer dev.Close()
	if err := vfsfuse.Mount(dev, dir); err != nil {
		t.Fatal(err)
	}
	defer vfsfuse.Unmount(dir)
	var st unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, dir, unix.AT_STATX_DONT_SYNC, 0, &st); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name         string
		owner        int
		major, minor uint32
		want         string
	}{
		{"another uid's connection", 12345, st.Dev_major, st.Dev_minor, "belongs to uid 0"},
		{"no connection", 0, 8, 0, "no such file"},
	} {
		h, theirs, err := newHostVFS([]boundary.Mount{{Target: "/m", Provider: vfs.NewMemory(vfs.MemoryOptions{})}}, vfsfuse.Options{}, c.owner, nil)
		if err != nil {
			t.Fatal(err)
		}
		msg, _ := cbor.Marshal(agentproto.FUSEHandover{Target: "/m", DevMajor: c.major, DevMinor: c.minor})
		fd, err := unix.Dup(int(dev.Fd()))
		if err != nil {
			t.Fatal(err)
		}
		err = h.serveOne(msg, unix.UnixRights(fd), 0)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error saying %q", c.name, err, c.want)
		}
		h.close()
		theirs.Close()
	}
}
