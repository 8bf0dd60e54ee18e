package store

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// A process forked while a sandbox uses an image holds a copy of the
// use lock's descriptor until its exec (close-on-exec); one that waits
// there must not keep the image in use once the sandbox released it.
// The test gives a child such a copy for good, which is the same to the
// lock.
func TestUseEndsWhileAChildHoldsItsDescriptor(t *testing.T) {
	c := open(t)
	ctx := context.Background()
	key := Key([]byte("used"))
	if _, err := c.Make(ctx, key, fillWith(map[string]string{"f": "x"})); err != nil {
		t.Fatal(err)
	}
	release, err := c.Use(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	h, _ := hexOf(key)
	fd := -1
	fds, _ := os.ReadDir("/proc/self/fd")
	for _, e := range fds {
		if l, _ := os.Readlink(filepath.Join("/proc/self/fd", e.Name())); l == c.usePath(h) {
			fmt.Sscan(e.Name(), &fd)
		}
	}
	if fd < 0 {
		t.Fatalf("no descriptor of this process names %s", c.usePath(h))
	}
	dup, err := unix.Dup(fd)
	if err != nil {
		t.Fatal(err)
	}
	copyOf := os.NewFile(uintptr(dup), "use lock")
	child := exec.Command("sleep", "60")
	child.ExtraFiles = []*os.File{copyOf}
	if err := child.Start(); err != nil {
		t.Skip(err)
	}
	copyOf.Close()
	defer func() {
		child.Process.Kill()
		child.Wait()
	}()
	release()
	if removed, err := c.Remove(ctx, key); err != nil || len(removed) != 1 {
		t.Fatalf("Remove after the use ended, a child still holding its descriptor: %v %v", removed, err)
	}
}
