package initramfs_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/initramfs"
)

// TestCpioReads checks the archive against GNU cpio, when it is there.
func TestCpioReads(t *testing.T) {
	var buf bytes.Buffer
	w := initramfs.NewWriter(&buf)
	for _, err := range []error{
		w.Dir("dev", 0o755),
		w.CharDevice("dev/console", 0o600, 5, 1),
		w.File("init", 0o755, []byte("#!/bin/sh\necho hi\n")),
		w.File("empty", 0o644, nil),
		w.Symlink("sbin", "."),
		w.Close(),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	if buf.Len()%4 != 0 {
		t.Errorf("archive is %d bytes, not a multiple of 4", buf.Len())
	}
	if _, err := exec.LookPath("cpio"); err != nil {
		t.Skip("no cpio to read the archive back (apt-get install cpio)")
	}
	cmd := exec.Command("cpio", "-itv", "--quiet")
	cmd.Stdin = bytes.NewReader(buf.Bytes())
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("cpio -t: %v\n%s", err, out)
	}
	for _, want := range []string{"dev/console", "init", "empty", "sbin -> ."} {
		if !bytes.Contains(out, []byte(want)) {
			t.Errorf("cpio -t lacks %q:\n%s", want, out)
		}
	}
	if os.Geteuid() != 0 {
		return
	}
	dir := t.TempDir()
	cmd = exec.Command("cpio", "-idm", "--quiet")
	cmd.Dir = dir
	cmd.Stdin = bytes.NewReader(buf.Bytes())
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("cpio -i: %v\n%s", err, out)
	}
	b, err := os.ReadFile(filepath.Join(dir, "init"))
	if err != nil || string(b) != "#!/bin/sh\necho hi\n" {
		t.Errorf("init = %q, %v", b, err)
	}
	fi, err := os.Stat(filepath.Join(dir, "dev", "console"))
	if err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		t.Errorf("dev/console: %v, %v", fi, err)
	}
}
