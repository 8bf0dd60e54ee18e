package vm

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/internal/agentproto"
	"github.com/airlock-sandbox/airlock/internal/boundary"
	"github.com/airlock-sandbox/airlock/internal/boundary/privdir"
	"github.com/airlock-sandbox/airlock/internal/boundary/process"
	"github.com/airlock-sandbox/airlock/internal/cgroup"
	"github.com/airlock-sandbox/airlock/internal/diskfs"
	"github.com/airlock-sandbox/airlock/internal/idalloc"
	"github.com/airlock-sandbox/airlock/internal/initramfs"
	"github.com/airlock-sandbox/airlock/internal/vmkernel"
)

// guestLower is where the guest's agent mounts the root's lower layer.
const guestLower = "/run/airlock/lower"

// hostShare begins the tags of the host's own directories that a default
// root shares (world-readable system files).
const hostShare = "host-"

// Limits of what is copied from the host's /etc into the guest's initial
// ramdisk (the default root's HostEtc entries).
const (
	etcFileMax  = 4 << 20
	etcTotalMax = 32 << 20
)

// overheadMB is the guest's memory beyond its commands' limit: its
// kernel, the agent, the spawner and the page cache of the root.
const overheadMB = 256

// Backend is the micro-VM boundary behind the seam: QEMU's microvm with
// airlock's guest kernel, the agent as the guest's PID 1.
type Backend struct{}

var _ boundary.Backend = Backend{}

// CheckNetwork: a VM's network needs nothing of the host (no TAP, no
// root): its frames come out of a socket QEMU inherits.
func (Backend) CheckNetwork() error { return nil }

// BindsHostDirs: no. QEMU's 9p cannot make a FIFO or a socket in a
// writable share (7.2 refuses to open a special file, even to set its
// mode), and serving a host directory would keep QEMU at the caller's
// ids and in the host's root; the host serves direct mounts as real_fs
// mounts instead, and QEMU stays jailed.
func (Backend) BindsHostDirs() bool { return false }

// ServesMounts: the agent mounts them, served over its stream.
func (Backend) ServesMounts() bool { return false }

// Sandbox is a running micro-VM.
type Sandbox struct {
	m     *Machine
	conn  io.ReadWriteCloser
	dir   string
	notes []string
	once  sync.Once
	// ids is the host uid QEMU runs as, under root; group its cgroup.
	ids   *idalloc.Lease
	group *cgroup.Group
}

// Start boots a VM whose agent gets boot.
func (Backend) Start(ctx context.Context, spec boundary.Spec, boot *agentproto.Boot) (_ boundary.Sandbox, err error) {
	if runtime.GOARCH != "amd64" {
		return nil, fmt.Errorf("%w: the vm level runs x86_64 guests under QEMU's microvm, and this machine is %s", boundary.ErrUnavailable, runtime.GOARCH)
	}
	qemu, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		return nil, fmt.Errorf("%w: the vm level needs QEMU: apt-get install qemu-system-x86 (%v)", boundary.ErrUnavailable, err)
	}
	kernel := spec.Kernel
	if kernel == "" {
		k, err := vmkernel.Find(spec.CacheDir, vmkernel.HostArch(runtime.GOARCH), nil)
		if err != nil {
			return nil, fmt.Errorf("%w: the vm level boots airlock's own guest kernel, and there is %v (about 6 minutes, once; $AIRLOCK_KERNEL_CACHE names another cache, Config.Kernel a kernel file)", boundary.ErrUnavailable, err)
		}
		kernel = k.Path
	}
	kvm := HardwareVirtualization()
	var notes []string
	if !kvm {
		if spec.RequireKVM {
			return nil, fmt.Errorf("%w: this CPU has no hardware virtualisation (no vmx or svm flag in /proc/cpuinfo), and KVM was required", boundary.ErrUnavailable)
		}
		notes = append(notes, "vm: no hardware virtualisation here (no vmx or svm CPU flag): the guest's CPU is emulated (QEMU TCG), many times slower than KVM")
	}
	agent, err := os.ReadFile(spec.AgentPath)
	if err != nil {
		return nil, fmt.Errorf("read the agent binary: %w", err)
	}
	dir, err := privdir.Make(privatePrefix, spec.ID)
	if err != nil {
		return nil, fmt.Errorf("make the VM's private directory: %w", err)
	}
	s := &Sandbox{dir: dir, notes: notes}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	cfg := Config{QEMU: qemu, Kernel: kernel, KVM: kvm, Dir: dir, Network: spec.Link != nil}
	cfg.CPUs = max(1, int(math.Ceil(spec.Limits.CPUs)))
	cfg.MemoryMB = memoryMB(spec.Limits.MemoryBytes)
	rd := initrd{}
	v := &agentproto.VMSpec{MemoryBytes: spec.Limits.MemoryBytes, Pids: spec.Limits.Pids, Seed: make([]byte, 64)}
	// A restored guest's random state is the snapshot's, shared with
	// every other restore: it is reseeded from the host's.
	if _, err := rand.Read(v.Seed); err != nil {
		return nil, err
	}
	switch {
	case spec.RootImage != "":
		cfg.Disks = append(cfg.Disks, Disk{Serial: "root", Path: spec.RootImage, Readonly: true})
		v.Mounts = append(v.Mounts, agentproto.VMMount{Source: "root", Type: "erofs", Target: guestLower, Readonly: true})
		boot.Root.RootFS = guestLower
	case boot.Root.RootFS != "":
		cfg.Shares = append(cfg.Shares, Share{Tag: "root", Path: boot.Root.RootFS, Readonly: true})
		v.Mounts = append(v.Mounts, agentproto.VMMount{Source: "root", Type: "9p", Target: guestLower, Readonly: true})
		boot.Root.RootFS = guestLower
	default:
		// The host's own root, as at the process level: its /usr and
		// the directories (or merged-/usr links) beside it, read-only,
		// and the /etc entries the boot names, copied.
		for _, d := range agentproto.HostRootDirs() {
			fi, err := os.Lstat("/" + d)
			switch {
			case err != nil:
			case fi.Mode()&fs.ModeSymlink != 0:
				t, err := os.Readlink("/" + d)
				if err == nil {
					rd.links = append(rd.links, [2]string{d, t})
				}
			case fi.IsDir():
				tag := hostShare + d
				cfg.Shares = append(cfg.Shares, Share{Tag: tag, Path: "/" + d, Readonly: true})
				v.Mounts = append(v.Mounts, agentproto.VMMount{Source: tag, Type: "9p", Target: "/" + d, Readonly: true})
			}
		}
		rd.etc = boot.Root.HostEtc
	}
	if spec.DiskDir != "" && boot.Root.SizeBytes > 0 {
		// Larger than memory allows: an ext4 disk in an unnamed file,
		// which nothing on the host reaches but QEMU's descriptor.
		f, err := diskfs.File(ctx, diskfs.Spec{Dir: spec.DiskDir, SizeBytes: boot.Root.SizeBytes, Inodes: max(boot.Root.Inodes, boot.Root.SizeBytes/8192)})
		if err != nil {
			return nil, fmt.Errorf("make the sandbox's disk: %w", err)
		}
		defer f.Close()
		cfg.Disks = append(cfg.Disks, Disk{Serial: "scratch", File: f})
		v.Scratch = "scratch"
	}
	if len(boot.Root.Direct) > 0 {
		return nil, errors.New("the vm level does not bind host directories: its direct mounts are served by the host (BindsHostDirs)")
	}
	if l := spec.Link; l != nil {
		v.Link = &agentproto.LinkSpec{
			Name: l.Name, Address: l.Address.String(), Gateway: l.Gateway.String(), MTU: l.MTU,
		}
		if l.AddressV6.IsValid() {
			v.Link.AddressV6, v.Link.GatewayV6 = l.AddressV6.String(), l.GatewayV6.String()
		}
	}
	boot.Mode, boot.VM, boot.Root.Stage = "vm", v, ""
	jail, err := s.jail(ctx, spec.ID, dir, cfg.Shares)
	if err != nil {
		return nil, err
	}
	khz, _ := vmkernel.HostTSCkHz()
	extra := []string{"quiet"}
	if os.Getenv("AIRLOCK_VM_DEBUG") != "" {
		extra = []string{"loglevel=7", "AIRLOCK_AGENT_DEBUG=1"}
	}
	cfg.CommandLine = vmkernel.CommandLine(khz, append(extra, agentproto.VMEnv)...)
	restore := false
	if snapshottable(spec, cfg) {
		snap, err := snapshot(ctx, spec.CacheDir, cfg, agent, rd, spec.Log)
		if err != nil {
			s.notes = append(s.notes, "vm: booted, not restored from a snapshot: "+err.Error())
		} else if f, err := openSnapshot(snap); err == nil {
			defer f.Close()
			cfg.Incoming, cfg.Initrd, restore = f, filepath.Join(snap, snapInitrd), true
		}
	}
	cfg.Jail = jail
	if !restore {
		cfg.Initrd = filepath.Join(dir, "initrd.cpio")
		if err := rd.write(cfg.Initrd, agent); err != nil {
			return nil, err
		}
	}
	m, err := Start(ctx, cfg)
	if err != nil {
		return nil, err
	}
	s.m = m
	if err := s.limitQEMU(ctx, spec.ID, cfg); err != nil {
		s.Close()
		return nil, err
	}
	if restore {
		if err := m.Resume(ctx); err != nil {
			s.Close()
			return nil, err
		}
	}
	if spec.Log != nil {
		spec.Log.Debug("vm started", "restored", restore, "kvm", kvm, "memory_mb", cfg.MemoryMB, "cpus", cfg.CPUs)
	}
	c, err := m.AcceptAgent(ctx)
	if err != nil {
		s.Close()
		return nil, err
	}
	s.conn = c
	// QEMU connects the port's socket when it starts; a booting guest's
	// agent opens the port once the kernel has booted, and then reads
	// its boot at once. The clock it sets is read then, not seconds
	// before. (A restored guest's port is open already.)
	if !restore {
		if err := waitPortOpen(ctx, m); err != nil {
			s.Close()
			return nil, err
		}
	}
	v.Time = time.Now().UnixNano()
	return s, nil
}

// snapshottable reports whether the machine of c can be restored from a
// snapshot: the snapshot needs a cache to live in, and the machine no
// 9p share. (QEMU could save one whose shares are not mounted yet, as
// the host's own directories are not when the agent waits for its boot;
// but a guest kernel before 6.2 cannot start commands in a time
// namespace of their own, so a restored guest's clocks count from the
// snapshot's boot, and a default root keeps booting.)
func snapshottable(spec boundary.Spec, c Config) bool {
	for _, d := range c.Disks {
		if d.File != nil {
			return false // a disk of this sandbox's own
		}
	}
	return len(c.Shares) == 0 && spec.CacheDir != "" && !spec.NoSnapshot && os.Getenv("AIRLOCK_VM_DEBUG") == ""
}

// qemuOverheadMB is what QEMU itself may use beyond the guest's memory:
// its heap and the translation cache of TCG (tcgCacheMB).
const qemuOverheadMB = 256 + tcgCacheMB

// qemuPids bounds QEMU's threads (vCPUs, I/O, RCU, the 9p workers).
const qemuPids = 256

// jail decides how QEMU is confined: always in namespaces of its own;
// chrooted into an empty directory and, under root, as a host uid of its
// own, unless it serves a prepared root over 9p (see below), which the
// notes then say.
func (s *Sandbox) jail(ctx context.Context, id, dir string, shares []Share) (Jail, error) {
	j := Jail{Namespaces: true, Chroot: filepath.Join(dir, "jail"), UID: -1, GID: -1}
	if err := os.Mkdir(j.Chroot, 0o755); err != nil {
		return Jail{}, fmt.Errorf("make QEMU's empty root: %w", err)
	}
	if os.Getuid() != 0 {
		return j, nil
	}
	// QEMU 7.2's 9p reaches files through /proc/self/fd (to set a new
	// file's mode, to read attributes), which an empty root lacks, and
	// reads them with QEMU's ids: a share of a prepared root keeps QEMU
	// at the caller's ids and in the host's root (still in its
	// namespaces, cgroup and seccomp filter); the host's own system
	// directories, world-readable and read-only, do not.
	for _, sh := range shares {
		if !strings.HasPrefix(sh.Tag, hostShare) {
			j.Chroot = ""
			s.notes = append(s.notes, "vm: QEMU keeps this process's ids and the host's root (in its own namespaces and cgroup, under its seccomp filter) to serve "+sh.Path+" over 9p")
			return j, nil
		}
	}
	reg, err := idalloc.Open(process.HostIDsDir, process.SandboxUIDBase, process.SandboxUIDRange)
	if err != nil {
		return Jail{}, fmt.Errorf("reserve QEMU's host uid: %w", err)
	}
	owner, err := idalloc.Self(id)
	if err != nil {
		return Jail{}, fmt.Errorf("reserve QEMU's host uid: %w", err)
	}
	if s.ids, err = reg.Allocate(ctx, owner, 1); err != nil {
		return Jail{}, fmt.Errorf("reserve QEMU's host uid: %w", err)
	}
	j.UID, j.GID = int(s.ids.First), int(s.ids.First)
	return j, nil
}

// limitQEMU puts QEMU in a cgroup of its own, bounded to the guest's
// memory, QEMU's own overhead and a number of threads, when cgroups can
// be used here; otherwise the notes say so.
func (s *Sandbox) limitQEMU(ctx context.Context, id string, c Config) error {
	g, err := cgroup.New(ctx, id, cgroup.Limits{MemoryBytes: int64(c.MemoryMB+qemuOverheadMB) << 20, Pids: qemuPids})
	if errors.Is(err, cgroup.ErrUnavailable) {
		s.notes = append(s.notes, "vm: QEMU's memory is bounded by the guest's size only, not by a cgroup: "+err.Error())
		return nil
	}
	if err != nil {
		return fmt.Errorf("make QEMU's cgroup: %w", err)
	}
	s.group = g
	fs, err := g.UserProcsFiles()
	if err != nil {
		return fmt.Errorf("place QEMU in its cgroup: %w", err)
	}
	defer func() {
		for _, f := range fs {
			f.Close()
		}
	}()
	for _, f := range fs {
		if _, err := f.WriteString(strconv.Itoa(s.m.PID())); err != nil {
			return fmt.Errorf("place QEMU in its cgroup: %w", err)
		}
	}
	return nil
}

// unlimitedMB is the size of a VM whose commands have no memory limit:
// the guest kernel keeps 1.5% of its memory for its own page tables,
// so "unlimited" is a large VM, not the host's size.
const unlimitedMB = 4096

// memoryMB is the VM's memory for commands limited to limit bytes: the
// limit and the guest's own overhead. QEMU takes host memory for it only
// as the guest touches it.
func memoryMB(limit int64) int {
	if limit <= 0 {
		return unlimitedMB
	}
	return int((limit+(1<<20)-1)>>20) + overheadMB
}

// initrd is the guest's initial ramdisk: the agent as /init, the
// directories it mounts on, and what of the host the default root takes
// by copy.
type initrd struct {
	// links are (name, target) symlinks at the root (merged /usr).
	links [][2]string
	// etc are the host's /etc entries to copy.
	etc []string
}

func (r initrd) write(path string, agent []byte) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("write the VM's initial ramdisk: %w", err)
	}
	if err := r.writeTo(f, agent); err != nil {
		f.Close()
		return fmt.Errorf("write the VM's initial ramdisk: %w", err)
	}
	return f.Close()
}

// writeTo writes the ramdisk's archive to out. The archive is the same
// for the same agent, links and /etc entries (no times, inodes counted
// from one).
func (r initrd) writeTo(out io.Writer, agent []byte) error {
	w := initramfs.NewWriter(out)
	errs := []error{
		w.Dir("dev", 0o755), w.CharDevice("dev/console", 0o600, 5, 1), w.Dir("proc", 0o555), w.Dir("sys", 0o555),
		w.Dir("run", 0o755), w.Dir("tmp", 0o1777), w.Dir("etc", 0o755), w.File("init", 0o755, agent),
	}
	for _, l := range r.links {
		errs = append(errs, w.Symlink(l[0], l[1]))
	}
	budget := etcTotalMax
	made := map[string]bool{}
	for _, e := range r.etc {
		// An entry below a folder of /etc (security/limits.conf) needs
		// that folder in the archive first.
		for _, d := range parents(e) {
			if !made[d] {
				made[d] = true
				errs = append(errs, w.Dir("etc/"+d, 0o755))
			}
		}
		errs = append(errs, copyEtc(w, e, &budget))
	}
	errs = append(errs, w.Close())
	return errors.Join(errs...)
}

// parents lists the folders above name, outermost first: "a/b/c" gives
// "a", "a/b".
func parents(name string) []string {
	var out []string
	for d := filepath.Dir(filepath.Clean(name)); d != "." && d != "/"; d = filepath.Dir(d) {
		out = append([]string{d}, out...)
	}
	return out
}

// copyEtc copies the host's /etc/name (a file, a symlink or a tree)
// into the ramdisk, within budget bytes; what cannot be read, or does
// not fit, is left out (as a missing entry is at the process level).
func copyEtc(w *initramfs.Writer, name string, budget *int) error {
	root, err := os.OpenRoot("/etc")
	if err != nil {
		return nil
	}
	defer root.Close()
	return fs.WalkDir(root.FS(), filepath.Clean(name), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		dst := "etc/" + p
		fi, err := d.Info()
		if err != nil {
			return nil
		}
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			t, err := root.Readlink(p)
			if err != nil {
				return nil
			}
			return w.Symlink(dst, t)
		case d.IsDir():
			return w.Dir(dst, fi.Mode().Perm())
		case d.Type().IsRegular():
			if fi.Size() > etcFileMax || int(fi.Size()) > *budget {
				return nil
			}
			b, err := root.ReadFile(p)
			if err != nil || len(b) > *budget {
				return nil
			}
			*budget -= len(b)
			return w.File(dst, fi.Mode().Perm(), b)
		}
		return nil
	})
}

// Conn is the agent's stream.
func (s *Sandbox) Conn() io.ReadWriteCloser { return s.conn }

// Link hands over the socket of the guest's frames.
func (s *Sandbox) Link(ctx context.Context) (*os.File, error) {
	f := s.m.Frames
	if f == nil {
		return nil, errors.New("the VM was started without a network interface, or its link was taken")
	}
	s.m.Frames = nil
	return f, nil
}

// Notes are what this VM runs without.
func (s *Sandbox) Notes() []string { return s.notes }

// Done is closed when QEMU has exited.
func (s *Sandbox) Done() <-chan struct{} { return s.m.Done() }

// Err says how the VM ended, with its console's last lines.
func (s *Sandbox) Err() error { return s.m.Err() }

// PID is QEMU's.
func (s *Sandbox) PID() int { return s.m.PID() }

// Counters are counted inside the guest, by its agent.
func (s *Sandbox) Counters() (boundary.Counters, error) {
	return boundary.Counters{}, errors.ErrUnsupported
}

// Usage is measured inside the guest, by its agent.
func (s *Sandbox) Usage() (boundary.Usage, error) { return boundary.Usage{}, errors.ErrUnsupported }

// PidsCurrent is counted inside the guest, by its agent.
func (s *Sandbox) PidsCurrent() (int64, error) { return 0, errors.ErrUnsupported }

// Pause stops the VM's CPUs (QMP "stop"): the guest's kernel and every
// process in it stand still, its memory as it was.
func (s *Sandbox) Pause(ctx context.Context) error {
	if _, err := s.m.QMP.Execute(ctx, "stop", nil); err != nil {
		return fmt.Errorf("stop the VM's CPUs: %w", err)
	}
	return nil
}

// Resume starts the VM's CPUs again (QMP "cont").
func (s *Sandbox) Resume(ctx context.Context) error {
	if _, err := s.m.QMP.Execute(ctx, "cont", nil); err != nil {
		return fmt.Errorf("start the VM's CPUs again: %w", err)
	}
	return nil
}

// Close stops QEMU and removes what the VM had on the host: its private
// directory, its cgroup, its uid.
func (s *Sandbox) Close() error {
	var err error
	s.once.Do(func() {
		if s.conn != nil {
			s.conn.Close()
		}
		var errs []error
		if s.m != nil {
			errs = append(errs, s.m.Close())
		}
		if s.group != nil {
			errs = append(errs, s.group.Delete())
		}
		if s.ids != nil {
			errs = append(errs, s.ids.Release())
		}
		errs = append(errs, os.RemoveAll(s.dir))
		err = errors.Join(errs...)
		if s.m != nil && os.Getenv("AIRLOCK_VM_DEBUG") != "" {
			fmt.Fprintf(os.Stderr, "VM console:\n%s\n", s.m.Console())
		}
	})
	return err
}
