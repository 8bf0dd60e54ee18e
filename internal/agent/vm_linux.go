package agent

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/agentproto"
	"github.com/airlock-sandbox/airlock/internal/tap"
)

// vmCommandsCgroup is the guest's cgroup of user commands, where the
// sandbox's memory and pids limits hold; the agent stays in the root
// cgroup, outside them.
const vmCommandsCgroup = "/sys/fs/cgroup/sandbox"

// vmStage is where the micro-VM's agent assembles the sandbox's root.
const vmStage = "/run/airlock/stage"

// vmMain is PID 1 of a micro-VM's guest: it makes the initial ramdisk a
// root that can be pivoted away from, mounts the kernel's file systems,
// and serves the host on the agent's virtio-serial port. When it
// returns, the machine restarts, which the VMM turns into its exit.
func vmMain(log *slog.Logger) error {
	if err := leaveRamfs(); err != nil {
		return err
	}
	for _, m := range []struct{ src, dst, fstype, opts string }{
		{"devtmpfs", "/dev", "devtmpfs", "mode=0755"},
		{"proc", "/proc", "proc", ""},
		{"sysfs", "/sys", "sysfs", ""},
		{"cgroup2", "/sys/fs/cgroup", "cgroup2", ""},
		{"tmpfs", "/run", "tmpfs", "mode=0755"},
	} {
		if err := os.MkdirAll(m.dst, 0o755); err != nil {
			return err
		}
		if err := unix.Mount(m.src, m.dst, m.fstype, unix.MS_NOSUID, m.opts); err != nil && !errors.Is(err, unix.EBUSY) {
			return fmt.Errorf("mount %s on %s: %w", m.fstype, m.dst, err)
		}
	}
	// The OOM killer takes user commands, never the agent.
	_ = os.WriteFile("/proc/self/oom_score_adj", []byte("-1000"), 0)
	// Allocations succeed and the commands' memory limit ends what
	// overuses it (an OOM kill, reported as such), as on a host, rather
	// than the guest's small RAM refusing large allocations up front.
	if err := os.WriteFile("/proc/sys/vm/overcommit_memory", []byte("1"), 0); err != nil {
		return fmt.Errorf("set the guest's overcommit policy: %w", err)
	}
	port, err := findVirtioPort(agentproto.VMPort)
	if err != nil {
		return err
	}
	conn, err := os.OpenFile(port, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("open the host's port %s: %w", port, err)
	}
	defer conn.Close()
	return Serve(context.Background(), conn, func(ctx context.Context, b *agentproto.Boot) (Prepared, error) { return prepareVM(ctx, b, log) }, log)
}

// leaveRamfs moves the root onto a bind mount of itself: the initial
// ramdisk is the kernel's rootfs, which pivot_root cannot leave (it has
// no parent mount); a mount on top of it can be. This is what
// switch_root does, without copying anything.
func leaveRamfs() error {
	const top = "/.root"
	if err := os.Mkdir(top, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	if err := unix.Mount("/", top, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind the initial root: %w", err)
	}
	if err := unix.Chdir(top); err != nil {
		return err
	}
	if err := unix.Mount(".", "/", "", unix.MS_MOVE, ""); err != nil {
		return fmt.Errorf("move the initial root: %w", err)
	}
	if err := unix.Chroot("."); err != nil {
		return fmt.Errorf("enter the initial root: %w", err)
	}
	return unix.Chdir("/")
}

// findVirtioPort returns the device of the virtio-serial port named
// name.
func findVirtioPort(name string) (string, error) {
	const dir = "/sys/class/virtio-ports"
	// The port appears once its driver probed the device: wait a little.
	deadline := time.Now().Add(10 * time.Second)
	for {
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			b, err := os.ReadFile(filepath.Join(dir, e.Name(), "name"))
			if err == nil && strings.TrimSpace(string(b)) == name {
				return "/dev/" + e.Name(), nil
			}
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("no virtio-serial port named %q in %s", name, dir)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// prepareVM sets up a micro-VM's sandbox: the clock, hostname, the
// devices' file systems, the network interface and the commands' cgroup,
// then the root and the spawner as in every boundary.
func prepareVM(ctx context.Context, b *agentproto.Boot, log *slog.Logger) (Prepared, error) {
	if b.Mode != "vm" || b.VM == nil {
		return Prepared{}, fmt.Errorf("agent mode %q is not that of a micro-VM's agent", b.Mode)
	}
	v := b.VM
	if err := reseed(v.Seed); err != nil {
		return Prepared{}, fmt.Errorf("reseed the guest's random numbers: %w", err)
	}
	if v.Time > 0 {
		tv := unix.NsecToTimeval(v.Time)
		if err := unix.Settimeofday(&tv); err != nil {
			return Prepared{}, fmt.Errorf("set the clock: %w", err)
		}
	}
	if err := unix.Sethostname([]byte(b.Hostname)); err != nil {
		return Prepared{}, fmt.Errorf("set hostname: %w", err)
	}
	for _, m := range v.Mounts {
		if err := vmMount(m); err != nil {
			return Prepared{}, err
		}
	}
	if v.Scratch != "" {
		fd, err := scratchTree(v.Scratch)
		if err != nil {
			return Prepared{}, err
		}
		b.Root.DiskFD = fd
	}
	if v.Link != nil {
		if err := vmLink(v.Link); err != nil {
			return Prepared{}, fmt.Errorf("configure the network interface: %w", err)
		}
	}
	fd, err := vmCgroup(v.MemoryBytes, v.Pids)
	if err != nil {
		return Prepared{}, err
	}
	b.CgroupFDs = []int{fd}
	if b.Root.Stage == "" {
		b.Root.Stage = vmStage
	}
	if err := os.MkdirAll(b.Root.Stage, 0o755); err != nil {
		return Prepared{}, err
	}
	// The cgroup is read after the pivot, where /sys is not mounted.
	cg, err := os.OpenRoot(vmCommandsCgroup)
	if err != nil {
		return Prepared{}, fmt.Errorf("open the commands' cgroup: %w", err)
	}
	p, err := prepareSandbox(ctx, b, log)
	p.usage = func() (agentproto.Usage, error) { return cgroupUsage(cg) }
	p.limits = func() (agentproto.LimitEvents, error) { return cgroupLimits(cg) }
	return p, err
}

// cgroupLimits reads the limit events of cgroup v2 dir.
func cgroupLimits(dir *os.Root) (agentproto.LimitEvents, error) {
	var l agentproto.LimitEvents
	ev, err := keyed(dir, "memory.events")
	if err != nil {
		return l, err
	}
	pev, err := keyed(dir, "pids.events")
	if err != nil {
		return l, err
	}
	l.OOMKills, l.PidsLimitHits = ev["oom_kill"], pev["max"]
	return l, nil
}

// cgroupUsage reads the usage and limit events of cgroup v2 dir.
func cgroupUsage(dir *os.Root) (agentproto.Usage, error) {
	var u agentproto.Usage
	cpu, err := keyed(dir, "cpu.stat")
	if err != nil {
		return u, err
	}
	u.CPUNanos = cpu["usage_usec"] * 1000
	mem, err := single(dir, "memory.current")
	if err != nil {
		return u, err
	}
	u.MemoryBytes = mem
	u.MemoryPeakBytes, _ = single(dir, "memory.peak") // Linux 5.19+
	if u.Pids, err = single(dir, "pids.current"); err != nil {
		return u, err
	}
	l, err := cgroupLimits(dir)
	if err != nil {
		return u, err
	}
	u.OOMKills, u.PidsLimitHits = l.OOMKills, l.PidsLimitHits
	return u, nil
}

// single reads a cgroup file of one number.
func single(dir *os.Root, name string) (uint64, error) {
	b, err := dir.ReadFile(name)
	if err != nil {
		return 0, err
	}
	return strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
}

// keyed reads a cgroup file of "key value" lines.
func keyed(dir *os.Root, name string) (map[string]uint64, error) {
	b, err := dir.ReadFile(name)
	if err != nil {
		return nil, err
	}
	m := make(map[string]uint64)
	for line := range strings.Lines(string(b)) {
		k, v, ok := strings.Cut(strings.TrimSpace(line), " ")
		if !ok {
			continue
		}
		if n, err := strconv.ParseUint(v, 10, 64); err == nil {
			m[k] = n
		}
	}
	return m, nil
}

// vmMount mounts one of the VM's devices.
func vmMount(m agentproto.VMMount) error {
	if !filepath.IsAbs(m.Target) {
		return fmt.Errorf("mount target %q is not absolute", m.Target)
	}
	if err := os.MkdirAll(m.Target, 0o755); err != nil {
		return err
	}
	var flags uintptr = unix.MS_NODEV
	if m.Readonly {
		flags |= unix.MS_RDONLY
	}
	switch m.Type {
	case "9p":
		// Read-only shares may cache everything; a writable one caches
		// only what mmap needs, so that the host's changes show.
		cache := "mmap"
		if m.Readonly {
			cache = "loose"
		}
		opts := "trans=virtio,version=9p2000.L,msize=262144,access=client,cache=" + cache
		if err := unix.Mount(m.Source, m.Target, "9p", flags, opts); err != nil {
			return fmt.Errorf("mount the host share %q on %s: %w", m.Source, m.Target, err)
		}
	case "erofs", "ext4":
		dev, err := findDisk(m.Source)
		if err != nil {
			return err
		}
		if err := unix.Mount(dev, m.Target, m.Type, flags, ""); err != nil {
			return fmt.Errorf("mount disk %q (%s, %s) on %s: %w", m.Source, dev, m.Type, m.Target, err)
		}
	default:
		return fmt.Errorf("unknown file system %q for %s", m.Type, m.Target)
	}
	return nil
}

// scratchTree mounts the ext4 disk whose serial is serial and returns a
// detached copy of its mount, which the root's build attaches as the
// writable tree.
func scratchTree(serial string) (int, error) {
	const at = "/run/airlock/scratch"
	if err := vmMount(agentproto.VMMount{Source: serial, Type: "ext4", Target: at}); err != nil {
		return -1, err
	}
	// mke2fs always makes one; a sandbox's root has no use for it.
	if err := os.Remove(filepath.Join(at, "lost+found")); err != nil && !errors.Is(err, os.ErrNotExist) {
		return -1, fmt.Errorf("remove the disk's lost+found: %w", err)
	}
	fd, err := unix.OpenTree(unix.AT_FDCWD, at, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("take the disk's tree: %w", err)
	}
	return fd, nil
}

// findDisk returns the block device whose virtio serial is serial.
func findDisk(serial string) (string, error) {
	ents, err := os.ReadDir("/sys/block")
	if err != nil {
		return "", err
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/sys/block", e.Name(), "serial"))
		if err == nil && strings.TrimSpace(string(b)) == serial {
			return "/dev/" + e.Name(), nil
		}
	}
	return "", fmt.Errorf("no disk with serial %q in /sys/block", serial)
}

// vmLink configures the guest's one network interface as l says.
func vmLink(l *agentproto.LinkSpec) error {
	links, err := netlink.LinkList()
	if err != nil {
		return err
	}
	var eth netlink.Link
	for _, k := range links {
		if k.Type() == "device" && k.Attrs().Flags&net.FlagLoopback == 0 {
			eth = k
			break
		}
	}
	if eth == nil {
		return errors.New("the guest has no network device")
	}
	if eth.Attrs().Name != l.Name {
		if err := netlink.LinkSetName(eth, l.Name); err != nil {
			return fmt.Errorf("rename %s to %s: %w", eth.Attrs().Name, l.Name, err)
		}
	}
	c, err := tapConfig(l)
	if err != nil {
		return err
	}
	return tap.Configure(c)
}

// vmCgroup makes the cgroup of user commands with its limits and
// returns a descriptor of its cgroup.procs, which the spawner writes
// itself into.
func vmCgroup(memory, pids int64) (int, error) {
	if err := os.WriteFile("/sys/fs/cgroup/cgroup.subtree_control", []byte("+memory +pids +cpu"), 0); err != nil {
		return -1, fmt.Errorf("enable the guest's cgroup controllers: %w", err)
	}
	if err := os.Mkdir(vmCommandsCgroup, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return -1, err
	}
	set := func(file string, v int64) error {
		if v <= 0 {
			return nil
		}
		return os.WriteFile(filepath.Join(vmCommandsCgroup, file), []byte(strconv.FormatInt(v, 10)), 0)
	}
	if err := set("memory.max", memory); err != nil {
		return -1, fmt.Errorf("set the commands' memory limit: %w", err)
	}
	// Over the limit, commands are killed, not swapped (there is no
	// swap) nor left to stall.
	_ = os.WriteFile(filepath.Join(vmCommandsCgroup, "memory.oom.group"), []byte("0"), 0)
	if err := set("pids.max", pids); err != nil {
		return -1, fmt.Errorf("set the commands' pids limit: %w", err)
	}
	fd, err := unix.Open(filepath.Join(vmCommandsCgroup, "cgroup.procs"), unix.O_WRONLY, 0)
	if err != nil {
		return -1, fmt.Errorf("open the commands' cgroup: %w", err)
	}
	return fd, nil
}

// Ioctls of /dev/urandom (linux/random.h).
const (
	rndAddEntropy = 0x40085203 // RNDADDENTROPY: _IOW('R', 0x03, int[2])
	rndReseedCRNG = 0x5207     // RNDRESEEDCRNG: _IO('R', 0x07)
	maxSeedLen    = 512
)

// reseed credits seed to the kernel's random pool and makes its CRNG
// draw from it at once.
func reseed(seed []byte) error {
	if len(seed) == 0 {
		return nil
	}
	if len(seed) > maxSeedLen {
		return fmt.Errorf("a seed of %d bytes is more than %d", len(seed), maxSeedLen)
	}
	f, err := os.OpenFile("/dev/urandom", os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	// struct rand_pool_info: the entropy credited in bits, the size of
	// the buffer in bytes, then the buffer.
	info := make([]byte, 8+len(seed))
	binary.NativeEndian.PutUint32(info[0:], uint32(len(seed)*8))
	binary.NativeEndian.PutUint32(info[4:], uint32(len(seed)))
	copy(info[8:], seed)
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, f.Fd(), rndAddEntropy, uintptr(unsafe.Pointer(&info[0]))); e != 0 {
		return fmt.Errorf("RNDADDENTROPY: %w", e)
	}
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, f.Fd(), rndReseedCRNG, 0); e != 0 {
		return fmt.Errorf("RNDRESEEDCRNG: %w", e)
	}
	return nil
}
