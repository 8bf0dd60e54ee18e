// Package tap makes a sandbox's network interface: a TAP device inside the
// sandbox's network namespace, configured with its address and routes,
// whose frames the host reads and writes through the returned file. The
// host's kernel routes nothing for the sandbox: every frame ends in the
// userspace stack that holds the file.
package tap

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Config is what the interface gets.
type Config struct {
	// Name of the interface inside the sandbox, such as "eth0".
	Name string
	// Address and Gateway: the IPv4 address with its prefix, and the
	// next hop of the default route.
	Address netip.Prefix
	Gateway netip.Addr
	// AddressV6 and GatewayV6, when valid, do the same for IPv6.
	AddressV6 netip.Prefix
	GatewayV6 netip.Addr
	// LinkLocalV6, when valid, is added beside AddressV6, for a network
	// stack that does not make a link-local address itself (gVisor's):
	// neighbour discovery of a link-local gateway needs one.
	LinkLocalV6 netip.Prefix
	MTU         uint32
}

// Create makes the TAP device inside the network namespace of process pid
// and configures it. It returns the device's file: non-blocking,
// close-on-exec, one Ethernet frame per read and write. Take its
// descriptor with SyscallConn, not Fd, which would make it blocking. The caller needs
// CAP_NET_ADMIN over that namespace and CAP_SYS_ADMIN to enter it, and must
// be able to open /dev/net/tun: in practice, root.
func Create(pid int, c Config) (*os.File, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	ns, err := os.Open(fmt.Sprintf("/proc/%d/ns/net", pid))
	if err != nil {
		return nil, fmt.Errorf("tap: open the sandbox's network namespace: %w", err)
	}
	defer ns.Close()
	self, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		return nil, fmt.Errorf("tap: open this thread's network namespace: %w", err)
	}
	defer self.Close()
	type result struct {
		f   *os.File
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			ch <- result{err: fmt.Errorf("tap: enter the sandbox's network namespace: %w", err)}
			return
		}
		f, err := create(c)
		// Back to the host's namespace, and the thread goes back to the
		// scheduler. It must not end: a child started from it with a
		// parent-death signal (a sandbox's agent) would get that signal.
		// Only if the way back fails does the thread stay locked, and end
		// with this goroutine, so that nothing else runs in the sandbox's
		// namespace.
		if unix.Setns(int(self.Fd()), unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		ch <- result{f, err}
	}()
	r := <-ch
	return r.f, r.err
}

// CreateHere makes and configures the device in the calling thread's
// network namespace: for a process that is already inside the sandbox's
// namespaces (the agent), with CAP_NET_ADMIN there and /dev/net/tun
// open to it.
func CreateHere(c Config) (*os.File, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	return create(c)
}

// check reports what is wrong with c before anything is made.
func (c Config) check() error {
	switch {
	case c.Name == "" || len(c.Name) >= unix.IFNAMSIZ:
		return fmt.Errorf("tap: invalid interface name %q", c.Name)
	case !c.Address.IsValid() || !c.Gateway.IsValid():
		return errors.New("tap: an IPv4 address and gateway are required")
	}
	return nil
}

// create makes and configures the device in the calling thread's network
// namespace.
func create(c Config) (*os.File, error) {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("tap: open /dev/net/tun: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			unix.Close(fd)
		}
	}()
	ifr, err := unix.NewIfreq(c.Name)
	if err != nil {
		return nil, fmt.Errorf("tap: %w", err)
	}
	ifr.SetUint16(unix.IFF_TAP | unix.IFF_NO_PI)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		return nil, fmt.Errorf("tap: create %s: %w", c.Name, err)
	}
	if err := Configure(c); err != nil {
		return nil, err
	}
	ok = true
	// Wrapped once the device exists, so that the runtime's poller
	// takes it.
	return os.NewFile(uintptr(fd), "tap:"+c.Name), nil
}

// Configure gives the existing interface c.Name, in the calling thread's
// network namespace, c's MTU, addresses and default routes, and brings it
// up: for an interface that is not a TAP device (a micro-VM's virtio-net).
func Configure(c Config) error {
	if err := c.check(); err != nil {
		return err
	}
	link, err := netlink.LinkByName(c.Name)
	if err != nil {
		return fmt.Errorf("tap: find %s: %w", c.Name, err)
	}
	if c.MTU != 0 {
		if err := netlink.LinkSetMTU(link, int(c.MTU)); err != nil {
			return fmt.Errorf("tap: set the MTU of %s to %d: %w", c.Name, c.MTU, err)
		}
	}
	if err := addAddr(link, c.Address); err != nil {
		return err
	}
	if c.AddressV6.IsValid() {
		// IPv6 would stay off until router advertisements say otherwise;
		// the address is static and duplicate detection only delays it.
		_ = os.WriteFile("/proc/sys/net/ipv6/conf/"+c.Name+"/accept_ra", []byte("0"), 0)
		if err := addAddr(link, c.AddressV6); err != nil {
			return err
		}
		if c.LinkLocalV6.IsValid() {
			if err := addAddr(link, c.LinkLocalV6); err != nil {
				return err
			}
		}
	}
	if err := netlink.LinkSetUp(link); err != nil {
		return fmt.Errorf("tap: bring %s up: %w", c.Name, err)
	}
	if err := addDefault(link, c.Gateway, 32); err != nil {
		return err
	}
	if c.AddressV6.IsValid() && c.GatewayV6.IsValid() {
		if err := addDefault(link, c.GatewayV6, 128); err != nil {
			return err
		}
	}
	return nil
}

func addAddr(link netlink.Link, p netip.Prefix) error {
	a := &netlink.Addr{IPNet: &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}}
	if p.Addr().Is6() {
		a.Flags = unix.IFA_F_NODAD
	}
	if err := netlink.AddrAdd(link, a); err != nil {
		return fmt.Errorf("tap: add address %s: %w", p, err)
	}
	return nil
}

func addDefault(link netlink.Link, gw netip.Addr, bits int) error {
	r := &netlink.Route{
		LinkIndex: link.Attrs().Index,
		Dst:       &net.IPNet{IP: make(net.IP, bits/8), Mask: net.CIDRMask(0, bits)},
		Gw:        gw.AsSlice(),
	}
	if err := netlink.RouteAdd(r); err != nil {
		return fmt.Errorf("tap: add the default route via %s: %w", gw, err)
	}
	return nil
}
