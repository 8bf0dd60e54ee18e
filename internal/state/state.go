// Package state keeps the bookkeeping of sandboxes in a state directory, so
// that listing, inspecting, killing and removing sandboxes needs no daemon:
// each sandbox's supervisor records what it knows, and any airlock process
// of the same user reads it.
//
// Layout, under <home>/sandboxes (0700, owned by the user):
//
//	<id>/state.json       the Record (0600), replaced atomically (a synced
//	                      temporary file renamed over it)
//	<id>/supervisor.json  who supervises the sandbox (0600), written once
//	                      with the folder, so that a damaged state.json
//	                      does not hide a live sandbox
//	<id>/lock             flock held by every read-modify-write (0600)
//	<id>/ctl.sock         the control socket, created by the supervisor
//	<id>/logs/            logs (0700); LogPath is logs/main.log
//
// A sandbox folder is never seen half made or half removed: Register builds
// it under a hidden name and renames it into place, and Remove renames it
// to a hidden name before deleting it. Per-sandbox folders are opened
// through an os.Root and never through a symbolic link; every file is
// read within a bound, and only when it is a regular file.
//
// Liveness is decided by the supervisor's pid and start time, so a reused
// pid is not mistaken for a live sandbox: a record that says running whose
// supervisor is gone reads as crashed. Reading never writes: Get and List
// work, and Remove frees space, on a full disk.
//
// A state.json that cannot be read (empty, truncated, not a record, not a
// regular file, too large) does not make a sandbox unreachable: Get and
// List return what the folder still tells (the supervisor, from
// supervisor.json or from the process serving ctl.sock) with Damaged
// saying what is wrong and how to get rid of it, and Remove removes it.
package state

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/flock"
)

const (
	sandboxesDir   = "sandboxes"
	stateFile      = "state.json"
	configFile     = "config.json"
	supervisorFile = "supervisor.json"
	tmpFile        = ".state.json.tmp" // written only under the lock, or in a staging folder
	lockFile       = "lock"
	logsDir        = "logs"
	socketFile     = "ctl.sock"
	mainLog        = "main.log"

	// maxStateSize bounds state.json, when read and when written.
	maxStateSize = 1 << 20

	dirPerm  = 0o700
	filePerm = 0o600
)

// Store is the state directory <home>/sandboxes. Its methods may be used
// from several goroutines and processes at once.
type Store struct {
	dir string
}

// Open opens the state directory under home (the CLI passes airlock.Home()),
// creating home and home/sandboxes with mode 0700 when missing. The
// sandboxes directory must belong to the effective user; when it is
// accessible to group or others it is made private.
func Open(home string) (*Store, error) {
	if home == "" {
		return nil, errors.New("open state directory: no home directory given")
	}
	home, err := filepath.Abs(home)
	if err != nil {
		return nil, fmt.Errorf("open state directory: %w", err)
	}
	dir := filepath.Join(home, sandboxesDir)
	if err := os.MkdirAll(home, dirPerm); err != nil {
		return nil, fmt.Errorf("create state directory: %w", err)
	}
	if err := os.Mkdir(dir, dirPerm); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("create state directory: %w", err)
	}
	if err := makePrivate(dir); err != nil {
		return nil, err
	}
	return &Store{dir: dir}, nil
}

// makePrivate checks that dir is a directory of the effective user and sets
// its mode to 0700.
func makePrivate(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("open state directory: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("open state directory: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("state directory %s is not a directory: remove it, or set AIRLOCK_HOME to another directory", dir)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("state directory %s belongs to uid %d, not to you (uid %d): "+
			"have its owner remove it, or set AIRLOCK_HOME to a directory of your own", dir, st.Uid, os.Geteuid())
	}
	if fi.Mode().Perm() != dirPerm {
		if err := f.Chmod(dirPerm); err != nil {
			return fmt.Errorf("make state directory %s private: %w", dir, err)
		}
	}
	return nil
}

// Dir is the folder of sandbox id. id must be valid (see ValidateID), as
// the ids Register accepts and Resolve returns are.
func (s *Store) Dir(id string) string { return filepath.Join(s.dir, id) }

// SocketPath is the control socket of sandbox id.
func (s *Store) SocketPath(id string) string { return filepath.Join(s.dir, id, socketFile) }

// LogPath is the main log file of sandbox id, in its logs folder.
func (s *Store) LogPath(id string) string { return filepath.Join(s.dir, id, logsDir, mainLog) }

// Register records a new sandbox. It fails with ErrExists when the id is
// taken. An empty Status means StatusRunning and a zero CreatedAt means now.
// A running sandbox needs its Supervisor's pid.
func (s *Store) Register(rec Record) error {
	if rec.Status == "" {
		rec.Status = StatusRunning
	}
	if rec.CreatedAt.IsZero() {
		rec.CreatedAt = time.Now()
	}
	// Secret values never reach the disk, whatever the caller passed.
	rec.Config = Redact(rec.Config)
	if err := validate(rec); err != nil {
		return fmt.Errorf("register sandbox: %w", err)
	}
	root, err := s.openRoot()
	if err != nil {
		return fmt.Errorf("register sandbox %s: %w", rec.ID, err)
	}
	defer root.Close()
	if _, err := root.Lstat(rec.ID); err == nil {
		return exists(rec.ID)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("register sandbox %s: %w", rec.ID, err)
	}
	if rec.Name != "" {
		if err := ValidateName(rec.Name); err != nil {
			return fmt.Errorf("register sandbox %s: %w", rec.ID, err)
		}
	}
	staging := ".new-" + rec.ID + "-" + randomSuffix()
	if err := mkdirPrivate(root, staging); err != nil {
		return fmt.Errorf("register sandbox %s: %w", rec.ID, err)
	}
	if err := populate(root, staging, rec); err != nil {
		root.RemoveAll(staging)
		return fmt.Errorf("register sandbox %s: %w", rec.ID, err)
	}
	// rename(2) fails when the target is a non-empty directory (every
	// sandbox folder holds a state.json) or a file.
	if err := root.Rename(staging, rec.ID); err != nil {
		root.RemoveAll(staging)
		if _, lerr := root.Lstat(rec.ID); lerr == nil {
			return exists(rec.ID)
		}
		return fmt.Errorf("register sandbox %s: %w", rec.ID, err)
	}
	// The name is claimed once the folder it points at exists: a claim
	// whose folder is missing is one whose sandbox is gone, which the next
	// claimant takes over. The loser of a race for a name removes its
	// folder again.
	if rec.Name != "" {
		if err := claimName(root, rec.Name, rec.ID); err != nil {
			root.RemoveAll(rec.ID)
			return err
		}
	}
	return nil
}

// nameLink is the entry that claims a name: a symbolic link "@NAME" to
// the sandbox's id, made with symlink(2), which fails when the name is
// taken, so that two sandboxes never get one name. '@' is never in an
// id, so List and Resolve's walk of ids never see it.
func nameLink(name string) string { return "@" + name }

// claimName gives name to sandbox id. A name whose sandbox's folder is
// gone (removed by hand, or by a crash between the two steps) is taken
// over.
func claimName(root *os.Root, name, id string) error {
	if err := ValidateName(name); err != nil {
		return fmt.Errorf("register sandbox %s: %w", id, err)
	}
	for range 2 {
		err := root.Symlink(id, nameLink(name))
		if err == nil {
			return nil
		}
		if !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("register sandbox %s: name it %q: %w", id, name, err)
		}
		owner, rerr := root.Readlink(nameLink(name))
		if rerr != nil {
			return fmt.Errorf("register sandbox %s: name it %q: %w", id, name, rerr)
		}
		if _, lerr := root.Lstat(owner); lerr == nil || ValidateID(owner) != nil {
			return errorf(ErrExists, "the name %q is taken by sandbox %s: remove it (`airlock rm %s`) or choose another name", name, owner, name)
		}
		// Its sandbox is gone: take it over.
		if err := root.Remove(nameLink(name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("register sandbox %s: name it %q: %w", id, name, err)
		}
	}
	return errorf(ErrExists, "the name %q is being taken by another sandbox: choose another name", name)
}

// releaseName removes the claim of sandbox id on name, if it is id's.
func releaseName(root *os.Root, name, id string) {
	if ValidateName(name) != nil {
		return
	}
	if owner, err := root.Readlink(nameLink(name)); err == nil && owner == id {
		_ = root.Remove(nameLink(name))
	}
}

// byName is the id of the sandbox called name, if there is one.
func byName(root *os.Root, name string) (string, bool) {
	if ValidateName(name) != nil {
		return "", false
	}
	id, err := root.Readlink(nameLink(name))
	if err != nil || ValidateID(id) != nil {
		return "", false
	}
	if fi, err := root.Lstat(id); err != nil || !fi.IsDir() {
		return "", false
	}
	return id, true
}

// populate fills a new sandbox folder: logs/, lock, config.json (the
// redacted configuration alone, for people and tools that read the folder)
// and state.json.
func populate(root *os.Root, name string, rec Record) error {
	sub, err := root.OpenRoot(name)
	if err != nil {
		return err
	}
	defer sub.Close()
	if err := mkdirPrivate(sub, logsDir); err != nil {
		return err
	}
	f, err := sub.OpenFile(lockFile, os.O_RDWR|os.O_CREATE|os.O_EXCL, filePerm)
	if err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if len(rec.Config) > 0 {
		if err := writeConfig(sub, rec.Config); err != nil {
			return err
		}
	}
	if err := writeSupervisor(sub, rec); err != nil {
		return err
	}
	return writeRecord(sub, rec)
}

// writeConfig writes config.json into a folder no one else sees yet.
func writeConfig(sub *os.Root, cfg json.RawMessage) error {
	if err := writeNew(sub, configFile, append(cfg, '\n')); err != nil {
		return fmt.Errorf("write config: %w", err)
	}
	return nil
}

// writeSupervisor writes supervisor.json into a folder no one else sees
// yet. It is never changed afterwards.
func writeSupervisor(sub *os.Root, rec Record) error {
	b, err := json.Marshal(supervisorInfo{Supervisor: rec.Supervisor, Kind: rec.Kind, CreatedAt: rec.CreatedAt,
		Isolation: rec.Isolation, Image: rec.Image, Command: rec.Command})
	if err != nil {
		return fmt.Errorf("encode supervisor: %w", err)
	}
	if err := writeNew(sub, supervisorFile, append(b, '\n')); err != nil {
		return fmt.Errorf("write supervisor: %w", err)
	}
	return nil
}

// Update changes the record of sandbox id: it reads it, calls fn and writes
// the result, holding the sandbox's lock so that concurrent updates from
// this or other processes are applied one after the other. fn sees the
// record as stored (no liveness applied) and must not change its ID. A
// record that cannot be read fails with ErrDamaged; its supervisor, which
// knows the whole record, may Replace it.
func (s *Store) Update(id string, fn func(*Record)) error {
	if err := ValidateID(id); err != nil {
		return fmt.Errorf("update sandbox: %w", err)
	}
	root, err := s.openRoot()
	if err != nil {
		return fmt.Errorf("update sandbox %s: %w", id, err)
	}
	defer root.Close()
	sub, unlock, err := lockSandbox(root, id)
	if err != nil {
		return wrap(err, "update sandbox %s", id)
	}
	defer sub.Close()
	defer unlock()
	rec, err := readRecord(sub, id)
	if err != nil {
		return wrap(err, "update sandbox %s", id)
	}
	fn(&rec)
	if rec.ID != id {
		return fmt.Errorf("update sandbox %s: the id cannot change (to %q)", id, rec.ID)
	}
	if err := validate(rec); err != nil {
		return fmt.Errorf("update sandbox %s: %w", id, err)
	}
	if err := writeRecord(sub, rec); err != nil {
		return fmt.Errorf("update sandbox %s: %w", id, err)
	}
	return nil
}

// Rename gives sandbox id the name name, which no other sandbox may
// have (ErrExists), and frees the name it had.
func (s *Store) Rename(id, name string) error {
	if err := ValidateID(id); err != nil {
		return fmt.Errorf("rename sandbox: %w", err)
	}
	if err := ValidateName(name); err != nil {
		return fmt.Errorf("rename sandbox %s: %w", id, err)
	}
	root, err := s.openRoot()
	if err != nil {
		return fmt.Errorf("rename sandbox %s: %w", id, err)
	}
	defer root.Close()
	sub, unlock, err := lockSandbox(root, id)
	if err != nil {
		return wrap(err, "rename sandbox %s", id)
	}
	defer sub.Close()
	defer unlock()
	rec, err := readRecord(sub, id)
	if err != nil {
		return wrap(err, "rename sandbox %s", id)
	}
	if rec.Name == name {
		return nil
	}
	if err := claimName(root, name, id); err != nil {
		return err
	}
	old := rec.Name
	rec.Name = name
	if err := writeRecord(sub, rec); err != nil {
		releaseName(root, name, id)
		return fmt.Errorf("rename sandbox %s: %w", id, err)
	}
	if old != "" {
		releaseName(root, old, id)
	}
	return nil
}

// Replace writes rec as the record of an existing sandbox, whatever the
// record holds now, even when it cannot be read: it is how a supervisor,
// which knows the whole record, repairs a damaged one.
func (s *Store) Replace(rec Record) error {
	rec.Config = Redact(rec.Config)
	if err := validate(rec); err != nil {
		return fmt.Errorf("replace the record of sandbox: %w", err)
	}
	root, err := s.openRoot()
	if err != nil {
		return fmt.Errorf("replace the record of sandbox %s: %w", rec.ID, err)
	}
	defer root.Close()
	sub, unlock, err := lockSandbox(root, rec.ID)
	if err != nil {
		return wrap(err, "replace the record of sandbox %s", rec.ID)
	}
	defer sub.Close()
	defer unlock()
	if fi, err := sub.Lstat(stateFile); err == nil && fi.IsDir() {
		// rename(2) cannot put a file over a directory.
		if err := sub.RemoveAll(stateFile); err != nil {
			return fmt.Errorf("replace the record of sandbox %s: %w", rec.ID, err)
		}
	}
	if err := writeRecord(sub, rec); err != nil {
		return fmt.Errorf("replace the record of sandbox %s: %w", rec.ID, err)
	}
	return nil
}

// Get returns the record of sandbox id. When it says running but its
// supervisor is gone, it is returned as crashed with
// ReasonSupervisorDied; nothing is written. When state.json cannot be
// read, Get returns what the folder still tells, with Damaged set (see
// the package documentation), and no error.
func (s *Store) Get(id string) (Record, error) {
	if err := ValidateID(id); err != nil {
		return Record{}, fmt.Errorf("read state of sandbox: %w", err)
	}
	root, err := s.openRoot()
	if err != nil {
		return Record{}, fmt.Errorf("read state of sandbox %s: %w", id, err)
	}
	defer root.Close()
	rec, err := s.read(root, id)
	if err != nil {
		return Record{}, wrap(err, "read state of sandbox %s", id)
	}
	return rec, nil
}

// List returns every sandbox, newest first, as Get returns them. Nothing
// is written.
func (s *Store) List() ([]Record, error) {
	root, err := s.openRoot()
	if err != nil {
		return nil, fmt.Errorf("list sandboxes: %w", err)
	}
	defer root.Close()
	entries, err := readDir(root)
	if err != nil {
		return nil, fmt.Errorf("list sandboxes: %w", err)
	}
	recs := make([]Record, 0, len(entries))
	for _, e := range entries {
		rec, err := s.read(root, e.Name())
		switch {
		case errors.Is(err, ErrNotFound):
			continue // removed meanwhile
		case err != nil:
			// The folder itself cannot be opened (it was replaced
			// meanwhile, or its permissions changed).
			rec = Record{ID: e.Name(), Status: StatusCrashed, Reason: ReasonUnreadable,
				Damaged: fmt.Sprintf("%s cannot be read (%v): remove it with `airlock rm %s`", s.Dir(e.Name()), err, e.Name())}
			if fi, err := root.Lstat(e.Name()); err == nil {
				rec.CreatedAt = fi.ModTime()
			}
		}
		recs = append(recs, rec)
	}
	slices.SortFunc(recs, func(a, b Record) int {
		if c := b.CreatedAt.Compare(a.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return recs, nil
}

// idPrefix begins every sandbox id airlock makes.
const idPrefix = "sb-"

// Resolve turns what a user typed into a sandbox id: a sandbox's name
// or its exact id wins, otherwise a prefix of exactly one id, with or
// without its "sb-". It fails with ErrNotFound or ErrAmbiguous, with a
// message for the user.
func (s *Store) Resolve(prefix string) (string, error) {
	if ValidateID(prefix) != nil && ValidateName(prefix) != nil {
		return "", notFound(prefix)
	}
	root, err := s.openRoot()
	if err != nil {
		return "", fmt.Errorf("find sandbox %q: %w", prefix, err)
	}
	defer root.Close()
	if id, ok := byName(root, prefix); ok {
		return id, nil
	}
	if ValidateID(prefix) != nil {
		return "", notFound(prefix)
	}
	entries, err := readDir(root)
	if err != nil {
		return "", fmt.Errorf("find sandbox %q: %w", prefix, err)
	}
	// As docker takes any unique prefix of a container's id, the hex
	// part alone names a sandbox too: "4a1f" is "sb-4a1f...".
	long := prefix
	if !strings.HasPrefix(prefix, idPrefix) {
		long = idPrefix + prefix
	}
	var matches []string
	for _, e := range entries {
		switch name := e.Name(); {
		case name == prefix, name == long:
			return name, nil
		case strings.HasPrefix(name, prefix), strings.HasPrefix(name, long):
			matches = append(matches, name)
		}
	}
	switch len(matches) {
	case 0:
		return "", notFound(prefix)
	case 1:
		return matches[0], nil
	}
	slices.Sort(matches)
	const shown = 5
	list := strings.Join(matches[:min(len(matches), shown)], ", ")
	if len(matches) > shown {
		list += ", ..."
	}
	return "", errorf(ErrAmbiguous, "%q matches several sandboxes (%s): give more of the id", prefix, list)
}

// TrimStopped removes the records of sandboxes of the given kinds that
// stopped cleanly (StatusStopped, readable), all but the keep that
// stopped last, and returns how many it removed. Crashed and damaged
// records stay, for prune and for the user to see. Records that another
// process removes meanwhile are skipped.
func (s *Store) TrimStopped(keep int, kinds ...string) (int, error) {
	recs, err := s.List()
	if err != nil {
		return 0, fmt.Errorf("trim stopped sandboxes: %w", err)
	}
	recs = slices.DeleteFunc(recs, func(r Record) bool {
		return r.Status != StatusStopped || r.Damaged != "" || !slices.Contains(kinds, r.Kind)
	})
	if len(recs) <= keep {
		return 0, nil
	}
	slices.SortFunc(recs, func(a, b Record) int {
		if c := b.StoppedAt.Compare(a.StoppedAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	removed := 0
	var errs []error
	for _, r := range recs[keep:] {
		switch err := s.Remove(r.ID); {
		case err == nil:
			removed++
		case !errors.Is(err, ErrNotFound):
			errs = append(errs, err)
		}
	}
	return removed, errors.Join(errs...)
}

// Remove deletes the folder of sandbox id. It refuses, with ErrRunning, a
// sandbox that is running with its supervisor alive, judged as Get does
// when its state cannot be read. It writes nothing before deleting, so it
// works on a full disk; a lock file that cannot be used does not stop it.
func (s *Store) Remove(id string) error {
	if err := ValidateID(id); err != nil {
		return fmt.Errorf("remove sandbox: %w", err)
	}
	root, err := s.openRoot()
	if err != nil {
		return fmt.Errorf("remove sandbox %s: %w", id, err)
	}
	defer root.Close()
	sub, unlock, err := lockSandbox(root, id)
	if errors.Is(err, errLockFile) {
		// A damaged lock file must not keep the folder: remove it
		// unlocked. Nothing else changes a folder whose lock cannot be
		// taken.
		sub, err = openSandbox(root, id)
		unlock = func() {}
	}
	if err != nil {
		return wrap(err, "remove sandbox %s", id)
	}
	rec, err := readRecord(sub, id)
	switch {
	case err == nil:
		markCrashed(&rec)
	case errors.Is(err, ErrDamaged):
		rec = s.fromFolder(sub, id, err)
	}
	if rec.Status == StatusRunning {
		unlock()
		sub.Close()
		return errorf(ErrRunning, "sandbox %s is running: stop it with `airlock kill %s` first", id, id)
	}
	// Move the folder away while holding its lock: an Update waiting for
	// the lock then finds it gone, and List never sees a half-removed one.
	trash := ".rm-" + id + "-" + randomSuffix()
	err = root.Rename(id, trash)
	if err != nil {
		// A rename may need room that a full disk does not have (a
		// longer name in the directory): remove the folder where it
		// is, still holding the lock.
		sub.Close()
		rerr := root.RemoveAll(id)
		unlock()
		if rec.Name != "" {
			releaseName(root, rec.Name, id)
		}
		if rerr != nil {
			return fmt.Errorf("remove sandbox %s: %w", id, errors.Join(err, rerr))
		}
		return nil
	}
	unlock()
	sub.Close()
	if rec.Name != "" {
		releaseName(root, rec.Name, id)
	}
	if err := root.RemoveAll(trash); err != nil {
		return fmt.Errorf("remove sandbox %s: %w", id, err)
	}
	return nil
}

func (s *Store) openRoot() (*os.Root, error) {
	root, err := os.OpenRoot(s.dir)
	if err != nil {
		return nil, fmt.Errorf("open state directory: %w", err)
	}
	return root, nil
}

// readDir lists the entries of root that may be sandbox folders: real
// directories (not symbolic links) with a valid id as name. Staging and
// trash folders have hidden names and are skipped.
func readDir(root *os.Root) ([]fs.DirEntry, error) {
	d, err := root.Open(".")
	if err != nil {
		return nil, err
	}
	defer d.Close()
	entries, err := d.ReadDir(-1)
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(entries, func(e fs.DirEntry) bool {
		return !e.IsDir() || ValidateID(e.Name()) != nil
	}), nil
}

// openSandbox opens the folder of sandbox id, refusing anything but a real
// directory.
func openSandbox(root *os.Root, id string) (*os.Root, error) {
	fi, err := root.Lstat(id)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, notFound(id)
	}
	if err != nil {
		return nil, err
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		return nil, fmt.Errorf("%s is a symbolic link, not a sandbox folder: refusing to follow it", filepath.Join(root.Name(), id))
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("%s is not a sandbox folder", filepath.Join(root.Name(), id))
	}
	sub, err := root.OpenRoot(id)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, notFound(id)
	}
	if err != nil {
		return nil, err
	}
	// Make sure what was opened is what was checked.
	if err := sameDir(root, id, sub); err != nil {
		sub.Close()
		return nil, err
	}
	return sub, nil
}

// sameDir checks that sub is still the folder named id in root: not
// renamed away, removed or replaced.
func sameDir(root *os.Root, id string, sub *os.Root) error {
	fi, err := root.Lstat(id)
	if errors.Is(err, fs.ErrNotExist) {
		return notFound(id)
	}
	if err != nil {
		return err
	}
	sfi, err := sub.Stat(".")
	if err != nil {
		return err
	}
	if !os.SameFile(fi, sfi) {
		return notFound(id)
	}
	return nil
}

// lockSandbox opens the folder of sandbox id and takes its lock. unlock
// releases the lock; the caller closes sub after it.
func lockSandbox(root *os.Root, id string) (sub *os.Root, unlock func(), err error) {
	sub, err = openSandbox(root, id)
	if err != nil {
		return nil, nil, err
	}
	f, err := openRegular(sub, lockFile, os.O_RDWR|os.O_CREATE)
	if err != nil {
		sub.Close()
		return nil, nil, fmt.Errorf("%w: %w", errLockFile, err)
	}
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		f.Close()
		sub.Close()
		return nil, nil, fmt.Errorf("lock: %w", err)
	}
	unlock = func() { flock.Release(f) }
	// The folder may have been removed while we waited.
	if err := sameDir(root, id, sub); err != nil {
		unlock()
		sub.Close()
		return nil, nil, err
	}
	return sub, unlock, nil
}

// read reads the record of sandbox id in root, with liveness applied;
// a damaged record is replaced by what the folder tells (fromFolder).
func (s *Store) read(root *os.Root, id string) (Record, error) {
	sub, err := openSandbox(root, id)
	if err != nil {
		return Record{}, err
	}
	defer sub.Close()
	rec, err := readRecord(sub, id)
	switch {
	case errors.Is(err, ErrDamaged):
		return s.fromFolder(sub, id, err), nil
	case err != nil:
		return Record{}, err
	}
	markCrashed(&rec)
	return rec, nil
}

// readRecord reads state.json in the folder of sandbox id. A file that
// is missing, not a regular file, too large or not a valid record of
// this sandbox fails with an error that wraps ErrDamaged.
func readRecord(sub *os.Root, id string) (Record, error) {
	b, err := readBounded(sub, stateFile, maxStateSize)
	if err != nil {
		return Record{}, damaged(err)
	}
	var rec Record
	if err := json.Unmarshal(b, &rec); err != nil {
		if len(bytes.TrimSpace(b)) == 0 {
			return Record{}, damaged(errors.New("it is empty"))
		}
		return Record{}, damaged(fmt.Errorf("it is not a valid record: %w", err))
	}
	if rec.ID != id {
		return Record{}, damaged(fmt.Errorf("it is the record of sandbox %q", rec.ID))
	}
	if err := validate(rec); err != nil {
		return Record{}, damaged(fmt.Errorf("it is not a valid record: %w", err))
	}
	rec.Damaged = ""
	return rec, nil
}

// writeRecord replaces state.json in sub atomically: the new record goes
// to a temporary file, which is synced and renamed over it, so that a
// crash leaves the old record or the new one, never part of one. The
// caller holds the lock, or sub is a staging folder no one else knows.
func writeRecord(sub *os.Root, rec Record) error {
	rec.Damaged = ""
	b, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("encode state: %w", err)
	}
	b = append(b, '\n')
	if len(b) > maxStateSize {
		return fmt.Errorf("encode state: %d bytes, more than the %d allowed", len(b), maxStateSize)
	}
	// A temporary file left by a writer that died is the lock holder's
	// to remove.
	if fi, err := sub.Lstat(tmpFile); err == nil {
		if fi.IsDir() {
			err = sub.RemoveAll(tmpFile)
		} else {
			err = sub.Remove(tmpFile)
		}
		if err != nil {
			return fmt.Errorf("write state: %w", err)
		}
	}
	err = writeNew(sub, tmpFile, b)
	if err == nil {
		err = sub.Rename(tmpFile, stateFile)
	}
	if err != nil {
		sub.Remove(tmpFile)
		return fmt.Errorf("write state: %w", err)
	}
	return nil
}

// mkdirPrivate creates directory name in root with mode 0700, whatever the
// umask.
func mkdirPrivate(root *os.Root, name string) error {
	if err := root.Mkdir(name, dirPerm); err != nil {
		return err
	}
	d, err := root.Open(name)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Chmod(dirPerm)
}

// dead reports whether rec says running while its supervisor is gone.
func dead(rec Record) bool {
	return rec.Status == StatusRunning && !rec.Supervisor.Alive()
}

// markCrashed says, in rec, that the supervisor of a running sandbox
// died. It changes nothing, and returns false, when the sandbox is not
// running or its supervisor is alive. When the supervisor died is not
// known: StoppedAt stays zero.
func markCrashed(rec *Record) bool {
	if !dead(*rec) {
		return false
	}
	rec.Status = StatusCrashed
	rec.Reason = ReasonSupervisorDied
	return true
}

// validate checks the fields Register and Update rely on.
func validate(rec Record) error {
	if err := ValidateID(rec.ID); err != nil {
		return err
	}
	switch rec.Status {
	case StatusRunning:
		if rec.Supervisor.PID <= 0 {
			return fmt.Errorf("sandbox %s is running but has no supervisor pid", rec.ID)
		}
	case StatusStopped, StatusCrashed:
	default:
		return fmt.Errorf("sandbox %s: unknown status %q", rec.ID, rec.Status)
	}
	return nil
}

func notFound(id string) error {
	return errorf(ErrNotFound, "no sandbox matches %q: `airlock ps -a` lists every sandbox", id)
}

func exists(id string) error {
	return errorf(ErrExists, "a sandbox named %q already exists: pick another name, or remove it with `airlock rm %s`", id, id)
}

// wrap adds what was being done to err, unless err already carries a
// message for the user.
func wrap(err error, format string, args ...any) error {
	if _, ok := errors.AsType[*userError](err); ok {
		return err
	}
	return fmt.Errorf(format+": %w", append(args, err)...)
}

func randomSuffix() string {
	b := make([]byte, 6)
	rand.Read(b)
	return hex.EncodeToString(b)
}
