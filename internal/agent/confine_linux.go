package agent

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"github.com/landlock-lsm/go-landlock/landlock"
	llsys "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/seccomp"
)

// confine applies landlock, no_new_privs, an empty capability set and the
// seccomp filter to every thread of the calling process. Commands started
// afterwards inherit all of it. The caller must be locked to its OS thread
// and start every command from it: the bounding set is emptied on that
// thread only (see dropCapabilities).
//
// It returns notes on confinement that this kernel could not provide.
func confine(cfg ZygoteConfig) ([]string, error) {
	var notes []string
	if cfg.Landlock {
		notes = landlockNotes()
		// The sandbox's root is its own tree: grant it in full and nothing
		// else, so that files reached through another mount namespace
		// (magic links, passed descriptors) stay out of reach. Scoping
		// also cuts abstract unix sockets and signals to outside the domain.
		ll := landlock.V7.BestEffort()
		if err := ll.RestrictPaths(landlock.RWDirs("/").WithRefer().WithIoctlDev()); err != nil {
			return nil, fmt.Errorf("apply landlock filesystem rules: %w", err)
		}
		if err := ll.RestrictScoped(); err != nil {
			return nil, fmt.Errorf("apply landlock scoping: %w", err)
		}
	}
	if err := allThreads(unix.SYS_PRCTL, unix.PR_SET_NO_NEW_PRIVS, 1, 0); err != nil {
		return nil, fmt.Errorf("set no_new_privs: %w", err)
	}
	if err := dropCapabilities(); err != nil {
		return nil, err
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
	return notes, nil
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
		return errors.New("the agent was built with cgo; build airlock-guest with CGO_ENABLED=0")
	}
	if errno != 0 {
		return errno
	}
	return nil
}

// dropCapabilities empties every capability set for good: root inside the
// user namespace gets nothing back on exec (SECBIT_NOROOT locked, bounding
// set emptied) and cannot regain anything through setuid binaries.
//
// The bounding set is per-thread and needs one prctl per capability, so it
// is emptied on the calling thread only, with plain syscalls: children
// inherit the bounding set of the thread that forks them, and every
// command is forked from this thread. Doing it on all threads would cost a
// stop-the-world round per capability. Securebits, ambient and the
// permitted/effective sets are then cleared on every thread.
func dropCapabilities() error {
	last := lastCap()
	for c := 0; c <= last; c++ {
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
	bits := uintptr(secbitNoRoot | secbitNoRootLocked | secbitNoSetuidFixup |
		secbitNoSetuidFixupLocked | secbitKeepCapsLocked |
		secbitNoCapAmbientRaise | secbitNoCapAmbientRaiseLocked)
	if err := allThreads(unix.SYS_PRCTL, unix.PR_SET_SECUREBITS, bits, 0); err != nil {
		return fmt.Errorf("set securebits: %w", err)
	}
	if err := allThreads(unix.SYS_PRCTL, unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0); err != nil && !errors.Is(err, syscall.EINVAL) {
		return fmt.Errorf("clear ambient capabilities: %w", err)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := allThreads(unix.SYS_CAPSET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&data[0])), 0); err != nil {
		return fmt.Errorf("clear capabilities: %w", err)
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
