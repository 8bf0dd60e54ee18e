package owners

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/image/store"
	"github.com/airlock-sandbox/airlock/internal/image/untar"
	"github.com/airlock-sandbox/airlock/internal/subid"
	"github.com/airlock-sandbox/airlock/internal/testbin"
)

const envChild = "OWNERS_UNPRIV_CHILD"

type ent struct {
	name, link, body string
	typ              byte
	mode             int64
	uid, gid         int
}

func layer(t *testing.T, ents ...ent) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range ents {
		h := &tar.Header{Name: e.name, Linkname: e.link, Typeflag: e.typ, Mode: e.mode, Uid: e.uid, Gid: e.gid, Format: tar.FormatPAX}
		if h.Typeflag == 0 {
			h.Typeflag = tar.TypeReg
			h.Size = int64(len(e.body))
		}
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(e.body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestMappedUnprivileged runs TestMapped as a user without root, who
// has subordinate ids (Debian's useradd gives them).
func TestMappedUnprivileged(t *testing.T) {
	if os.Getenv(envChild) != "" {
		t.Skip("already the unprivileged run")
	}
	dir, err := testbin.Dir("owners-test-bin-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	bins, err := testbin.Build(dir, "airlock-guest")
	if err != nil {
		t.Fatal(err)
	}
	res := testbin.RerunUnprivileged(t, "^TestMapped$", 2*time.Minute, envChild+"=1", "AIRLOCK_AGENT="+bins[0])
	if r := res["TestMapped"]; r.Status != "PASS" {
		t.Errorf("TestMapped unprivileged: %+v", r)
	}
}

// TestMapped unpacks, links, measures, runs on and removes a tree whose
// files belong to the caller's subordinate ids, and checks that hostile
// layers and a failing reader are refused through the worker as they
// are without it.
func TestMapped(t *testing.T) {
	if os.Getenv(envChild) == "" {
		t.Skip("runs unprivileged, from TestMappedUnprivileged")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	o, err := Detect(os.Getenv("AIRLOCK_AGENT"))
	if err != nil {
		t.Fatalf("Detect: %v", err)
	}
	m, ok := o.(*Mapped)
	if !ok {
		t.Fatalf("Detect gave %T, want *Mapped", o)
	}
	sub, err := subid.Lookup(os.Getuid())
	if err != nil {
		t.Fatal(err)
	}
	base := t.TempDir()
	root := filepath.Join(base, "rootfs")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	u, err := m.Unpacker(ctx, root, untar.Options{Limits: untar.Limits{Bytes: 1 << 20, Entries: 100}})
	if err != nil {
		t.Fatal(err)
	}
	err = u.Apply(ctx, bytes.NewReader(layer(t,
		ent{name: "home/", typ: tar.TypeDir, mode: 0o755},
		ent{name: "home/app/", typ: tar.TypeDir, mode: 0o700, uid: 1000, gid: 1000},
		ent{name: "home/app/notes", body: "mine", mode: 0o600, uid: 1000, gid: 1000},
		ent{name: "bin/", typ: tar.TypeDir, mode: 0o755},
		ent{name: "bin/su", body: "#!", mode: 0o4755},
		ent{name: "old", body: "x"},
	)))
	if err != nil {
		t.Fatalf("apply the first layer: %v", err)
	}
	if err := u.Apply(ctx, bytes.NewReader(layer(t, ent{name: ".wh.old"}, ent{name: "srv", body: "s", uid: 33, gid: 65535}))); err != nil {
		t.Fatalf("apply the second layer: %v", err)
	}
	if st := u.Stats(); st.Entries != 8 || st.Bytes != 8 {
		t.Errorf("stats %+v, want 8 entries and 8 bytes", st)
	}
	// A layer past the limits is refused with untar's error.
	err = u.Apply(ctx, bytes.NewReader(layer(t, ent{name: "big", body: strings.Repeat("b", 2<<20)})))
	if _, ok := errors.AsType[*untar.LimitError](err); !ok {
		t.Errorf("a layer past the limit: %v, want an *untar.LimitError", err)
	}
	// So is a path out of the tree; nothing lands outside.
	if err := u.Apply(ctx, bytes.NewReader(layer(t, ent{name: "../escape", body: "x"}))); err == nil {
		t.Error("a layer with ../escape was applied")
	}
	if _, err := os.Lstat(filepath.Join(base, "escape")); err == nil {
		t.Error("../escape was written outside the tree")
	}
	// A reader that fails stops the worker, and the unpacker with it.
	failing := io.MultiReader(bytes.NewReader(layer(t, ent{name: "a", body: "a"})[:600]), iotestErr{})
	if err := u.Apply(ctx, failing); !errors.Is(err, errBroken) {
		t.Errorf("a failing reader: %v, want its error", err)
	}
	if err := u.Apply(ctx, bytes.NewReader(layer(t, ent{name: "b", body: "b"}))); !errors.Is(err, errBroken) {
		t.Errorf("a layer after the worker was stopped: %v", err)
	}
	if err := u.Close(); err != nil {
		t.Errorf("close: %v", err)
	}

	// On the host, files belong to the ids that map to the layer's.
	owner := func(p string) (uint32, uint32, uint32) {
		t.Helper()
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err != nil {
			t.Fatal(err)
		}
		return st.Uid, st.Gid, st.Mode & 0o7777
	}
	first := sub.UID.First - 1 // the host id of id 1 is First
	wantApp := first + 1000
	if uid, gid, mode := owner(filepath.Join(root, "home", "app")); uid != wantApp || gid != sub.GID.First-1+1000 || mode != 0o700 {
		t.Errorf("home/app on the host: %d:%d %o, want %d:%d 700", uid, gid, mode, wantApp, sub.GID.First-1+1000)
	}
	if uid, _, mode := owner(filepath.Join(root, "bin", "su")); uid != uint32(os.Getuid()) || mode != 0o4755 {
		t.Errorf("bin/su on the host: uid %d mode %o, want the caller's %d and 4755", uid, mode, os.Getuid())
	}
	if _, gid, _ := owner(filepath.Join(root, "srv")); gid != sub.GID.First-1+65535 {
		t.Errorf("srv's gid on the host: %d, want %d", gid, sub.GID.First-1+65535)
	}
	if _, err := os.Lstat(filepath.Join(root, "old")); err == nil {
		t.Error("the whiteout did not remove old")
	}
	// The caller alone cannot read home/app; the worker can.
	if _, _, err := store.Usage(root); err == nil {
		t.Error("the caller measured a tree with a folder of another owner's, 0700")
	}
	if size, files, err := m.Usage(ctx, root); err != nil || files != 7 || size <= 0 {
		t.Errorf("usage through the worker: %d bytes, %d files, %v; want 7 (the root, 6 entries)", size, files, err)
	}
	// A copy of hard links keeps owners and shares the files.
	copyDir := filepath.Join(base, "copy")
	if err := m.LinkTree(ctx, root, copyDir); err != nil {
		t.Fatalf("link the tree: %v", err)
	}
	if uid, _, mode := owner(filepath.Join(copyDir, "home", "app")); uid != wantApp || mode != 0o700 {
		t.Errorf("the copy's home/app: uid %d mode %o", uid, mode)
	}
	out, err := m.Run(ctx, "stat", "-c", "%u:%g %h", filepath.Join(copyDir, "home", "app", "notes"))
	if err != nil || string(out) != "1000:1000 2\n" {
		t.Errorf("stat through the worker: %q %v, want 1000:1000 with 2 links", out, err)
	}
	// Both trees go, whoever owns their files.
	for _, d := range []string{copyDir, root} {
		if err := m.RemoveTree(ctx, d); err != nil {
			t.Errorf("remove %s: %v", d, err)
		}
		if _, err := os.Lstat(d); err == nil {
			t.Errorf("%s is still there", d)
		}
	}
	// A worker that is asked nonsense says so.
	if err := m.LinkTree(ctx, filepath.Join(base, "missing"), filepath.Join(base, "x")); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("link of a missing tree: %v", err)
	}
}

var errBroken = errors.New("the layer's source broke")

type iotestErr struct{}

func (iotestErr) Read([]byte) (int, error) { return 0, errBroken }

// Root's trees are its own work, and keep the layers' owners.
func TestDetectRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	o, err := Detect("")
	if err != nil || o.ID() != store.OwnersNative {
		t.Fatalf("Detect as root: %v %v, want native", o.ID(), err)
	}
}
