// guestinit is the /init of the guest kernel's boot test: it checks that
// the kernel has what the vm boundary needs, prints what it found and a
// verdict, and ends the machine. It is built static (CGO_ENABLED=0).
package main

import (
	"fmt"
	"os"
	"slices"
	"strings"

	"unsafe"

	"golang.org/x/sys/unix"
)

func main() {
	uptime, _ := os.ReadFile("/proc/uptime") // before /proc is mounted: empty
	fmt.Println("airlock-init: started")
	var failed []string
	fail := func(format string, args ...any) { failed = append(failed, fmt.Sprintf(format, args...)) }

	for _, m := range []struct{ src, dir, fs string }{
		{"proc", "/proc", "proc"},
		{"sysfs", "/sys", "sysfs"},
		{"securityfs", "/sys/kernel/security", "securityfs"},
		{"devtmpfs", "/dev", "devtmpfs"},
	} {
		_ = os.MkdirAll(m.dir, 0o755)
		if err := unix.Mount(m.src, m.dir, m.fs, 0, ""); err != nil && err != unix.EBUSY {
			fail("mount %s: %v", m.fs, err)
		}
	}
	if len(uptime) == 0 {
		uptime, _ = os.ReadFile("/proc/uptime")
	}
	if f := strings.Fields(string(uptime)); len(f) > 0 {
		fmt.Println("airlock-init: uptime", f[0])
	}

	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		fail("uname: %v", err)
	}
	fmt.Println("airlock-init: release", unix.ByteSliceToString(u.Release[:]))

	b, err := os.ReadFile("/proc/filesystems")
	if err != nil {
		fail("read /proc/filesystems: %v", err)
	}
	var have []string
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			have = append(have, f[len(f)-1])
		}
	}
	for _, fs := range []string{"fuse", "overlay", "9p", "erofs", "ext4", "tmpfs", "cgroup2", "devtmpfs"} {
		if !slices.Contains(have, fs) {
			fail("file system %s missing from /proc/filesystems", fs)
		}
	}

	lsm, err := os.ReadFile("/sys/kernel/security/lsm")
	if err != nil {
		fail("read /sys/kernel/security/lsm: %v", err)
	}
	fmt.Println("airlock-init: lsm", string(lsm))
	if !slices.Contains(strings.Split(string(lsm), ","), "landlock") {
		fail("landlock missing from the LSMs: %q", lsm)
	}
	abi, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	if errno != 0 {
		fail("landlock_create_ruleset: %v", errno)
	}
	fmt.Println("airlock-init: landlock abi", abi)

	if mode, err := unix.PrctlRetInt(unix.PR_GET_SECCOMP, 0, 0, 0, 0); err != nil {
		fail("prctl(PR_GET_SECCOMP): %v", err)
	} else {
		fmt.Println("airlock-init: seccomp mode", mode)
	}
	// SECCOMP_GET_ACTION_AVAIL answers only where filters are built in.
	act := uint32(unix.SECCOMP_RET_KILL_PROCESS)
	if _, _, errno := unix.Syscall(unix.SYS_SECCOMP, 2 /* SECCOMP_GET_ACTION_AVAIL */, 0, uintptr(unsafe.Pointer(&act))); errno != 0 {
		fail("seccomp filters: %v", errno)
	}

	if len(failed) > 0 {
		for _, f := range failed {
			fmt.Println("airlock-init: FAIL", f)
		}
	} else {
		fmt.Println("airlock-init: ALL CHECKS PASSED")
	}
	// microvm without ACPI has no power-off: the kernel's reboot (a
	// triple fault with reboot=t) ends QEMU, which runs with -no-reboot.
	unix.Sync()
	if err := unix.Reboot(unix.LINUX_REBOOT_CMD_RESTART); err != nil {
		fmt.Println("airlock-init: reboot:", err)
	}
	select {}
}
