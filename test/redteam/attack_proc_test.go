package redteam_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/airlock-sandbox/airlock"
)

// TestAttackHostProcesses looks for the host's processes, and for the
// agent that holds the control channel, from inside: /proc lists only the
// sandbox's own, and PID 1 is not something a command can read or use.
func TestAttackHostProcesses(t *testing.T) {
	t.Parallel()
	eachLevel(t, func(t *testing.T, lv airlock.Isolation) {
		sb := box(t, lv, airlock.Config{})
		pids := strings.Fields(ok(t, sb, "cd /proc && ls -d [0-9]*"))
		if len(pids) == 0 || len(pids) > 5 {
			t.Errorf("/proc in the sandbox lists %d pids %v, want a handful (the host has %d)", len(pids), pids, len(hostProcs(t)))
		}
		self := filepath.Base(os.Args[0])
		all := ok(t, sb, "cat /proc/[0-9]*/cmdline | tr '\\0' ' '; ps -eo pid,args")
		if strings.Contains(all, self) {
			t.Errorf("the host test process %q is visible in the sandbox:\n%s", self, all)
		}
		if !strings.Contains(all, "cat") {
			t.Errorf("the probe does not even see itself: %q", all)
		}
		// What PID 1 holds stays out of reach.
		for _, f := range []string{"mem", "environ", "maps", "auxv", "stack", "syscall"} {
			if res := sh(t, sb, "head -c 16 /proc/1/"+f+" >/dev/null"); res.ExitCode == 0 {
				t.Errorf("/proc/1/%s is readable", f)
			}
		}
		for _, l := range []string{"exe", "cwd", "root", "fd/0", "fd/3", "ns/user"} {
			if l == "ns/user" && lv == airlock.IsolationGVisor {
				// The Sentry lets its root read the namespace links of
				// a non-dumpable process; they name the Sentry's own
				// namespace, which the command shares, and nothing of
				// the host's.
				continue
			}
			if res := sh(t, sb, "readlink /proc/1/"+l); res.ExitCode == 0 {
				t.Errorf("/proc/1/%s can be followed: %q", l, res.Stdout)
			}
		}
		if res := sh(t, sb, "ls /proc/1/root/ /proc/1/cwd/"); res.ExitCode == 0 {
			t.Errorf("PID 1's root or cwd can be listed: %q", res.Stdout)
		}
		r, e := pyErrno(t, sb, pyLibc+`
class IOV(ctypes.Structure): _fields_=[("b",ctypes.c_void_p),("n",ctypes.c_size_t)]
m=ctypes.create_string_buffer(8); l=IOV(ctypes.cast(m,ctypes.c_void_p),8); rm=IOV(0x400000,8)
r=libc.process_vm_readv(1, ctypes.byref(l), 1, ctypes.byref(rm), 1, 0); print(r, ctypes.get_errno())`)
		refused(t, "process_vm_readv(1)", r, e, syscall.EPERM, syscall.ESRCH, syscall.ENOSYS)
	})
}

// TestAttackProcKernelState reaches for host-wide kernel state through
// /proc: knobs that change the host, and files that leak its internals.
func TestAttackProcKernelState(t *testing.T) {
	t.Parallel()
	eachLevel(t, func(t *testing.T, lv airlock.Isolation) {
		sb := box(t, lv, airlock.Config{})
		// Writing back the current value is harmless should it succeed.
		for _, knob := range []string{"/proc/sys/kernel/printk_ratelimit", "/proc/sys/vm/overcommit_ratio", "/proc/sys/kernel/core_uses_pid"} {
			before, err := os.ReadFile(knob)
			if err != nil {
				continue
			}
			if res := sh(t, sb, fmt.Sprintf("v=$(cat %s) && echo $v > %s", knob, knob)); res.ExitCode == 0 {
				t.Errorf("the sandbox wrote the host-wide sysctl %s", knob)
			}
			if after, _ := os.ReadFile(knob); string(after) != string(before) {
				t.Errorf("%s changed from %q to %q", knob, before, after)
			}
		}
		// access(2) only: no write is attempted on these.
		for _, p := range []string{"/proc/sys/kernel/core_pattern", "/proc/sys/kernel/modprobe", "/proc/sys/vm/drop_caches",
			"/proc/sysrq-trigger", "/proc/sys/kernel/hostname", "/proc/sys/net/ipv4/ip_forward"} {
			if res := sh(t, sb, "test -w "+p); res.ExitCode == 0 {
				t.Errorf("%s is writable from the sandbox", p)
			}
		}
		// Kernel internals read as nothing.
		for _, p := range []string{"/proc/kcore", "/proc/kmsg", "/proc/keys", "/proc/key-users", "/proc/timer_list", "/proc/sched_debug", "/proc/kallsyms"} {
			res := sh(t, sb, "head -c 64 "+p+" 2>/dev/null | wc -c")
			if n, _ := strconv.Atoi(strings.TrimSpace(string(res.Stdout))); n != 0 {
				t.Errorf("%s gives %d bytes in the sandbox, want nothing", p, n)
			}
		}
	})
}

// TestAttackSysAndCgroups looks for /sys and the cgroup file systems,
// through which a command could read host hardware or lift its limits.
func TestAttackSysAndCgroups(t *testing.T) {
	t.Parallel()
	eachLevel(t, func(t *testing.T, lv airlock.Isolation) {
		sb := box(t, lv, airlock.Config{Resources: airlock.Resources{MemoryMB: 256}})
		if out := ok(t, sb, "ls -A /sys 2>/dev/null; true"); strings.TrimSpace(out) != "" {
			t.Errorf("/sys lists %q, want nothing", out)
		}
		for _, p := range []string{"/sys/fs/cgroup", "/sys/class/dmi/id/product_uuid", "/sys/firmware", "/sys/kernel/debug"} {
			if res := sh(t, sb, "test -e "+p); res.ExitCode == 0 {
				t.Errorf("%s exists in the sandbox", p)
			}
		}
		for _, fs := range []string{"sysfs", "cgroup2", "cgroup", "debugfs", "securityfs", "bpf", "tracefs"} {
			r, e := pyErrno(t, sb, pyLibc+fmt.Sprintf(`r=libc.mount(b"x", b"/mnt", b%q, 0, None); print(r, ctypes.get_errno())`, fs))
			refused(t, "mount "+fs, r, e, syscall.EPERM)
		}
		// The cgroup a command is in is named relative to the sandbox:
		// neither its id nor the host's hierarchy shows.
		cg := ok(t, sb, "cat /proc/self/cgroup")
		if strings.Contains(cg, sb.ID()) || strings.Contains(cg, "airlock") {
			t.Errorf("/proc/self/cgroup names the host's hierarchy:\n%s", cg)
		}
	})
}

// TestAttackDevices looks for device nodes to reach hardware, the
// hypervisor or other namespaces' devices, and tries to make some.
func TestAttackDevices(t *testing.T) {
	t.Parallel()
	eachLevel(t, func(t *testing.T, lv airlock.Isolation) {
		sb := box(t, lv, airlock.Config{})
		allowed := map[string]bool{"null": true, "zero": true, "full": true, "random": true, "urandom": true, "tty": true,
			"fd": true, "stdin": true, "stdout": true, "stderr": true, "ptmx": true, "pts": true, "shm": true, "mqueue": true}
		for _, name := range strings.Fields(ok(t, sb, "ls -A /dev")) {
			if !allowed[name] {
				t.Errorf("/dev/%s exists in the sandbox", name)
			}
		}
		for _, p := range []string{"/dev/kvm", "/dev/mem", "/dev/kmem", "/dev/port", "/dev/vsock", "/dev/vhost-vsock", "/dev/net/tun", "/dev/fuse", "/dev/vda", "/dev/sda", "/dev/loop-control", "/dev/console"} {
			if res := sh(t, sb, "test -e "+p); res.ExitCode == 0 {
				t.Errorf("%s exists in the sandbox", p)
			}
		}
		// Making nodes: /dev/mem (1,1), a disk (8,0), /dev/kvm (10,232).
		for _, d := range []struct {
			name        string
			mode        uint32
			major, minr uint32
		}{{"mem", syscall.S_IFCHR, 1, 1}, {"sda", syscall.S_IFBLK, 8, 0}, {"kvm", syscall.S_IFCHR, 10, 232}} {
			r, e := pyErrno(t, sb, pyLibc+fmt.Sprintf(`r=libc.mknod(b"/tmp/%s", %d, os.makedev(%d, %d)); print(r, ctypes.get_errno())`, d.name, d.mode|0o666, d.major, d.minr))
			refused(t, "mknod "+d.name, r, e, syscall.EPERM)
		}
		// The nodes that are there work.
		if out := ok(t, sb, "echo x > /dev/null; head -c 4 /dev/zero | wc -c"); strings.TrimSpace(out) != "4" {
			t.Errorf("/dev/zero gave %q", out)
		}
	})
}
