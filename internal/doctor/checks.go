package doctor

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/airlock-sandbox/airlock/internal/boundary/gvisor"
	kernelpkg "github.com/airlock-sandbox/airlock/internal/kernel"
	"github.com/airlock-sandbox/airlock/internal/vmkernel"
)

// readFile reads a file below root and trims surrounding white space.
func readFile(root, path string) (string, error) {
	b, err := os.ReadFile(filepath.Join(root, path))
	return strings.TrimSpace(string(b)), err
}

// readInt reads a file below root holding a single integer, as sysctls do.
func readInt(root, path string) (int, error) {
	s, err := readFile(root, path)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(s)
}

// kernelRelease prefers Root's /proc/sys/kernel/osrelease so that fake
// trees can pin it, and falls back to uname.
func kernelRelease(root string, h *host) string {
	if s, err := readFile(root, "proc/sys/kernel/osrelease"); err == nil && s != "" {
		return s
	}
	if h.kernel != nil {
		return h.kernel()
	}
	return ""
}

// osRelease returns PRETTY_NAME from /etc/os-release, or "".
func osRelease(root string) string {
	s, err := readFile(root, "etc/os-release")
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(s, "\n") {
		if v, ok := strings.CutPrefix(line, "PRETTY_NAME="); ok {
			return strings.Trim(v, `"'`)
		}
	}
	return ""
}

// errnoText renders an error as "EPERM (operation not permitted)" when it
// wraps an errno, which is what users search for.
func errnoText(err error) string {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		if name := errnoName(errno); name != "" {
			return fmt.Sprintf("%s (%v)", name, errno)
		}
	}
	return err.Error()
}

// errnoName maps the errnos the probes can return to their symbolic names.
// It is a small table rather than unix.ErrnoName so it builds everywhere.
func errnoName(e syscall.Errno) string {
	switch e {
	case syscall.EPERM:
		return "EPERM"
	case syscall.ENOENT:
		return "ENOENT"
	case syscall.EACCES:
		return "EACCES"
	case syscall.EINVAL:
		return "EINVAL"
	case syscall.ENOSPC:
		return "ENOSPC"
	case syscall.ENOSYS:
		return "ENOSYS"
	case syscall.EOPNOTSUPP:
		return "EOPNOTSUPP"
	case syscall.ENXIO:
		return "ENXIO"
	case syscall.ENODEV:
		return "ENODEV"
	case syscall.EFAULT:
		return "EFAULT"
	case syscall.EBUSY:
		return "EBUSY"
	}
	return ""
}

// usernsChecks covers the sysctls that gate user namespaces and a real
// attempt to create one.
func usernsChecks(ctx context.Context, root string, h *host) []Check {
	var checks []Check
	var fixes []string

	c := Check{Name: "user namespaces"}
	switch n, err := readInt(root, "proc/sys/user/max_user_namespaces"); {
	case errors.Is(err, fs.ErrNotExist):
		c.Status, c.Detail = Fail, "/proc/sys/user/max_user_namespaces is missing: kernel built without CONFIG_USER_NS"
		c.Fix = "use a kernel built with CONFIG_USER_NS=y"
	case err != nil:
		c.Status, c.Detail = Warn, "cannot read max_user_namespaces: "+err.Error()
	case n == 0:
		c.Status, c.Detail = Fail, "max_user_namespaces=0: user namespaces are disabled"
		c.Fix = "sysctl -w user.max_user_namespaces=15000"
	default:
		c.Status, c.Detail = OK, fmt.Sprintf("max_user_namespaces=%d", n)
	}
	checks = append(checks, c)
	fixes = append(fixes, c.Fix)

	// Debian and older Ubuntu kernels gate unprivileged user namespaces
	// behind their own sysctl; root is not affected.
	if n, err := readInt(root, "proc/sys/kernel/unprivileged_userns_clone"); err == nil {
		c := Check{Name: "unprivileged userns (Debian)", Status: OK,
			Detail: fmt.Sprintf("kernel.unprivileged_userns_clone=%d", n)}
		if n == 0 {
			if h.uid != 0 {
				c.Status = Fail
				c.Detail += ": unprivileged users may not create user namespaces"
				c.Fix = "sysctl -w kernel.unprivileged_userns_clone=1"
			} else {
				c.Detail += " (applies only to non-root users)"
			}
		}
		checks = append(checks, c)
		fixes = append(fixes, c.Fix)
	}

	// Ubuntu 23.10+ lets AppArmor deny unprivileged user namespaces to
	// binaries without a profile that grants `userns,`.
	if n, err := readInt(root, "proc/sys/kernel/apparmor_restrict_unprivileged_userns"); err == nil {
		c := Check{Name: "AppArmor userns restriction", Status: OK,
			Detail: fmt.Sprintf("kernel.apparmor_restrict_unprivileged_userns=%d", n)}
		if n == 1 {
			if h.uid != 0 {
				c.Status = Fail
				c.Detail += ": AppArmor denies user namespaces to unconfined programs"
				c.Fix = apparmorFix(h.exe)
			} else {
				c.Detail += " (applies only to non-root users)"
			}
		}
		checks = append(checks, c)
		fixes = append(fixes, c.Fix)
	}

	checks = append(checks, usernsProbeCheck(h.userns(ctx), fixes))
	return checks
}

// apparmorFix gives both ways out of Ubuntu's user namespace restriction.
func apparmorFix(exe string) string {
	if exe == "" {
		exe = "/usr/local/bin/airlock"
	}
	return "sysctl -w kernel.apparmor_restrict_unprivileged_userns=0\n" +
		"or allow only airlock: write /etc/apparmor.d/airlock containing\n" +
		"  abi <abi/4.0>,\n" +
		"  include <tunables/global>\n" +
		"  profile airlock " + exe + " flags=(unconfined) {\n" +
		"    userns,\n" +
		"    include if exists <local/airlock>\n" +
		"  }\n" +
		"then run: apparmor_parser -r /etc/apparmor.d/airlock"
}

// usernsProbeCheck turns the result of really creating a user namespace
// into a check. sysctlFixes are the fixes of the sysctl checks, reused when
// they explain the failure.
func usernsProbeCheck(err error, sysctlFixes []string) Check {
	c := Check{Name: "user namespace probe"}
	if err == nil {
		c.Status, c.Detail = OK, "started /bin/true in a new user namespace"
		return c
	}
	c.Status = Fail
	c.Detail = "clone(CLONE_NEWUSER) failed: " + errnoText(err)
	for _, f := range sysctlFixes {
		if f != "" {
			c.Fix = "see the fixes above"
			return c
		}
	}
	switch {
	case errors.Is(err, syscall.ENOSPC):
		c.Fix = "sysctl -w user.max_user_namespaces=15000"
	case errors.Is(err, syscall.EPERM):
		c.Fix = "if airlock runs inside a container, its runtime must allow unshare(CLONE_NEWUSER) " +
			"(e.g. docker run --security-opt seccomp=unconfined --security-opt apparmor=unconfined), or run airlock on the host"
	case errors.Is(err, syscall.EINVAL):
		c.Fix = "use a kernel built with CONFIG_USER_NS=y"
	}
	return c
}

// seccompChecks reports filter support (a prerequisite) and user
// notification (needed only for later features). The first check returned
// is always the filter check.
func seccompChecks(root string, p seccompProbe) []Check {
	status := procStatusFields(root)
	filter := Check{Name: "seccomp filters"}
	var state string
	switch mode := status["Seccomp"]; {
	case p.modeErr == nil:
		state = fmt.Sprintf("this process: seccomp mode %d", p.mode)
	case mode != "":
		state = "this process: seccomp mode " + mode
	}
	if n := status["Seccomp_filters"]; n != "" && n != "0" {
		state += ", already under " + n + " filter(s); nested filters stack"
	}

	switch {
	case p.filterErr == nil:
		filter.Status, filter.Detail = OK, "supported (CONFIG_SECCOMP_FILTER)"
	case errors.Is(p.filterErr, syscall.ENOSYS) || errors.Is(p.modeErr, syscall.EINVAL):
		filter.Status, filter.Detail = Fail, "kernel built without seccomp (CONFIG_SECCOMP)"
		filter.Fix = "use a kernel built with CONFIG_SECCOMP=y and CONFIG_SECCOMP_FILTER=y"
	default:
		filter.Status = Fail
		filter.Detail = "kernel refuses seccomp filters (CONFIG_SECCOMP_FILTER missing?): " + errnoText(p.filterErr)
		filter.Fix = "use a kernel built with CONFIG_SECCOMP_FILTER=y"
	}
	if state != "" {
		filter.Detail += "; " + state
	}

	notify := Check{Name: "seccomp user notification"}
	switch {
	case p.notifyErr == nil:
		notify.Status, notify.Detail = OK, "SECCOMP_RET_USER_NOTIF available"
	default:
		notify.Status = Warn
		notify.Detail = "SECCOMP_RET_USER_NOTIF unavailable (" + errnoText(p.notifyErr) +
			"): features that supervise system calls from user space will be missing"
		notify.Fix = "upgrade to Linux 5.0 or newer"
	}
	return []Check{filter, notify}
}

// procStatusFields parses /proc/self/status below root into key/value pairs.
func procStatusFields(root string) map[string]string {
	fields := map[string]string{}
	f, err := os.Open(filepath.Join(root, "proc/self/status"))
	if err != nil {
		return fields
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok {
			fields[k] = strings.TrimSpace(v)
		}
	}
	return fields
}

// landlockCheck reports the Landlock ABI. Missing Landlock is a warning:
// the real start of the process level decides whether it is required.
func landlockCheck(root, kernel string, abi func() (int, error)) Check {
	c := Check{Name: "landlock"}
	v, err := abi()
	if err == nil {
		c.Status, c.Detail = OK, fmt.Sprintf("ABI %d", v)
		return c
	}
	c.Status = Warn
	switch {
	case errors.Is(err, syscall.EOPNOTSUPP):
		lsms, _ := readFile(root, "sys/kernel/security/lsm")
		c.Detail = "Landlock is built into the kernel but not enabled at boot (EOPNOTSUPP)"
		list := "landlock,lockdown,yama,integrity,apparmor"
		if lsms != "" {
			c.Detail += "; active LSMs: " + lsms
			list = "landlock," + lsms
		}
		c.Fix = "add landlock to the lsm= kernel parameter, e.g. lsm=" + list +
			" (append it to GRUB_CMDLINE_LINUX in /etc/default/grub, run update-grub, reboot)"
	case errors.Is(err, syscall.ENOSYS) && !kernelpkg.AtLeast(kernel, 5, 13):
		c.Detail = "kernel " + kernel + " is older than 5.13, which introduced Landlock"
		c.Fix = "upgrade to Linux 5.13 or newer"
	case errors.Is(err, syscall.ENOSYS):
		c.Detail = "kernel " + kernel + " was built without Landlock (CONFIG_SECURITY_LANDLOCK)"
		c.Fix = "use a kernel built with CONFIG_SECURITY_LANDLOCK=y"
	default:
		c.Detail = "landlock_create_ruleset failed: " + errnoText(err)
	}
	c.Detail += "; the process level has no Landlock filesystem rules"
	return c
}

// cgroupCheck turns the injected cgroup probe into a check. An unwritable
// hierarchy is a warning: the process level runs, but without limits.
func cgroupCheck(info func() (string, []string, bool, string)) Check {
	c := Check{Name: "cgroups"}
	if info == nil {
		c.Status, c.Detail = Skip, "no cgroup probe in this build"
		return c
	}
	version, controllers, writable, reason := info()
	c.Detail = version
	if len(controllers) > 0 {
		c.Detail += ", controllers: " + strings.Join(controllers, " ")
	}
	if writable {
		c.Status = OK
		c.Detail += ", writable"
		if !slices.Contains(controllers, "freezer") {
			c.Detail += "; no freezer, so `airlock pause` is refused at the process level (cgroup v1: mount -t cgroup -o freezer cgroup /sys/fs/cgroup/freezer; cgroup v2 has one from Linux 5.2)"
		}
		return c
	}
	c.Status = Warn
	c.Detail += ", not writable: CPU, memory and process limits will not be enforced"
	c.Fix = reason
	return c
}

// fuseCheck says whether programmable mounts (vfs.mounts, --mount) can
// work: as root airlock gives each sandbox a FUSE device node of its
// own, so /dev/fuse needs only to exist; unprivileged, the caller's
// sandboxes open /dev/fuse themselves. It also says whether real_fs
// reads use FUSE passthrough.
func fuseCheck(root, kernel string, uid int) Check {
	c := deviceCheck(root, "/dev/fuse", "fuse", "programmable mounts (vfs.mounts, --mount; direct mounts and -v work without)", "modprobe fuse", uid)
	c.Name = "programmable mounts (FUSE)"
	if c.Status != OK {
		return c
	}
	switch {
	case !kernelpkg.AtLeast(kernel, 6, 9):
	case uid == 0:
		c.Detail += "; FUSE passthrough (Linux ≥ 6.9, CONFIG_FUSE_PASSTHROUGH): at the process level a read-only real_fs mount's files are read by the kernel straight from the host files, as the supervisor serves the mounts as root (a writable mount's reads go through the supervisor, whose hooks and events see every write; in a VM the guest's FUSE daemon serves them)"
	default:
		c.Detail += "; FUSE passthrough (Linux ≥ 6.9) is not used: it needs CAP_SYS_ADMIN in the host's user namespace, so read-only real_fs mounts are read through the supervisor's FUSE server; run as root for it, or use a direct mount (-v), which reads at the host's speed"
	}
	return c
}

// tunCheck describes the TAP device the vm level uses.

func tunCheck(root string, uid int) Check {
	return deviceCheck(root, "/dev/net/tun", "tun", "TAP networking", "modprobe tun", uid)
}

// egressCheck says whether sandboxes with a network policy can start: as
// root, the supervisor makes their TAP device inside their network
// namespace; otherwise the agent does, as root of the sandbox's
// namespaces, which needs /dev/net/tun to be open to the caller.
func egressCheck(root string, uid int) Check {
	c := Check{Name: "network egress"}
	path := filepath.Join(root, "/dev/net/tun")
	if _, err := os.Stat(path); err != nil {
		c.Status = Warn
		c.Detail = "/dev/net/tun is missing: sandboxes with a network policy cannot start"
		c.Fix = "modprobe tun"
		return c
	}
	if uid == 0 {
		c.Status = OK
		c.Detail = "root: the supervisor makes each sandbox's TAP device, which ends in airlock's userspace network stack"
		return c
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		c.Status = Warn
		c.Detail = fmt.Sprintf("uid %d cannot open /dev/net/tun (%s): sandboxes with a network policy need root here; sandboxes without one work", uid, errnoText(err))
		c.Fix = "sudo chmod 0666 /dev/net/tun (the default on most distributions), or run airlock as root for sandboxes with network egress"
		return c
	}
	f.Close()
	c.Status = OK
	c.Detail = fmt.Sprintf("uid %d: each sandbox's agent makes its TAP device, which ends in airlock's userspace network stack", uid)
	return c
}

// diskCheck says whether a sandbox may have a disk larger than half its
// memory limit: such a disk is an ext4 filesystem in a file on a loop
// device, which needs root, /dev/loop-control, ext4 and mkfs.ext4. A
// disk that fits in memory (a tmpfs) needs none of them.
func diskCheck(root string, uid int, lookPath func(string) (string, error)) Check {
	c := Check{Name: "disks larger than memory"}
	fix := func(detail, fix string) Check {
		c.Status = Warn
		c.Detail = detail + ": --disk is limited to half of --memory (a tmpfs)"
		c.Fix = fix
		return c
	}
	if uid != 0 {
		return fix(fmt.Sprintf("uid %d cannot make loop devices", uid), "run airlock as root for a disk larger than half of --memory, or give --memory at least twice --disk")
	}
	if _, err := os.Stat(filepath.Join(root, "/dev/loop-control")); err != nil {
		return fix("/dev/loop-control is missing", "modprobe loop")
	}
	if fs, err := readFile(root, "/proc/filesystems"); err == nil && !strings.Contains(fs, "ext4") {
		return fix("the kernel has no ext4", "modprobe ext4")
	}
	if _, err := lookPath("mkfs.ext4"); err != nil {
		found := false
		for _, p := range []string{"/usr/sbin/mkfs.ext4", "/sbin/mkfs.ext4"} {
			if _, err := os.Stat(filepath.Join(root, p)); err == nil {
				found = true
			}
		}
		if !found {
			return fix("mkfs.ext4 is missing", "apt-get install e2fsprogs")
		}
	}
	c.Status = OK
	c.Detail = "root: a disk larger than half of --memory is an ext4 file under $AIRLOCK_HOME/disks, on a loop device"
	return c
}

// deviceCheck stats dev below root and opens it read-write as the current
// user. A missing or unopenable device is a warning naming the feature
// that needs it.
func deviceCheck(root, dev, kernelName, feature, load string, uid int) Check {
	c := Check{Name: dev}
	path := filepath.Join(root, dev)
	fi, err := os.Stat(path)
	if err != nil {
		c.Status = Warn
		c.Detail = "missing: " + feature + " will be unavailable"
		c.Fix = load
		return c
	}
	perm := fi.Mode().Perm()
	c.Detail = fmt.Sprintf("mode %04o", perm)
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err == nil {
		f.Close()
		c.Status = OK
		c.Detail += fmt.Sprintf(", opens read-write as uid %d", uid)
		return c
	}
	c.Status = Warn
	c.Detail += fmt.Sprintf(", uid %d cannot open it (%s): %s will be unavailable", uid, errnoText(err), feature)
	if errors.Is(err, fs.ErrPermission) {
		c.Fix = fmt.Sprintf("sudo chmod 0666 %s, or persist it with a udev rule: "+
			"echo 'KERNEL==\"%s\", MODE=\"0666\"' | sudo tee /etc/udev/rules.d/99-airlock.rules", dev, kernelName)
	} else {
		c.Fix = load
	}
	return c
}

// qemuCheck looks for the QEMU system emulator for the host architecture.
func qemuCheck(lookPath func(string) (string, error), goarch string) Check {
	bin, pkg := "qemu-system-x86_64", "qemu-system-x86"
	if goarch == "arm64" {
		bin, pkg = "qemu-system-aarch64", "qemu-system-arm"
	}
	c := Check{Name: bin}
	if p, err := lookPath(bin); err == nil {
		c.Status, c.Detail = OK, p
		return c
	}
	c.Status, c.Detail = Fail, "not found on PATH"
	c.Fix = "apt-get install -y " + pkg
	return c
}

// guestKernelCheck looks for the vm level's guest kernel, built from this
// airlock's config fragment, in the cache.
func guestKernelCheck(cacheDir, goarch string) Check {
	arch := vmkernel.HostArch(goarch)
	c := Check{Name: "guest kernel"}
	k, err := vmkernel.Find(cacheDir, arch, nil)
	if err != nil {
		c.Status, c.Detail = Warn, fmt.Sprintf("none for %s in %s", arch, cacheDir)
		c.Fix = fmt.Sprintf("airlock kernel build --arch %s (it needs Debian's linux-source-6.1 and build tools, which it names if missing; about 6 minutes on 2 idle cores, once)", arch)
		return c
	}
	c.Status = OK
	c.Detail = fmt.Sprintf("%s %s (%s from %s %s, %d MiB)", k.Arch, k.Path, k.Release, k.Source, k.SourceVersion, k.Size>>20)
	return c
}

// runscCheck looks for gVisor's runsc: airlock's own build of it
// (airlock-runsc, from `make runsc`) first, then a runsc installed apart.
func runscCheck(lookPath func(string) (string, error)) Check {
	c := Check{Name: "runsc"}
	p, err := gvisor.Find(lookPath)
	if err != nil {
		c.Status, c.Detail, c.Fix = Fail, err.Error(), gvisor.RunscFix
		return c
	}
	c.Status, c.Detail = OK, p
	return c
}

// firecrackerCheck looks for Firecracker, which is optional: it is used
// instead of QEMU only when KVM is usable.
func firecrackerCheck(lookPath func(string) (string, error), kvm bool) Check {
	c := Check{Name: "firecracker"}
	p, err := lookPath("firecracker")
	switch {
	case err != nil:
		c.Status, c.Detail = Skip, "not found on PATH (optional: used instead of QEMU when KVM is usable)"
	case kvm:
		c.Status, c.Detail = OK, p
	default:
		c.Status, c.Detail = Warn, p+" found, but Firecracker needs KVM, which is not usable; QEMU is used instead"
	}
	return c
}
