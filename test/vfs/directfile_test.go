package vfs_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
)

// TestDirectMountFile binds host files, as docker's -v binds one: read
// only over a file the image has, read-write at a path the image lacks
// (made, with its directory). Writes reach the host file; the sandbox
// cannot remove or replace the file, nor write the read-only one. The
// gvisor and vm levels, which serve direct mounts through airlock's file
// server, refuse a file before anything starts and say where it works.
func TestDirectMountFile(t *testing.T) {
	eachLevel(t, func(t *testing.T, lv airlock.Isolation) {
		t.Parallel()
		dir := t.TempDir()
		os.Chmod(dir, 0o755)
		ro, rw := filepath.Join(dir, "ro.json"), filepath.Join(dir, "rw.txt")
		for _, f := range []string{ro, rw} {
			if err := os.WriteFile(f, []byte("host\n"), 0o666); err != nil {
				t.Fatal(err)
			}
			os.Chmod(f, 0o666)
		}
		cfg := airlock.Config{Isolation: lv, VFS: airlock.VFSConfig{DirectMounts: map[string]airlock.DirectMount{
			"/etc/hostname":      {HostPath: ro, Readonly: true},
			"/srv/app/state.txt": {HostPath: rw},
		}}}
		if lv != airlock.IsolationProcess {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			sb, err := airlock.Create(ctx, cfg)
			if err == nil {
				sb.Close()
				t.Fatal("a host file bound at this level")
			}
			if !strings.Contains(err.Error(), "is a file") || !strings.Contains(err.Error(), "process level") {
				t.Fatalf("refusal %q does not say why and where a file binds", err)
			}
			return
		}
		sb := box(t, lv, cfg)
		out := sh(t, sb, scriptDeadline(lv, time.Minute), `
cat /etc/hostname /srv/app/state.txt
echo sandbox >> /srv/app/state.txt
echo no >> /etc/hostname 2>/dev/null && echo wrote-ro
rm /srv/app/state.txt 2>/dev/null && echo removed
mv /srv/app/state.txt /srv/app/other 2>/dev/null && echo moved
[ -f /srv/app/state.txt ] && echo still-there
`)
		if want := "host\nhost\nstill-there\n"; out != want {
			t.Errorf("in the sandbox:\n%s\nwant:\n%s", out, want)
		}
		if b, _ := os.ReadFile(rw); string(b) != "host\nsandbox\n" {
			t.Errorf("the host's read-write file holds %q", b)
		}
		if b, _ := os.ReadFile(ro); string(b) != "host\n" {
			t.Errorf("the host's read-only file holds %q", b)
		}
	})
}
