//go:build linux

package doctor

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"time"
	"unsafe"

	"github.com/airlock-sandbox/airlock/internal/kernel"

	llsys "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"
)

// liveHost probes the running Linux kernel.
func liveHost() *host {
	exe, _ := os.Executable()
	return &host{
		goos:     runtime.GOOS,
		goarch:   runtime.GOARCH,
		uid:      os.Getuid(),
		exe:      exe,
		kernel:   kernel.Release,
		userns:   probeUserns,
		landlock: llsys.LandlockGetABIVersion,
		seccomp:  probeSeccomp,
	}
}

// probeUserns starts /bin/true in a new user namespace that maps the
// current uid and gid to themselves, exactly as an unprivileged sandbox
// would, and returns the clone error (wrapping the errno) if that fails.
func probeUserns(ctx context.Context) error {
	bin := "/bin/true"
	if _, err := os.Stat(bin); err != nil {
		if bin, err = exec.LookPath("true"); err != nil {
			return fmt.Errorf("no true binary to start: %w", err)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin)
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:                 syscall.CLONE_NEWUSER,
		UidMappings:                []syscall.SysProcIDMap{{ContainerID: os.Getuid(), HostID: os.Getuid(), Size: 1}},
		GidMappings:                []syscall.SysProcIDMap{{ContainerID: os.Getgid(), HostID: os.Getgid(), Size: 1}},
		GidMappingsEnableSetgroups: false,
	}
	return cmd.Run()
}

// probeSeccomp asks the kernel about seccomp without installing anything.
func probeSeccomp() seccompProbe {
	var p seccompProbe
	mode, err := unix.PrctlRetInt(unix.PR_GET_SECCOMP, 0, 0, 0, 0)
	p.mode, p.modeErr = mode, err

	// SECCOMP_SET_MODE_FILTER with a NULL program fails with EFAULT when
	// filters are supported (the kernel tried to read the program) and
	// with EINVAL when the kernel lacks CONFIG_SECCOMP_FILTER.
	_, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, 0, 0)
	if e != unix.EFAULT && e != 0 {
		p.filterErr = e
	}

	action := uint32(unix.SECCOMP_RET_USER_NOTIF)
	_, _, e = unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_GET_ACTION_AVAIL, 0, uintptr(unsafe.Pointer(&action)))
	if e != 0 {
		p.notifyErr = e
	}
	return p
}
