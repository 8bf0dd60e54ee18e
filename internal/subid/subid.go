// Package subid finds the subordinate ids of an unprivileged user: the
// ranges that /etc/subuid and /etc/subgid grant it, and the set-id
// helpers (newuidmap and newgidmap, from shadow's uidmap package) that
// map them into a user namespace the user makes. It is how a sandbox
// started without root gets more ids than its caller's own, as rootless
// container engines do.
package subid

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Files and helpers, as shadow names them.
const (
	SubUIDFile = "/etc/subuid"
	SubGIDFile = "/etc/subgid"
	UIDHelper  = "newuidmap"
	GIDHelper  = "newgidmap"
)

// MaxIDs is the most subordinate ids a sandbox uses: its ids 1 to 65536,
// as rootless container engines map them.
const MaxIDs = 65536

// Range is count consecutive host ids from First.
type Range struct {
	First, Count uint32
}

// End is one past the range's last id.
func (r Range) End() uint64 { return uint64(r.First) + uint64(r.Count) }

// IDs is what an unprivileged user can map beside its own ids.
type IDs struct {
	User     string // the user's name
	UID, GID Range  // at most MaxIDs each
	// UIDHelper and GIDHelper are the paths of newuidmap and newgidmap.
	UIDHelper, GIDHelper string
}

// Missing is returned when a user has no usable subordinate ids: Why
// says what is missing and Fix the command that would give them.
type Missing struct {
	Why, Fix string
}

func (m *Missing) Error() string {
	if m.Fix == "" {
		return m.Why
	}
	return m.Why + "; fix: " + m.Fix
}

// Lookup finds the subordinate ids of host uid uid, from the system's
// files and PATH. The error is a *Missing when something is not there.
func Lookup(uid int) (IDs, error) {
	name := strconv.Itoa(uid)
	if u, err := user.LookupId(name); err == nil {
		name = u.Username
	}
	return LookupWith(uid, name, SubUIDFile, SubGIDFile, FindHelper)
}

// LookupWith is Lookup for the user uid called name, with the files
// and the helper search given.
func LookupWith(uid int, name, subuid, subgid string, find func(string) (string, error)) (IDs, error) {
	ids := IDs{User: name}
	var missing []string
	var err error
	if ids.UIDHelper, err = find(UIDHelper); err != nil {
		missing = append(missing, err.Error())
	}
	if ids.GIDHelper, err = find(GIDHelper); err != nil {
		missing = append(missing, err.Error())
	}
	if len(missing) > 0 {
		return ids, &Missing{Why: strings.Join(missing, "; "), Fix: "apt-get install uidmap (Debian, Ubuntu), dnf install shadow-utils (Fedora), or your distribution's package of newuidmap and newgidmap"}
	}
	var noRange []string
	ids.UID, err = rangeFor(subuid, name, uid)
	if err != nil {
		noRange = append(noRange, err.Error())
	}
	ids.GID, err = rangeFor(subgid, name, uid)
	if err != nil {
		noRange = append(noRange, err.Error())
	}
	if len(noRange) > 0 {
		first := suggestFirst(subuid, subgid)
		return ids, &Missing{
			Why: strings.Join(noRange, "; "),
			Fix: fmt.Sprintf("usermod --add-subuids %d-%d --add-subgids %d-%d %s (as root)", first, first+MaxIDs-1, first, first+MaxIDs-1, name),
		}
	}
	return ids, nil
}

// rangeFor reads the first range that file grants to the user, named
// or by number, cut to MaxIDs.
func rangeFor(file, name string, uid int) (Range, error) {
	f, err := os.Open(file)
	if errors.Is(err, os.ErrNotExist) {
		return Range{}, fmt.Errorf("%s does not exist, so user %s has no subordinate ids", file, name)
	}
	if err != nil {
		return Range{}, fmt.Errorf("read %s: %w", file, err)
	}
	defer f.Close()
	for _, e := range parse(f) {
		if (e.owner == name || e.owner == strconv.Itoa(uid)) && e.Count > 0 {
			e.Count = min(e.Count, MaxIDs)
			return e.Range, nil
		}
	}
	return Range{}, fmt.Errorf("%s grants user %s no subordinate ids", file, name)
}

type entry struct {
	owner string
	Range
}

// parse reads the lines "owner:first:count" of a subordinate id file,
// skipping what does not parse (shadow does the same).
func parse(r io.Reader) []entry {
	var out []entry
	sc := bufio.NewScanner(io.LimitReader(r, 16<<20))
	for sc.Scan() {
		f := strings.Split(strings.TrimSpace(sc.Text()), ":")
		if len(f) != 3 || f[0] == "" || strings.HasPrefix(f[0], "#") {
			continue
		}
		first, err1 := strconv.ParseUint(f[1], 10, 32)
		count, err2 := strconv.ParseUint(f[2], 10, 32)
		if err1 != nil || err2 != nil || first+count > 1<<32-1 {
			continue
		}
		out = append(out, entry{owner: f[0], Range: Range{First: uint32(first), Count: uint32(count)}})
	}
	return out
}

// suggestFirst is the start of a block of MaxIDs ids that no entry of
// the files uses, on shadow's own grid (100000, 165536, ...).
func suggestFirst(files ...string) uint64 {
	var all []entry
	for _, file := range files {
		if f, err := os.Open(file); err == nil {
			all = append(all, parse(f)...)
			f.Close()
		}
	}
	const base = 100000
	for first := uint64(base); first+MaxIDs < 1<<32; first += MaxIDs {
		free := true
		for _, e := range all {
			if uint64(e.First) < first+MaxIDs && e.End() > first {
				free = false
				break
			}
		}
		if free {
			return first
		}
	}
	return base
}

// FindHelper finds a set-id helper on PATH or in the usual places, and
// checks that it can do its work (see HelperUsable).
func FindHelper(name string) (string, error) {
	path, err := exec.LookPath(name)
	if err != nil {
		for _, dir := range []string{"/usr/bin", "/usr/sbin", "/bin", "/sbin"} {
			if p := filepath.Join(dir, name); isExecutable(p) {
				path, err = p, nil
				break
			}
		}
	}
	if err != nil {
		return "", fmt.Errorf("%s is not installed", name)
	}
	return path, HelperUsable(path)
}

// HelperUsable says whether the helper at path can map ids for an
// unprivileged user: it must be set-uid root or carry file capabilities.
func HelperUsable(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	st, _ := fi.Sys().(*syscall.Stat_t)
	if fi.Mode()&os.ModeSetuid != 0 && st != nil && st.Uid == 0 {
		return nil
	}
	if sz, err := unix.Getxattr(path, "security.capability", nil); err == nil && sz > 0 {
		return nil
	}
	return fmt.Errorf("%s is neither set-uid root nor given capabilities, so it cannot map ids (reinstall it)", path)
}

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}
