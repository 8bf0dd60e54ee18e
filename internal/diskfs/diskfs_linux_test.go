package diskfs

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("loop devices need root")
	}
	if _, err := os.Stat("/dev/loop-control"); err != nil {
		t.Skipf("no loop devices here: %v", err)
	}
}

// boundLoops lists the loop devices whose label is name.
func boundLoops(t *testing.T, name string) []string {
	t.Helper()
	devs, _ := filepath.Glob("/sys/block/loop*/loop")
	var out []string
	for _, d := range devs {
		dev := "/dev/" + filepath.Base(filepath.Dir(d))
		f, err := os.Open(dev)
		if err != nil {
			continue
		}
		info, err := unix.IoctlLoopGetStatus64(int(f.Fd()))
		f.Close()
		if err == nil && strings.TrimRight(string(info.File_name[:]), "\x00") == "airlock "+name {
			out = append(out, dev)
		}
	}
	return out
}

// A disk is a detached ext4 mount of the size and inodes asked, owned by
// the uid asked, that fills up with ENOSPC; when it is closed nothing is
// left: no loop device, no file but the template.
func TestMake(t *testing.T) {
	needRoot(t)
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := filepath.Join(t.TempDir(), "disks")
	name := "diskfs-test-" + filepath.Base(t.TempDir())
	spec := Spec{Dir: dir, SizeBytes: 64 << 20, Inodes: 2048, UID: 1234, GID: 5678, Name: name}
	d, err := Make(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	m := int(d.Mount().Fd())
	var st unix.Stat_t
	if err := unix.Fstat(m, &st); err != nil {
		t.Fatal(err)
	}
	if st.Uid != 1234 || st.Gid != 5678 || st.Mode&0o777 != 0o755 {
		t.Errorf("root directory: uid %d gid %d mode %o, want 1234 5678 755", st.Uid, st.Gid, st.Mode&0o777)
	}
	var fs unix.Statfs_t
	if err := unix.Fstatfs(m, &fs); err != nil {
		t.Fatal(err)
	}
	size := int64(fs.Blocks) * fs.Bsize
	if fs.Type != unix.EXT4_SUPER_MAGIC || size > spec.SizeBytes || size < spec.SizeBytes*9/10 || fs.Files < 2048 || fs.Files > 4096 {
		t.Errorf("statfs: type %x, %d bytes, %d inodes; want ext4 of about %d bytes and 2048 inodes", fs.Type, size, fs.Files, spec.SizeBytes)
	}
	if ents, err := os.ReadDir(filepath.Join("/proc/self/fd", strconv.Itoa(m))); err != nil || len(ents) != 0 {
		t.Errorf("the new disk holds %v (%v); want nothing, not even lost+found", ents, err)
	}
	if loops := boundLoops(t, name); len(loops) != 1 {
		t.Errorf("loop devices of the disk: %q, want one", loops)
	}
	// Full is ENOSPC, in bytes and in files.
	fd, err := unix.Openat(m, "fill", unix.O_CREAT|unix.O_WRONLY|unix.O_CLOEXEC, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1<<20)
	var written int64
	for {
		n, err := unix.Write(fd, buf)
		written += int64(max(n, 0))
		if err != nil {
			if !errors.Is(err, unix.ENOSPC) {
				t.Errorf("write: %v, want ENOSPC", err)
			}
			break
		}
	}
	unix.Close(fd)
	if written > spec.SizeBytes || written < spec.SizeBytes*3/4 {
		t.Errorf("%d MiB written on a disk of %d MiB", written>>20, spec.SizeBytes>>20)
	}
	if err := unix.Unlinkat(m, "fill", 0); err != nil {
		t.Fatal(err)
	}
	files := 0
	for ; files < 100000; files++ {
		fd, err := unix.Openat(m, "f"+strconv.Itoa(files), unix.O_CREAT|unix.O_WRONLY|unix.O_CLOEXEC, 0o600)
		if err != nil {
			if !errors.Is(err, unix.ENOSPC) {
				t.Errorf("create: %v, want ENOSPC", err)
			}
			break
		}
		unix.Close(fd)
	}
	if files > int(fs.Files) || files < 2048-16 {
		t.Errorf("%d files made on a disk of %d inodes", files, fs.Files)
	}

	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if loops := boundLoops(t, name); len(loops) != 0 {
		t.Errorf("loop devices left after Close: %q", loops)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 1 || !strings.HasPrefix(ents[0].Name(), "ext4-") {
		t.Errorf("left in the disk directory: %v; want only the template", ents)
	}
	// The template serves the next disk of that shape.
	d2, err := Make(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	d2.Close()
}

// Make refuses a directory others can write (the templates in it reach
// the kernel's ext4 driver) and a template it did not make.
func TestMakeRefusesSharedDir(t *testing.T) {
	needRoot(t)
	t.Parallel()
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "disks")
	if err := os.Mkdir(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	spec := Spec{Dir: dir, SizeBytes: 16 << 20, Inodes: 1024, Name: "shared"}
	if _, err := Make(ctx, spec); err == nil || !strings.Contains(err.Error(), "no one else can write") {
		t.Errorf("Make in a directory of mode 0777: %v", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	// A template that is group-writable is not used.
	tmpl := filepath.Join(dir, "ext4-16777216-1024.img")
	if err := os.WriteFile(tmpl, make([]byte, 16<<20), 0o666); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(tmpl, 0o666); err != nil {
		t.Fatal(err)
	}
	if _, err := Make(ctx, spec); err == nil || !strings.Contains(err.Error(), "remove it") {
		t.Errorf("Make with a template of mode 0666: %v", err)
	}
	for _, bad := range []Spec{{Dir: dir, SizeBytes: 1000, Inodes: 1}, {Dir: dir, SizeBytes: 4096, Inodes: 0}, {Dir: "relative", SizeBytes: 4096, Inodes: 1}} {
		if _, err := Make(ctx, bad); err == nil {
			t.Errorf("Make(%+v) succeeded", bad)
		}
	}
}
