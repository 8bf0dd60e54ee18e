package testnet

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// envNetns marks a test binary that Main re-executed in a network
// namespace of its own. Its value is the identity of the namespace Main
// left, so that the child can tell it really is somewhere else.
const envNetns = "AIRLOCK_TESTNET_NETNS"

// localRoutes are the prefixes the namespace treats as its own, through
// local routes on lo rather than interface addresses.
var localRoutes = []netip.Prefix{
	netip.MustParsePrefix("203.0.113.0/24"),
	netip.MustParsePrefix("10.77.0.0/24"),
	netip.MustParsePrefix("169.254.169.254/32"),
	netip.MustParsePrefix("2001:db8:77::/64"),
}

// Main runs the tests of a package inside a network namespace of their
// own. Call it from TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(testnet.Main(m)) }
//
// As root, Main re-executes the test binary with the same arguments in a
// new network namespace, passes stdio and signals through, and returns the
// child's exit code; the tests run only in the child. There, Main brings
// lo up, adds local routes for the World's addresses (203.0.113.0/24,
// 10.77.0.0/24, 169.254.169.254/32 and 2001:db8:77::/64), lets IPv6
// sockets bind addresses that no interface carries, and runs m.Run. The
// routes make those addresses local without being interface addresses, so
// net.InterfaceAddrs lists only 127.0.0.1 and ::1.
//
// Everything a test serves or dials is then inside that namespace, which
// has no way out: a broken build cannot reach any other machine.
//
// Not root, or no namespace to be had: Main runs m.Run as it is, with
// Available false, and Start skips. A process that a test started inside
// the namespace (the test binary again, say, as another user) inherits
// it: there Main finds it set up and runs m.Run with Available true.
func Main(m *testing.M) int { return MainFunc(m.Run) }

// MainFunc is Main for a TestMain that has work of its own around m.Run,
// which must happen in the namespace, not in the process that only
// re-executes the binary there:
//
//	func TestMain(m *testing.M) {
//		os.Exit(testnet.MainFunc(func() int {
//			setUp()
//			defer tearDown()
//			return m.Run()
//		}))
//	}
//
// run is called once, in the namespace when there is one, with Available
// already set.
func MainFunc(run func() int) int {
	if parent := os.Getenv(envNetns); parent != "" && freshNetns(parent) {
		if netnsReady() {
			available = true
		} else if err := setupNetns(); err != nil {
			reason = "setting up the test network namespace: " + err.Error()
		} else {
			available = true
		}
		return run()
	}
	if os.Geteuid() != 0 {
		reason = "not root: a network namespace of the tests' own needs root"
		return run()
	}
	code, err := reexec()
	if err != nil {
		reason = "no network namespace: " + err.Error()
		return run()
	}
	return code
}

// netnsID identifies the network namespace of process pid ("self" for
// this one) by the device and inode of its namespace file.
func netnsID(pid string) (string, error) {
	var st unix.Stat_t
	if err := unix.Stat("/proc/"+pid+"/ns/net", &st); err != nil {
		return "", err
	}
	return strconv.FormatUint(st.Dev, 10) + ":" + strconv.FormatUint(st.Ino, 10), nil
}

// freshNetns reports whether this process is in a namespace of the tests'
// own: not the one of the process that re-executed it (parent), not the
// one of PID 1, and with no interface but loopback. A marker inherited by
// accident, or set by hand, is ignored rather than trusted, so that Main
// never changes the routes of a namespace that reaches other machines.
func freshNetns(parent string) bool {
	self, err := netnsID("self")
	if err != nil || self == parent {
		return false
	}
	if init, err := netnsID("1"); err == nil && init == self {
		return false
	}
	ifaces, err := net.Interfaces()
	if err != nil {
		return false
	}
	for _, ifc := range ifaces {
		if ifc.Flags&net.FlagLoopback == 0 {
			return false
		}
	}
	return true
}

// reexec runs this test binary again in a new network namespace and
// returns its exit code.
func reexec() (int, error) {
	self, err := netnsID("self")
	if err != nil {
		return 0, err
	}
	exe, err := os.Executable()
	if err != nil {
		return 0, err
	}
	// Pdeathsig belongs to the thread that starts the child: keep this
	// goroutine on it until the child is gone.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()

	cmd := exec.Command(exe, os.Args[1:]...)
	cmd.Args[0] = os.Args[0]
	cmd.Env = append(os.Environ(), envNetns+"="+self)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags: syscall.CLONE_NEWNET,
		Pdeathsig:  syscall.SIGKILL,
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGQUIT, syscall.SIGHUP)
	defer signal.Stop(sigs)
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	done := make(chan struct{})
	go func() {
		for {
			select {
			case s := <-sigs:
				_ = cmd.Process.Signal(s)
			case <-done:
				return
			}
		}
	}()
	err = cmd.Wait()
	close(done)
	if st, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && st.Signaled() {
		fmt.Fprintf(os.Stderr, "testnet: test binary killed by %v\n", st.Signal())
		return 128 + int(st.Signal()), nil
	}
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		fmt.Fprintf(os.Stderr, "testnet: waiting for the test binary: %v\n", err)
		return 1, nil
	}
	return cmd.ProcessState.ExitCode(), nil
}

// netnsReady reports whether the namespace is set up already: lo up, an
// address of every local route bindable, IPv6 binds of routed addresses
// allowed.
func netnsReady() bool {
	lo, err := net.InterfaceByName("lo")
	if err != nil || lo.Flags&net.FlagUp == 0 {
		return false
	}
	if b, err := os.ReadFile("/proc/sys/net/ipv6/ip_nonlocal_bind"); err != nil || string(b) != "1\n" {
		return false
	}
	for _, p := range localRoutes {
		a := p.Masked().Addr()
		if p.Contains(a.Next()) {
			a = a.Next()
		}
		ln, err := net.Listen("tcp", netip.AddrPortFrom(a, 0).String())
		if err != nil {
			return false
		}
		ln.Close()
	}
	return true
}

// setupNetns brings lo up, adds the local routes and allows IPv6 binds of
// addresses that are routed locally but carried by no interface (IPv4
// allows those already).
func setupNetns() error {
	lo, err := net.InterfaceByName("lo")
	if err != nil {
		return err
	}
	nl, err := openNetlink()
	if err != nil {
		return err
	}
	defer unix.Close(nl.fd)
	if err := nl.linkUp(lo.Index); err != nil {
		return fmt.Errorf("bringing lo up: %w", err)
	}
	for _, p := range localRoutes {
		if err := nl.addLocalRoute(p, lo.Index); err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("adding local route %v: %w", p, err)
		}
	}
	if err := os.WriteFile("/proc/sys/net/ipv6/ip_nonlocal_bind", []byte("1\n"), 0); err != nil {
		return fmt.Errorf("allowing IPv6 binds of routed addresses: %w", err)
	}
	return nil
}

// netlinkConn is a NETLINK_ROUTE socket for the few requests setupNetns
// makes.
type netlinkConn struct {
	fd  int
	seq uint32
}

func openNetlink() (*netlinkConn, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, err
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return &netlinkConn{fd: fd}, nil
}

// linkUp is `ip link set dev <index> up`.
func (c *netlinkConn) linkUp(index int) error {
	body := make([]byte, unix.SizeofIfInfomsg)
	body[0] = unix.AF_UNSPEC
	binary.NativeEndian.PutUint32(body[4:], uint32(index))
	binary.NativeEndian.PutUint32(body[8:], unix.IFF_UP)  // flags
	binary.NativeEndian.PutUint32(body[12:], unix.IFF_UP) // change
	return c.request(unix.RTM_NEWLINK, 0, body)
}

// addLocalRoute is `ip route add local <p> dev <index>`: a route of type
// local in the local table, which makes every address of p one of the
// host's own.
func (c *netlinkConn) addLocalRoute(p netip.Prefix, index int) error {
	family := byte(unix.AF_INET)
	if p.Addr().Is6() {
		family = unix.AF_INET6
	}
	body := make([]byte, unix.SizeofRtMsg)
	body[0] = family
	body[1] = byte(p.Bits()) // dst_len
	body[4] = unix.RT_TABLE_LOCAL
	body[5] = unix.RTPROT_BOOT
	body[6] = unix.RT_SCOPE_HOST
	body[7] = unix.RTN_LOCAL
	body = appendAttr(body, unix.RTA_DST, p.Masked().Addr().AsSlice())
	oif := make([]byte, 4)
	binary.NativeEndian.PutUint32(oif, uint32(index))
	body = appendAttr(body, unix.RTA_OIF, oif)
	return c.request(unix.RTM_NEWROUTE, unix.NLM_F_CREATE|unix.NLM_F_EXCL, body)
}

func appendAttr(b []byte, typ uint16, data []byte) []byte {
	var hdr [unix.SizeofRtAttr]byte
	binary.NativeEndian.PutUint16(hdr[0:], uint16(unix.SizeofRtAttr+len(data)))
	binary.NativeEndian.PutUint16(hdr[2:], typ)
	b = append(b, hdr[:]...)
	b = append(b, data...)
	for len(b)%unix.NLMSG_ALIGNTO != 0 {
		b = append(b, 0)
	}
	return b
}

// request sends one message and waits for the kernel's acknowledgement.
func (c *netlinkConn) request(typ uint16, flags uint16, body []byte) error {
	c.seq++
	msg := make([]byte, unix.SizeofNlMsghdr, unix.SizeofNlMsghdr+len(body))
	binary.NativeEndian.PutUint32(msg[0:], uint32(unix.SizeofNlMsghdr+len(body)))
	binary.NativeEndian.PutUint16(msg[4:], typ)
	binary.NativeEndian.PutUint16(msg[6:], unix.NLM_F_REQUEST|unix.NLM_F_ACK|flags)
	binary.NativeEndian.PutUint32(msg[8:], c.seq)
	msg = append(msg, body...)
	if err := unix.Sendto(c.fd, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return err
	}
	buf := make([]byte, 8192)
	for {
		n, _, err := unix.Recvfrom(c.fd, buf, 0)
		if err != nil {
			return err
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			return err
		}
		for _, m := range msgs {
			if m.Header.Seq != c.seq || m.Header.Type != unix.NLMSG_ERROR {
				continue
			}
			if len(m.Data) < 4 {
				return errors.New("short netlink error message")
			}
			if errno := int32(binary.NativeEndian.Uint32(m.Data)); errno != 0 {
				return unix.Errno(-errno)
			}
			return nil
		}
	}
}
