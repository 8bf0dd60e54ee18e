package agent

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	llsys "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/seccomp"
)

// RootCaps are the capabilities root inside a sandbox holds, in the
// sandbox's own user namespace only: what package managers, su, chown
// and a POSIX file system's owner rules need (a container engine's
// default set, less raw sockets, mknod, chroot, file capabilities and
// audit). They act only on the sandbox's own ids and objects: on a file
// whose owner is not one of the sandbox's ids (the host's /usr, say)
// they give nothing, and whatever else a capability could reach is
// refused by the seccomp filter (mount, namespaces, ...). Other uids
// inside hold none, unless a set-uid-root program of the sandbox gives
// them root's.
var RootCaps = []int{
	unix.CAP_CHOWN, unix.CAP_DAC_OVERRIDE, unix.CAP_FOWNER, unix.CAP_FSETID,
	unix.CAP_KILL, unix.CAP_SETGID, unix.CAP_SETUID, unix.CAP_NET_BIND_SERVICE,
}

// confine applies landlock, the seccomp filter and the sandbox's
// capability bounds to every thread of the calling process; commands
// started afterwards inherit all of it. The caller must be locked to its
// OS thread and start every command from it: the bounding set is cut on
// that thread only (see limitCapabilities).
//
// Root inside keeps RootCaps and set-id programs work, so no_new_privs
// is not set: landlock and seccomp are installed with CAP_SYS_ADMIN of
// the sandbox's namespace instead, before it is dropped, and they hold
// across every execution, set-id or not. With cfg.NoRootCaps, commands
// hold nothing at all and no_new_privs is set.
//
// It returns notes on confinement that this kernel could not provide.
func confine(cfg ZygoteConfig) ([]string, error) {
	var notes []string
	if cfg.NoRootCaps {
		if err := allThreads(unix.SYS_PRCTL, unix.PR_SET_NO_NEW_PRIVS, 1, 0); err != nil {
			return nil, fmt.Errorf("set no_new_privs: %w", err)
		}
	}
	if cfg.Landlock {
		notes = landlockNotes()
		if err := restrictToRoot(); err != nil {
			return nil, err
		}
	}
	if cfg.Seccomp {
		filter, err := seccomp.Build(seccomp.Profile{AllowPtrace: cfg.AllowPtrace})
		if err != nil {
			return nil, fmt.Errorf("build seccomp filter: %w", err)
		}
		if err := seccomp.Install(filter); err != nil {
			return nil, fmt.Errorf("install seccomp filter: %w", err)
		}
	}
	keep := RootCaps
	if cfg.NoRootCaps {
		keep = nil
	}
	if err := limitCapabilities(keep, !cfg.Sentry); err != nil {
		return nil, err
	}
	return notes, nil
}

// restrictToRoot applies a landlock domain to every thread: the
// sandbox's root is its own tree, granted in full, and nothing else, so
// that files reached through another mount namespace (magic links,
// passed descriptors) stay out of reach. Scoping (ABI 6) also cuts
// abstract unix sockets and signals to outside the domain. Every right
// this kernel knows, up to ABI 7's, is handled, as landlock.V7's best
// effort would; the library's own enforcement is not used since it sets
// no_new_privs, which would make set-id programs inert.
func restrictToRoot() error {
	abi, err := llsys.LandlockGetABIVersion()
	if err != nil || abi < 1 {
		return nil // said by landlockNotes
	}
	var attr llsys.RulesetAttr
	switch {
	case abi >= 5:
		attr.HandledAccessFS = 1<<16 - 1 // up to IoctlDev
	case abi >= 3:
		attr.HandledAccessFS = 1<<15 - 1 // up to Truncate
	case abi == 2:
		attr.HandledAccessFS = 1<<14 - 1 // up to Refer
	default:
		attr.HandledAccessFS = 1<<13 - 1
	}
	if abi >= 6 {
		attr.Scoped = llsys.ScopeAbstractUnixSocket | llsys.ScopeSignal
	}
	ruleset, err := llsys.LandlockCreateRuleset(&attr, 0)
	if err != nil {
		return fmt.Errorf("apply landlock filesystem rules: create a ruleset: %w", err)
	}
	defer unix.Close(ruleset)
	root, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("apply landlock filesystem rules: %w", err)
	}
	defer unix.Close(root)
	if err := llsys.LandlockAddPathBeneathRule(ruleset, &llsys.PathBeneathAttr{AllowedAccess: attr.HandledAccessFS, ParentFd: root}, 0); err != nil {
		return fmt.Errorf("apply landlock filesystem rules: grant the root: %w", err)
	}
	if err := allThreads(unix.SYS_LANDLOCK_RESTRICT_SELF, uintptr(ruleset), 0, 0); err != nil {
		return fmt.Errorf("apply landlock filesystem rules: %w", err)
	}
	return nil
}

// landlockNotes says what the best-effort landlock configuration cannot
// enforce on this kernel, so the downgrade is reported, never silent.
func landlockNotes() []string {
	abi, err := llsys.LandlockGetABIVersion()
	return landlockNotesFor(abi, err)
}

func landlockNotesFor(abi int, err error) []string {
	switch {
	case err != nil || abi < 1:
		return []string{"landlock is not available in this kernel (Linux >= 5.13 with landlock in the lsm= list): user commands are confined by namespaces and seccomp only, not also by landlock"}
	case abi < 6:
		return []string{fmt.Sprintf("landlock ABI %d: the sandbox's file tree is enforced, but scoping of abstract unix sockets and signals needs ABI 6 (Linux 6.12)", abi)}
	}
	return nil
}

// allThreads runs a syscall on every thread. Capability sets,
// no_new_privs and securebits are per-thread attributes.
func allThreads(trap, a1, a2, a3 uintptr) error {
	_, _, errno := syscall.AllThreadsSyscall(trap, a1, a2, a3)
	if errno == syscall.ENOTSUP {
		return errors.New("the agent was built with cgo: build airlock-guest (or airlock, which serves as its own agent when no airlock-guest is beside it) with CGO_ENABLED=0, as make build does: CGO_ENABLED=0 go install github.com/airlock-sandbox/airlock/cmd/airlock@latest")
	}
	if errno != 0 {
		return errno
	}
	return nil
}

// limitCapabilities bounds, for good, what the spawner and every
// command after it can hold to keep: the bounding set is cut to keep,
// securebits are locked at the kernel's usual rules (root gains the
// bounding set on execution, and loses everything when it changes to
// another uid; no ambient capabilities), and the spawner itself keeps
// keep (it kills commands of any uid) and no inheritable ones. With keep
// empty, SECBIT_NOROOT is locked on as well: no uid, root included,
// gains anything on execution. Changing securebits needs CAP_SETPCAP,
// which no command holds; the locks say so twice.
//
// The bounding set is per-thread and needs one prctl per capability, so
// it is cut on the calling thread only, with plain syscalls: children
// inherit the bounding set of the thread that forks them, and every
// command is forked from this thread. Doing it on all threads would cost
// a stop-the-world round per capability. Securebits, ambient and the
// other sets are then set on every thread.
//
// gVisor's Sentry has no securebits but SECBIT_KEEP_CAPS (lock is false
// there): the bounding set alone then bounds what root gains on
// execution, and the Sentry's own rules for uid changes apply.
func limitCapabilities(keep []int, lock bool) error {
	var mask [2]uint32
	for _, c := range keep {
		mask[c/32] |= 1 << (c % 32)
	}
	last := lastCap()
	for c := 0; c <= last; c++ {
		if c < 64 && mask[c/32]&(1<<(c%32)) != 0 {
			continue
		}
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil && !errors.Is(err, syscall.EINVAL) {
			return fmt.Errorf("drop capability %d from the bounding set: %w", c, err)
		}
	}
	// linux/securebits.h; x/sys/unix does not export these.
	const (
		secbitNoRoot                  = 1 << 0
		secbitNoRootLocked            = 1 << 1
		secbitNoSetuidFixup           = 1 << 2
		secbitNoSetuidFixupLocked     = 1 << 3
		secbitKeepCapsLocked          = 1 << 5
		secbitNoCapAmbientRaise       = 1 << 6
		secbitNoCapAmbientRaiseLocked = 1 << 7
	)
	// The set-uid fixup stays on (locked): a root process that becomes
	// another uid, as su does, loses its capabilities, unless it asked
	// to keep them (PR_SET_KEEPCAPS, as setpriv does), which gives
	// nothing it did not hold. With nothing to keep, that is locked too.
	bits := uintptr(secbitNoRootLocked | secbitNoSetuidFixupLocked |
		secbitNoCapAmbientRaise | secbitNoCapAmbientRaiseLocked)
	if len(keep) == 0 {
		bits |= secbitNoRoot | secbitNoSetuidFixup | secbitKeepCapsLocked
	}
	if lock {
		if err := allThreads(unix.SYS_PRCTL, unix.PR_SET_SECUREBITS, bits, 0); err != nil {
			return fmt.Errorf("set securebits: %w", err)
		}
	}
	if err := allThreads(unix.SYS_PRCTL, unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0); err != nil && !errors.Is(err, syscall.EINVAL) {
		return fmt.Errorf("clear ambient capabilities: %w", err)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	for i := range data {
		data[i].Effective, data[i].Permitted = mask[i], mask[i]
	}
	if err := allThreads(unix.SYS_CAPSET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&data[0])), 0); err != nil {
		return fmt.Errorf("limit capabilities: %w", err)
	}
	return nil
}

func lastCap() int {
	b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap")
	if err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && n > 0 && n < 64 {
			return n
		}
	}
	return 63 // PR_CAPBSET_DROP returns EINVAL past the last one
}
