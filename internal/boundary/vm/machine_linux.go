// Package vm is the micro-VM boundary's machine: QEMU's microvm, started
// with the guest kernel, an agent stream on a virtio-serial port, the
// guest's Ethernet frames on a datagram socketpair, and QMP to control
// it.
package vm

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/agentproto"
	"github.com/airlock-sandbox/airlock/internal/boundary"
	"github.com/airlock-sandbox/airlock/internal/qmp"
)

// AgentPort is the name of the virtio-serial port the agent speaks on;
// agentPortID is its device's id, which QEMU's events name.
const (
	AgentPort   = agentproto.VMPort
	agentPortID = "agentport"
)

// tcgCacheMB is the size of TCG's translation cache, in MiB.
const tcgCacheMB = 128

// consoleTail bounds what is kept of the guest's console, for a crash
// report.
const consoleTail = 64 << 10

// Config describes one machine.
type Config struct {
	// QEMU is the qemu-system binary.
	QEMU string
	// Kernel is the guest kernel image, Initrd its initial root file
	// system (optional) and CommandLine its command line.
	Kernel, Initrd, CommandLine string
	// KVM uses hardware virtualisation; otherwise TCG emulates the CPU.
	KVM      bool
	CPUs     int
	MemoryMB int
	// Dir is a private directory for the machine's sockets; it must
	// exist.
	Dir string
	// Network gives the guest one virtio-net interface whose frames come
	// and go on Machine.Frames.
	Network bool
	// Disks are virtio-blk devices; Shares are host directories over
	// virtio-9p.
	Disks  []Disk
	Shares []Share
	// Jail confines QEMU; its zero value leaves QEMU as this process
	// starts it (with its own seccomp filter).
	Jail Jail
	// Incoming, when set, is a saved machine (see Snapshot) that QEMU
	// restores instead of booting; the machine then stays paused until
	// Resume.
	Incoming *os.File
	// MayRun lets QEMU start processes: only for a machine that no
	// guest code has run in, whose state is saved to a file by a
	// program QEMU runs (see Save).
	MayRun bool
}

// Jail is how QEMU is confined, as Firecracker's jailer confines its
// VMM: QEMU opens everything it needs (kernel, disks, shares, sockets)
// at its start, then chroots into an empty directory and becomes an
// unprivileged uid before the guest runs; it lives in namespaces of its
// own (no network, no other process, no IPC, no mounts of the host's to
// change), so that an escape from the guest into QEMU lands in a second
// sandbox.
type Jail struct {
	// Namespaces starts QEMU in new network, PID, IPC, UTS and mount
	// namespaces (and a user namespace, unless this process is root).
	Namespaces bool
	// Chroot is an empty directory QEMU chroots into once started.
	Chroot string
	// UID and GID are the ids QEMU switches to once started; negative:
	// it keeps this process's.
	UID, GID int
}

// Disk is a raw disk image the guest sees as a virtio-blk device whose
// serial is Serial: the file at Path, or File, which QEMU inherits.
type Disk struct {
	Serial, Path string
	File         *os.File
	Readonly     bool
}

// Share is a host directory the guest mounts as 9p by its tag. QEMU
// passes the guest's file operations through as its own uid
// (security_model=none).
type Share struct {
	Tag, Path string
	Readonly  bool
}

// Machine is a running QEMU.
type Machine struct {
	cmd *exec.Cmd
	// Agent is the host's end of the agent's port, once the guest opened
	// it (see AcceptAgent).
	agentLn *net.UnixListener
	// Frames is the host's end of the guest's network interface: each
	// datagram is one Ethernet frame. nil without Config.Network.
	Frames *os.File
	// QMP controls the machine.
	QMP *qmp.Monitor

	console *boundary.Tail
	done    chan struct{}
	waitErr error
	once    sync.Once
}

// Args is QEMU's command line for c, with the frames' socket at fd 3 of
// QEMU, then the incoming machine's file, then the disks' files, and the
// sockets in c.Dir.
func Args(c Config) []string {
	// TCG's translation cache is bounded: QEMU's default (a GiB) would
	// be host memory no limit of the guest's accounts for.
	accel, cpu := "tcg,tb-size="+strconv.Itoa(tcgCacheMB), "max"
	if c.KVM {
		accel, cpu = "kvm", "host"
	}
	runas := c.Jail.UID >= 0 && c.Jail.GID >= 0 && (c.Jail.UID != 0 || c.Jail.GID != 0)
	// QEMU changes its ids itself once started, which its filter must
	// then allow: as that uid it holds no capability, and in its empty
	// root with no process to spawn there is nothing to regain any.
	elevate := "deny"
	if runas {
		elevate = "allow"
	}
	spawn := "deny"
	if c.MayRun {
		spawn = "allow"
	}
	args := []string{
		"-M", "microvm,acpi=off", "-accel", accel, "-cpu", cpu,
		"-smp", strconv.Itoa(max(c.CPUs, 1)), "-m", strconv.Itoa(max(c.MemoryMB, 64)) + "M",
		"-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
		// QEMU's own seccomp filter: no new privileges, no processes, no
		// obsolete system calls, no scheduler or resource changes.
		"-sandbox", "on,obsolete=deny,elevateprivileges=" + elevate + ",spawn=" + spawn + ",resourcecontrol=deny",
		"-serial", "stdio",
		"-kernel", c.Kernel, "-append", c.CommandLine,
		"-qmp", "unix:" + filepath.Join(c.Dir, "qmp.sock") + ",server=on,wait=off",
		"-device", "virtio-serial-device",
		"-chardev", "socket,id=agent,path=" + filepath.Join(c.Dir, "agent.sock"),
		"-device", "virtserialport,id=" + agentPortID + ",chardev=agent,name=" + AgentPort,
	}
	fd := 3
	if c.Network {
		args = append(args, "-netdev", "dgram,id=net0,local.type=fd,local.str="+strconv.Itoa(fd), "-device", "virtio-net-device,netdev=net0")
		fd++
	}
	if c.Incoming != nil {
		args = append(args, "-incoming", "fd:"+strconv.Itoa(fd))
		fd++
	}
	for i, d := range c.Disks {
		id := "disk" + strconv.Itoa(i)
		path := d.Path
		if d.File != nil {
			// QEMU opens it before it leaves the host's root.
			path = "/proc/self/fd/" + strconv.Itoa(fd)
			fd++
		}
		drive := "if=none,format=raw,id=" + id + ",file=" + escapeOpt(path)
		if d.Readonly {
			drive += ",readonly=on"
		}
		args = append(args, "-drive", drive, "-device", "virtio-blk-device,drive="+id+",serial="+escapeOpt(d.Serial))
	}
	for i, sh := range c.Shares {
		id := "fs" + strconv.Itoa(i)
		dev := "local,id=" + id + ",security_model=none,path=" + escapeOpt(sh.Path)
		if sh.Readonly {
			dev += ",readonly=on"
		}
		args = append(args, "-fsdev", dev, "-device", "virtio-9p-device,fsdev="+id+",mount_tag="+escapeOpt(sh.Tag))
	}
	if c.Initrd != "" {
		args = append(args, "-initrd", c.Initrd)
	}
	if c.Jail.Chroot != "" {
		args = append(args, "-chroot", c.Jail.Chroot)
	}
	if runas {
		args = append(args, "-runas", strconv.Itoa(c.Jail.UID)+":"+strconv.Itoa(c.Jail.GID))
	}

	return args
}

// escapeOpt escapes a value inside a QEMU option list, where a comma
// separates options unless doubled.
func escapeOpt(v string) string { return strings.ReplaceAll(v, ",", ",,") }

// Start starts QEMU for c and connects to its QMP socket. The agent's
// port is a socket this process listens on and QEMU connects to, so that
// nothing else can take it.
func Start(ctx context.Context, c Config) (_ *Machine, err error) {
	m := &Machine{console: boundary.NewTail(consoleTail), done: make(chan struct{})}
	defer func() {
		if err != nil {
			m.Close()
		}
	}()
	m.agentLn, err = net.ListenUnix("unix", &net.UnixAddr{Name: filepath.Join(c.Dir, "agent.sock"), Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("listen for the agent's port: %w", err)
	}
	cmd := exec.Command(c.QEMU, Args(c)...)
	// QEMU's stdin is /dev/null; its stdout is the guest's console.
	cmd.Stdout, cmd.Stderr = m.console, m.console
	// It dies with this process.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if c.Jail.Namespaces {
		a := cmd.SysProcAttr
		a.Cloneflags = syscall.CLONE_NEWNET | syscall.CLONE_NEWPID | syscall.CLONE_NEWIPC | syscall.CLONE_NEWUTS | syscall.CLONE_NEWNS
		if uid, gid := os.Getuid(), os.Getgid(); uid != 0 {
			// Unprivileged: a user namespace of its own, where QEMU is
			// this user and holds no capability over the host.
			a.Cloneflags |= syscall.CLONE_NEWUSER
			a.UidMappings = []syscall.SysProcIDMap{{ContainerID: uid, HostID: uid, Size: 1}}
			a.GidMappings = []syscall.SysProcIDMap{{ContainerID: gid, HostID: gid, Size: 1}}
		}
	}
	if c.Network {
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return nil, fmt.Errorf("make the guest's network socket: %w", err)
		}
		m.Frames = os.NewFile(uintptr(fds[0]), "frames")
		guest := os.NewFile(uintptr(fds[1]), "guest-frames")
		defer guest.Close()
		cmd.ExtraFiles = []*os.File{guest}
	}
	if c.Incoming != nil {
		cmd.ExtraFiles = append(cmd.ExtraFiles, c.Incoming)
	}
	for _, d := range c.Disks {
		if d.File != nil {
			cmd.ExtraFiles = append(cmd.ExtraFiles, d.File)
		}
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start QEMU (%s): %w", c.QEMU, err)
	}
	m.cmd = cmd
	go func() {
		m.waitErr = cmd.Wait()
		close(m.done)
	}()
	// QEMU makes the socket's file before it listens on it: until it
	// does, a connection is refused.
	sock := filepath.Join(c.Dir, "qmp.sock")
	for {
		m.QMP, err = qmp.Dial(ctx, sock)
		if err == nil {
			break
		}
		if !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ECONNREFUSED) {
			return nil, err
		}
		select {
		case <-m.done:
			return nil, fmt.Errorf("QEMU exited at start: %v: %s", m.waitErr, m.console.String())
		case <-ctx.Done():
			return nil, fmt.Errorf("QEMU's QMP socket never answered: %w (%v)", context.Cause(ctx), err)
		case <-time.After(5 * time.Millisecond):
		}
	}
	return m, nil
}

// AcceptAgent waits for QEMU to connect the agent's port and returns the
// host's end of it.
func (m *Machine) AcceptAgent(ctx context.Context) (net.Conn, error) {
	stop := context.AfterFunc(ctx, func() { m.agentLn.SetDeadline(time.Now()) })
	defer stop()
	c, err := m.agentLn.Accept()
	if err != nil {
		return nil, fmt.Errorf("wait for the agent's port: %w", err)
	}
	return c, nil
}

// PID is QEMU's process id.
func (m *Machine) PID() int { return m.cmd.Process.Pid }

// Done is closed when QEMU has exited; Err then says how.
func (m *Machine) Done() <-chan struct{} { return m.done }

// Err says how QEMU ended, with the console's last lines.
func (m *Machine) Err() error {
	select {
	case <-m.done:
	default:
		return nil
	}
	return fmt.Errorf("%s; its console's last lines:\n%s", m.end(), m.console.Last(40))
}

// end says how QEMU ended: killed by a signal, or its guest ended (an
// exit, which a guest's restart, panic included, becomes under
// -no-reboot).
func (m *Machine) end() string {
	if ps := m.cmd.ProcessState; ps != nil {
		if ws, ok := ps.Sys().(syscall.WaitStatus); ok {
			switch {
			case ws.Signaled():
				return fmt.Sprintf("the VM's monitor (QEMU) was killed by signal %d (%s)", int(ws.Signal()), unix.SignalName(ws.Signal()))
			case ws.Exited() && ws.ExitStatus() == 0:
				return "the VM's guest ended (its agent exited, or its kernel panicked or restarted)"
			case ws.Exited():
				return fmt.Sprintf("the VM's monitor (QEMU) exited with status %d", ws.ExitStatus())
			}
		}
	}
	return fmt.Sprintf("the VM ended: %v", m.waitErr)
}

// Console is what the guest printed, its last 64 KiB.
func (m *Machine) Console() string { return m.console.String() }

// Close kills QEMU and releases what the machine held.
func (m *Machine) Close() error {
	var errs []error
	m.once.Do(func() {
		if m.QMP != nil {
			m.QMP.Close()
		}
		if m.cmd != nil && m.cmd.Process != nil {
			_ = m.cmd.Process.Kill()
			<-m.done
		}
		if m.agentLn != nil {
			m.agentLn.Close()
		}
		if m.Frames != nil {
			errs = append(errs, m.Frames.Close())
		}
	})
	return errors.Join(errs...)
}
