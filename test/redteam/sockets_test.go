//go:build linux

package redteam_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/policy"
)

// socketFamiliesAllowed are the only families a sandbox may create
// sockets in; everything else is a channel the network policy does not
// see (AF_VSOCK to the hypervisor of a host that is itself a VM,
// AF_PACKET, ...) or kernel surface no sandbox needs (AF_ALG, AF_XDP, ...).
var socketFamiliesAllowed = map[int]bool{unix.AF_UNIX: true, unix.AF_INET: true, unix.AF_INET6: true, unix.AF_NETLINK: true}

// socketNetlinkAllowed are the netlink protocols of ip and ss.
var socketNetlinkAllowed = map[int]bool{unix.NETLINK_ROUTE: true, unix.NETLINK_SOCK_DIAG: true}

// socketTry is one socket(2) or socketpair(2) made in the sandbox.
type socketTry struct {
	Pair   bool `json:"pair"`
	Family int  `json:"family"`
	Type   int  `json:"type"`
	Proto  int  `json:"proto"`
	Errno  int  `json:"errno"` // 0: the call succeeded
}

// socketTries makes every call of tries in sb, from python's socket
// module (which passes the numbers through unchanged), and returns the
// errno of each.
func socketTries(t *testing.T, sb *airlock.Sandbox, tries []socketTry) []socketTry {
	t.Helper()
	in, err := json.Marshal(tries)
	if err != nil {
		t.Fatal(err)
	}
	out := py(t, sb, fmt.Sprintf(`import json, socket
tries = json.loads(%q)
for c in tries:
    try:
        if c["pair"]:
            for s in socket.socketpair(c["family"], c["type"], c["proto"]):
                s.close()
        else:
            socket.socket(c["family"], c["type"], c["proto"]).close()
        c["errno"] = 0
    except OSError as e:
        c["errno"] = e.errno
print(json.dumps(tries))`, in))
	var got []socketTry
	if err := json.Unmarshal([]byte(out), &got); err != nil || len(got) != len(tries) {
		t.Fatalf("python's answer %q: %v", out, err)
	}
	return got
}

func errnoString(e int) string {
	if e == 0 {
		return "success"
	}
	return fmt.Sprintf("%v (%s)", syscall.Errno(e), unix.ErrnoName(syscall.Errno(e)))
}

// TestAttackSocketFamilies creates sockets of every family number from inside
// a sandbox: all but unix, inet, inet6 and netlink fail with
// EAFNOSUPPORT, through socket and socketpair, whatever the type; netlink
// opens only for routes and socket listings.
func TestAttackSocketFamilies(t *testing.T) {
	eachLevel(t, func(t *testing.T, lv airlock.Isolation) {
		sb := box(t, lv, airlock.Config{})
		var tries []socketTry
		// AF_MAX is 46 in Linux 6.x; numbers past it must stay refused
		// when a later kernel gives them meaning.
		for family := range 64 {
			if socketFamiliesAllowed[family] {
				continue
			}
			for _, typ := range []int{unix.SOCK_STREAM, unix.SOCK_DGRAM, unix.SOCK_RAW, unix.SOCK_SEQPACKET, unix.SOCK_DGRAM | unix.SOCK_CLOEXEC | unix.SOCK_NONBLOCK} {
				tries = append(tries, socketTry{Family: family, Type: typ})
			}
			tries = append(tries, socketTry{Pair: true, Family: family, Type: unix.SOCK_DGRAM})
		}
		// The kernel makes (AF_INET, SOCK_PACKET) an AF_PACKET socket.
		tries = append(tries,
			socketTry{Family: unix.AF_INET, Type: unix.SOCK_PACKET, Proto: 0x0300},
			socketTry{Family: unix.AF_INET, Type: unix.SOCK_PACKET | unix.SOCK_CLOEXEC, Proto: 0x0300})
		for _, c := range socketTries(t, sb, tries) {
			if c.Errno != int(unix.EAFNOSUPPORT) {
				t.Errorf("socket(family %d, type %#x, proto %d) pair=%v: %s, want EAFNOSUPPORT", c.Family, c.Type, c.Proto, c.Pair, errnoString(c.Errno))
			}
		}

		tries = tries[:0]
		for proto := range 32 {
			tries = append(tries, socketTry{Family: unix.AF_NETLINK, Type: unix.SOCK_RAW, Proto: proto},
				socketTry{Family: unix.AF_NETLINK, Type: unix.SOCK_DGRAM, Proto: proto})
		}
		for _, c := range socketTries(t, sb, tries) {
			want := int(unix.EPROTONOSUPPORT)
			if socketNetlinkAllowed[c.Proto] {
				want = 0
				if lv == airlock.IsolationGVisor && c.Proto == unix.NETLINK_SOCK_DIAG && c.Errno == int(unix.EPROTONOSUPPORT) {
					// Let through, but gVisor's Sentry has no socket
					// listings: refused there, cleanly.
					want = int(unix.EPROTONOSUPPORT)
				}
			}
			if c.Errno != want {
				t.Errorf("socket(AF_NETLINK, type %d, protocol %d): %s, want %s", c.Type, c.Proto, errnoString(c.Errno), errnoString(want))
			}
		}

		// What is allowed works: unix and inet sockets of every common
		// type, loopback without a network, and the netlink tools.
		tries = tries[:0]
		for _, typ := range []int{unix.SOCK_STREAM, unix.SOCK_DGRAM, unix.SOCK_SEQPACKET} {
			tries = append(tries, socketTry{Family: unix.AF_UNIX, Type: typ}, socketTry{Pair: true, Family: unix.AF_UNIX, Type: typ})
		}
		for _, f := range []int{unix.AF_INET, unix.AF_INET6} {
			tries = append(tries, socketTry{Family: f, Type: unix.SOCK_STREAM}, socketTry{Family: f, Type: unix.SOCK_DGRAM})
		}
		for _, c := range socketTries(t, sb, tries) {
			if c.Errno != 0 {
				t.Errorf("socket(family %d, type %d) pair=%v: %s, want success", c.Family, c.Type, c.Pair, errnoString(c.Errno))
			}
		}
		out := py(t, sb, `import socket
a, b = socket.socketpair(); a.sendall(b"unix"); print(b.recv(4).decode())
for fam, addr in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")):
    l = socket.socket(fam); l.bind((addr, 0)); l.listen(1)
    c = socket.create_connection(l.getsockname()[:2], timeout=5); s, _ = l.accept()
    c.sendall(b"tcp"); print(s.recv(3).decode(), addr)
    u = socket.socket(fam, socket.SOCK_DGRAM); u.bind((addr, 0))
    v = socket.socket(fam, socket.SOCK_DGRAM); v.sendto(b"udp", u.getsockname()[:2]); print(u.recv(3).decode(), addr)
print(socket.if_nameindex())`)
		for _, want := range []string{"unix", "tcp 127.0.0.1", "udp 127.0.0.1", "tcp ::1", "udp ::1", "'lo'"} {
			if !strings.Contains(out, want) {
				t.Errorf("loopback and unix round trips printed %q, want %q in it", out, want)
			}
		}
		socketTools(t, sb, "inet 127.0.0.1/8")
	})
}

// TestAttackSocketFamiliesNetwork checks that a sandbox with a network has the
// same families (its interface changes nothing), and that ip and ss see
// its interface through netlink.
func TestAttackSocketFamiliesNetwork(t *testing.T) {
	needNetwork(t)
	eachLevel(t, func(t *testing.T, lv airlock.Isolation) {
		sb := box(t, lv, airlock.Config{Network: &policy.Config{}})
		var tries []socketTry
		for _, f := range []int{unix.AF_VSOCK, unix.AF_PACKET, unix.AF_ALG, unix.AF_XDP, unix.AF_KEY, unix.AF_TIPC, unix.AF_RDS, unix.AF_QIPCRTR, unix.AF_SMC} {
			tries = append(tries, socketTry{Family: f, Type: unix.SOCK_RAW}, socketTry{Family: f, Type: unix.SOCK_DGRAM})
		}
		tries = append(tries, socketTry{Family: unix.AF_INET, Type: unix.SOCK_PACKET, Proto: 0x0300})
		for _, c := range socketTries(t, sb, tries) {
			if c.Errno != int(unix.EAFNOSUPPORT) {
				t.Errorf("with a network, socket(family %d, type %#x): %s, want EAFNOSUPPORT", c.Family, c.Type, errnoString(c.Errno))
			}
		}
		socketTools(t, sb, "inet 10.88.0.2/24")
	})
}

// socketTools runs ip and ss, when the sandbox has them: their netlink
// protocols are the ones allowed, and they must work. ip must show
// address wantAddr; ss must list a listener made for it.
func socketTools(t *testing.T, sb *airlock.Sandbox, wantAddr string) {
	t.Helper()
	if sh(t, sb, "command -v ip && command -v ss").ExitCode != 0 {
		t.Log("ip or ss is not in the sandbox: the netlink tools are not tried")
		return
	}
	if out := ok(t, sb, "ip addr"); !strings.Contains(out, wantAddr) {
		t.Errorf("ip addr printed %q, want %q in it", out, wantAddr)
	}
	if out := ok(t, sb, "ip route; ip link"); !strings.Contains(out, "lo:") {
		t.Errorf("ip link printed %q, want the loopback device", out)
	}
	// ss asks NETLINK_SOCK_DIAG; the listener is one python leaves open
	// for as long as ss runs.
	out := ok(t, sb, `python3 -c '
import socket, subprocess
l = socket.socket(); l.bind(("127.0.0.1", 0)); l.listen(1)
print("port", l.getsockname()[1])
print(subprocess.run(["ss", "-Hltn"], capture_output=True, text=True, check=True).stdout)'`)
	port := strings.Fields(strings.SplitN(out, "\n", 2)[0])
	if len(port) != 2 || !strings.Contains(out, "127.0.0.1:"+port[1]) {
		t.Errorf("ss -ltn printed %q, want the listener on 127.0.0.1", out)
	}
}
