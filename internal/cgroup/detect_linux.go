//go:build linux

package cgroup

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/containerd/cgroups/v3"
	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/kernel"
)

// needed are the controllers a sandbox's user group is limited with.
var needed = []string{"memory", "pids", "cpu"}

// v1Optional are v1 controllers used when present: cpuacct reports CPU
// usage, freezer pauses a sandbox.
var v1Optional = []string{"cpuacct", "freezer"}

// airlockDir is the directory under <base> that holds all sandbox groups.
const airlockDir = "airlock"

// sysFiles names the proc files detection reads; tests substitute fakes.
type sysFiles struct {
	mountinfo string // /proc/self/mountinfo
	cgroup    string // /proc/self/cgroup
}

var procSelf = sysFiles{mountinfo: "/proc/self/mountinfo", cgroup: "/proc/self/cgroup"}

// v1Mount is the mount point of the v1 hierarchy that carries controller.
// Two controllers share dir when they are co-mounted (e.g. "cpu,cpuacct").
type v1Mount struct {
	controller string
	dir        string
}

// layout is where groups are created for the calling user.
type layout struct {
	info    Info
	v2Mount string    // V2: mount point of the unified hierarchy
	v2Base  string    // V2: <base>
	v1      []v1Mount // V1: the hierarchies in use, needed ones first
	// known are all <base>/airlock directories airlock could have used
	// here, whatever the current choice (for Exists).
	known []string
}

// roots returns the <base>/airlock directories of the chosen hierarchy.
func (l layout) roots() []string {
	if l.info.Version == V2 {
		return []string{filepath.Join(l.v2Base, airlockDir)}
	}
	var out []string
	for _, m := range l.v1 {
		if d := filepath.Join(m.dir, airlockDir); !slices.Contains(out, d) {
			out = append(out, d)
		}
	}
	return out
}

// Detect reports which cgroup hierarchy airlock would use for the calling
// user and whether it can create groups there.
func Detect() Info { return detect(procSelf).info }

// mountEntry is the part of a /proc/self/mountinfo line detection needs.
type mountEntry struct {
	root, point, fstype string
	superOpts           []string
}

// finding is why a hierarchy cannot be used and how to fix that.
type finding struct {
	problem, fix string
}

func detect(f sysFiles) layout {
	mounts, err := readMountinfo(f.mountinfo)
	if err != nil {
		return layout{info: Info{Reason: fmt.Sprintf("cannot read mounts: %v; airlock needs /proc mounted", err)}}
	}
	// The caller's own v2 cgroup, the base for unprivileged users.
	_, ownV2, err := cgroups.ParseCgroupFileUnified(f.cgroup)
	if err != nil {
		ownV2 = ""
	}

	var v2 *mountEntry
	v1 := map[string]mountEntry{}
	for i, m := range mounts {
		switch m.fstype {
		case "cgroup2":
			if v2 == nil {
				v2 = &mounts[i]
			}
		case "cgroup":
			for _, o := range m.superOpts {
				if _, dup := v1[o]; !dup && (slices.Contains(needed, o) || slices.Contains(v1Optional, o)) {
					v1[o] = m
				}
			}
		}
	}

	var lay layout
	var v2Find, v1Find *finding
	for _, c := range append(slices.Clone(needed), v1Optional...) {
		if m, ok := v1[c]; ok {
			lay.known = append(lay.known, filepath.Join(m.point, airlockDir))
		}
	}
	if v2 != nil {
		lay.v2Mount = v2.point
		lay.known = append(lay.known, filepath.Join(v2.point, airlockDir))
		own := ownV2Dir(*v2, ownV2)
		if own != "" && own != v2.point {
			lay.known = append(lay.known, filepath.Join(own, airlockDir))
		}
		base, ctrls, find := checkV2(*v2, own, len(v1) > 0)
		if kernel.AtLeast(kernel.Release(), 5, 2) {
			ctrls = append(ctrls, "freezer") // cgroup.freeze, in every group
		}
		lay.info = Info{Version: V2, Controllers: ctrls, Base: base}
		if find == nil {
			lay.v2Base = base
			lay.info.Writable = true
			return lay
		}
		v2Find = find
	}
	if len(v1) > 0 {
		inUse, ctrls, find := checkV1(v1)
		var dirs []string
		for _, m := range inUse {
			if !slices.Contains(dirs, m.dir) {
				dirs = append(dirs, m.dir)
			}
		}
		if slices.ContainsFunc(inUse, func(m v1Mount) bool { return m.controller == "freezer" }) {
			ctrls = append(ctrls, "freezer")
		}
		lay.info = Info{Version: V1, Controllers: ctrls, Base: strings.Join(dirs, " ")}
		if find == nil {
			lay.v1 = inUse
			lay.info.Writable = true
			return lay
		}
		v1Find = find
	}

	switch {
	case v1Find != nil && v2Find != nil:
		fix := v1Find.fix
		if v2Find.fix == v2Fix {
			// v2 has the controllers; delegating them would help too.
			fix = v2Fix
		}
		lay.info.Reason = v1Find.problem + ", and " + v2Find.problem + "; " + fix
	case v1Find != nil:
		lay.info.Reason = v1Find.problem + "; " + v1Find.fix
	case v2Find != nil:
		lay.info.Reason = v2Find.problem + "; " + v2Find.fix
	default:
		lay.info.Reason = "no cgroup hierarchy is mounted (neither cgroup2 nor cgroup v1 memory, pids, cpu in /proc/self/mountinfo); mount cgroup2 at /sys/fs/cgroup"
	}
	return lay
}

const v1Fix = "run airlock as root"

// ownV2Dir returns the directory of the caller's v2 cgroup ownPath, or ""
// when it is not visible below the mount m.
func ownV2Dir(m mountEntry, ownPath string) string {
	if ownPath == "" {
		return ""
	}
	rel, err := filepath.Rel(m.root, ownPath)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return ""
	}
	return filepath.Join(m.point, rel)
}

// checkV2 picks <base> in the unified hierarchy m: its root when writable,
// else the caller's own cgroup own when delegated. It returns the base and
// the needed controllers it offers, or a finding when it is not usable.
func checkV2(m mountEntry, own string, haveV1 bool) (string, []string, *finding) {
	base := m.point
	werr := canCreateV2(base)
	if werr != nil && own != "" && own != m.point {
		base, werr = own, canCreateV2(own)
	}
	ctrls := v2Controllers(base)
	var missing []string
	for _, c := range needed {
		if !slices.Contains(ctrls, c) {
			missing = append(missing, c)
		}
	}
	switch {
	case len(ctrls) == 0 && haveV1:
		// Hybrid setup: writing here would not help.
		return base, ctrls, &finding{
			problem: fmt.Sprintf("cgroup v2 at %s offers none of memory, pids, cpu (they are bound to cgroup v1 hierarchies)", base),
			fix:     v1Fix,
		}
	case werr != nil && base == m.point:
		return base, ctrls, &finding{
			problem: fmt.Sprintf("cgroup v2 hierarchy %s is not writable by uid %d (%v)", base, os.Geteuid(), werr),
			fix:     v2Fix,
		}
	case werr != nil:
		return base, ctrls, &finding{
			problem: fmt.Sprintf("neither cgroup v2 hierarchy %s nor this process's cgroup %s is writable by uid %d (%v)", m.point, base, os.Geteuid(), werr),
			fix:     v2Fix,
		}
	case len(missing) > 0:
		return base, ctrls, &finding{
			problem: fmt.Sprintf("cgroup v2 group %s lacks the %s controller(s) in cgroup.controllers", base, strings.Join(missing, ", ")),
			fix:     "enable them in the parent group's cgroup.subtree_control or delegate them (systemd: Delegate=yes), or run airlock as root",
		}
	}
	return base, ctrls, nil
}

const v2Fix = "run airlock as root or start it in a delegated cgroup (systemd-run --user --scope -p Delegate=yes airlock ...)"

// canCreateV2 reports whether groups can be created below dir and
// controllers enabled for them.
func canCreateV2(dir string) error {
	for _, p := range []string{dir, filepath.Join(dir, "cgroup.procs"), filepath.Join(dir, "cgroup.subtree_control")} {
		if err := writable(p); err != nil {
			return err
		}
	}
	return nil
}

// v2Controllers returns the needed controllers listed in dir/cgroup.controllers.
func v2Controllers(dir string) []string {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
	if err != nil {
		return nil
	}
	have := strings.Fields(string(b))
	var out []string
	for _, c := range needed {
		if slices.Contains(have, c) {
			out = append(out, c)
		}
	}
	return out
}

// checkV1 returns the v1 hierarchies to use and the needed controllers that
// are mounted, or a finding when a needed one is missing or not writable.
func checkV1(mounts map[string]mountEntry) ([]v1Mount, []string, *finding) {
	var inUse []v1Mount
	var ctrls []string
	var find *finding
	for _, c := range needed {
		m, ok := mounts[c]
		if !ok {
			if find == nil {
				find = &finding{
					problem: fmt.Sprintf("no cgroup v1 %s hierarchy is mounted", c),
					fix:     fmt.Sprintf("mount it (mount -t cgroup -o %s cgroup /sys/fs/cgroup/%s) or boot with cgroup v2", c, c),
				}
			}
			continue
		}
		ctrls = append(ctrls, c)
		inUse = append(inUse, v1Mount{controller: c, dir: m.point})
		if err := writable(m.point); err != nil && find == nil {
			find = &finding{
				problem: fmt.Sprintf("cgroup v1 %s hierarchy %s is not writable by uid %d (%v)", c, m.point, os.Geteuid(), err),
				fix:     v1Fix,
			}
		}
	}
	for _, c := range v1Optional {
		if m, ok := mounts[c]; ok && writable(m.point) == nil {
			inUse = append(inUse, v1Mount{controller: c, dir: m.point})
		}
	}
	return inUse, ctrls, find
}

// writable reports whether the effective user may write path.
func writable(path string) error {
	return unix.Faccessat(unix.AT_FDCWD, path, unix.W_OK, unix.AT_EACCESS)
}

func readMountinfo(path string) ([]mountEntry, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return parseMountinfo(f)
}

// parseMountinfo parses lines like
//
//	36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - cgroup cgroup rw,memory
//
// (see proc(5)); the separator "-" follows a variable number of optional fields.
func parseMountinfo(r io.Reader) ([]mountEntry, error) {
	var out []mountEntry
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		sep := slices.Index(fields, "-")
		if sep < 6 || len(fields) < sep+4 {
			return nil, fmt.Errorf("malformed mountinfo line %q", sc.Text())
		}
		out = append(out, mountEntry{
			root:      unescapeMount(fields[3]),
			point:     unescapeMount(fields[4]),
			fstype:    fields[sep+1],
			superOpts: strings.Split(fields[sep+3], ","),
		})
	}
	return out, sc.Err()
}

// unescapeMount undoes the octal escapes (\040 for space, ...) of mountinfo paths.
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
