package airlock

import (
	"testing"

	"github.com/airlock-sandbox/airlock/internal/mounts"
	"github.com/airlock-sandbox/airlock/vfs"
)

// TestVFSFlags: buildVFS tells the paths in direct mounts (served as
// real_fs mounts here), and the paths whose every change the sandbox's
// mount is told of: those of memory mounts, and of overlays and
// read-only views of them, but not those of host directories or of a
// caller's own providers, which may change or be shared.
func TestVFSFlags(t *testing.T) {
	host := t.TempDir()
	mem := MountSpec{Type: MountMemory}
	c := &Config{VFS: VFSConfig{
		Mounts: map[string]MountSpec{
			"/work/mem": mem,
			"/m":        mem,
			"/m/ro":     {Type: MountMemory, Readonly: true},
			"/m/host":   {Type: MountRealFS, HostPath: host},
			"/ov":       {Type: MountOverlay, Upper: &mem, Lower: &mem},
			"/ov2":      {Type: MountOverlay, Upper: &mem, Lower: &MountSpec{Type: MountRealFS, HostPath: host}},
		},
		DirectMounts: map[string]DirectMount{"/work": {HostPath: host}, "/data": {HostPath: host, Readonly: true}},
		Providers:    map[string]vfs.Provider{"/own": vfs.NewMemory(vfs.MemoryOptions{})},
	}}
	v, err := buildVFS(c, nil, nil, true)
	if err != nil {
		t.Fatal(err)
	}
	defer v.close()
	for p, want := range map[string][2]bool{ // direct, reported
		"/work":       {true, false},
		"/work/a/b":   {true, false},
		"/work/mem":   {false, true},
		"/work/mem/x": {false, true},
		"/work/memo":  {true, false},
		"/data/x":     {true, false},
		"/m/x":        {false, true},
		"/m/ro/x":     {false, true},
		"/m/host/x":   {false, false},
		"/m/hostile":  {false, true},
		"/ov/x":       {false, true},
		"/ov2/x":      {false, false},
		"/own/x":      {false, false},
		"/elsewhere":  {false, false},
		"/":           {false, false},
	} {
		if got := [2]bool{v.direct.At(p), v.reporting.At(p)}; got != want {
			t.Errorf("%s: direct, reported = %v, want %v", p, got, want)
		}
	}
	// The view of /m, which the sandbox mounts: its own paths.
	r, ok := v.view("/m").(interface{ Reporting() mounts.Flags })
	if !ok {
		t.Fatal("a mount's view does not say what it reports")
	}
	if rep := r.Reporting(); !rep.At("/") || !rep.At("/x") || rep.At("/host/y") {
		t.Errorf("view of /m: %v", rep)
	}
}
