package agent

import (
	"crypto/rand"
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// A sandbox on the host's kernel would otherwise see values that name the
// host rather than itself, and that two sandboxes on one host share:
//
//   - /proc/cmdline, the host kernel's command line (on a VM host it
//     names the hypervisor's devices, ports and agents);
//   - /proc/sys/kernel/random/boot_id, the host's boot;
//   - the host's uptime and boot time, in /proc/uptime, btime in
//     /proc/stat, sysinfo(2), the start times in /proc/PID/stat and
//     CLOCK_MONOTONIC and CLOCK_BOOTTIME themselves.
//
// The spawner gives commands their own: files bound over the first two, and
// a time namespace whose monotonic and boot clocks start at the sandbox's
// start. The rest of /proc that a sandbox sees is either its own
// namespaces' (hostname, network, IPC, PIDs, cgroup, mounts), already
// masked (see procMasked), or says what the kernel is rather than which
// machine runs it (/proc/version, cpuinfo, config.gz: what uname(2) and
// CPUID tell anyway).

// HostMask is what a spawner on the host's kernel shows commands in place
// of the host's identity. The agent makes it once per sandbox, so that a
// spawner started again after a crash shows the same values.
type HostMask struct {
	// BootID replaces /proc/sys/kernel/random/boot_id.
	BootID string `cbor:"bootid"`
	// Cmdline replaces /proc/cmdline.
	Cmdline string `cbor:"cmdline"`
	// Clocks: commands get a time namespace whose CLOCK_MONOTONIC and
	// CLOCK_BOOTTIME read 0 when the sandbox started, MonotonicSec and
	// BoottimeSec (whole seconds) of the kernel's.
	Clocks       bool  `cbor:"clocks,omitempty"`
	MonotonicSec int64 `cbor:"mono"`
	BoottimeSec  int64 `cbor:"boot"`
}

// sandboxCmdline is the kernel command line commands see: no host
// options, nothing a program would act on.
const sandboxCmdline = "BOOT_IMAGE=airlock ro quiet\n"

// newHostMask makes a sandbox's identity: a fresh random boot id, and,
// with clocks, its clocks' zero now.
func newHostMask(clocks bool) (*HostMask, error) {
	id, err := newUUID()
	if err != nil {
		return nil, err
	}
	var mono, boot unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &mono); err != nil {
		return nil, fmt.Errorf("read the monotonic clock: %w", err)
	}
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &boot); err != nil {
		return nil, fmt.Errorf("read the boot clock: %w", err)
	}
	return &HostMask{BootID: id, Cmdline: sandboxCmdline, Clocks: clocks, MonotonicSec: mono.Sec, BoottimeSec: boot.Sec}, nil
}

// newUUID returns a random (version 4) UUID, as the kernel makes boot ids.
func newUUID() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("make a boot id: %w", err)
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16]), nil
}

// applyHostMask gives the commands the spawner starts m's identity. It
// runs in the spawner's own mount namespace, after /proc is mounted and
// before anything is confined. It returns notes on what this kernel could
// not hide.
func applyHostMask(m *HostMask) ([]string, error) {
	if err := maskProcFiles(map[string]string{
		"/proc/cmdline":                   m.Cmdline,
		"/proc/sys/kernel/random/boot_id": m.BootID + "\n",
	}); err != nil {
		return nil, err
	}
	if !m.Clocks {
		return nil, nil
	}
	err := ownClocks(m.MonotonicSec, m.BoottimeSec)
	if errors.Is(err, errNoTimeNS) {
		return []string{"this kernel has no time namespaces (Linux >= 5.6 with CONFIG_TIME_NS): commands see the host's uptime and boot time"}, nil
	}
	return nil, err
}

// maskProcFiles binds a read-only file with the given content over each
// path. Each file is made in /dev, which the agent built and nothing uses
// yet, and unlinked once it is bound, so no path in the sandbox leads to
// it but the masked one. (A tmpfs of their own would cost a mount and an
// unmount, whose wait for RCU readers is most of the price.)
func maskProcFiles(files map[string]string) error {
	for target, content := range files {
		if _, err := os.Lstat(target); err != nil {
			continue // not in this kernel: nothing to hide
		}
		if err := maskProcFile(target, content); err != nil {
			return err
		}
	}
	return nil
}

func maskProcFile(target, content string) error {
	f, err := os.CreateTemp("/dev", ".airlock-mask-")
	if err != nil {
		return fmt.Errorf("mask %s: %w", target, err)
	}
	src := f.Name()
	defer os.Remove(src)
	_, err = f.WriteString(content)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(src, 0o444)
	}
	if err != nil {
		return fmt.Errorf("mask %s: %w", target, err)
	}
	if err := unix.Mount(src, target, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("mask %s: %w", target, err)
	}
	// Commands run as the file's owner: only a read-only mount keeps
	// them from changing it.
	attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV | unix.MOUNT_ATTR_NOEXEC}
	if err := mountSetattr(unix.AT_FDCWD, target, 0, attr); err != nil {
		return fmt.Errorf("make the mask of %s read-only: %w", target, err)
	}
	return nil
}

// errNoTimeNS: the kernel cannot make time namespaces.
var errNoTimeNS = errors.New("no time namespaces")

// ownClocks puts the spawner's future children in a new time namespace
// whose monotonic and boot clocks read monoSec and bootSec less than the
// host's: the sandbox's start is their zero.
//
// A time namespace's offsets are written through /proc/PID, which reaches
// the thread group leader, and only the thread that unshares passes the
// namespace on: so the caller must be the leader, locked, and fork every
// command itself (the spawner is; see the init in zygote_linux.go).
func ownClocks(monoSec, bootSec int64) error {
	if unix.Gettid() != unix.Getpid() {
		return fmt.Errorf("give commands their own clocks: called on thread %d, not the main thread", unix.Gettid())
	}
	if err := unix.Unshare(unix.CLONE_NEWTIME); errors.Is(err, unix.EINVAL) {
		return errNoTimeNS // a kernel before 5.6 or without CONFIG_TIME_NS
	} else if err != nil {
		return fmt.Errorf("give commands their own clocks: %w", err)
	}
	// The kernel refuses offsets that would make a clock negative now;
	// these leave both at the time since the sandbox started.
	offsets := fmt.Sprintf("monotonic %d 0\nboottime %d 0\n", -monoSec, -bootSec)
	if err := os.WriteFile("/proc/self/timens_offsets", []byte(offsets), 0); err != nil {
		return fmt.Errorf("give commands their own clocks: %w", err)
	}
	return nil
}
