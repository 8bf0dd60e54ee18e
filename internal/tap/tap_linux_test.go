package tap

import (
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestCreate makes a TAP device in a fresh network namespace and checks,
// from inside that namespace, its address and routes, and that a packet
// the namespace sends to the gateway arrives on the returned file.
func TestCreate(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: TAP devices in another network namespace")
	}
	ns := exec.Command("unshare", "-n", "sleep", "60")
	if err := ns.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Process.Kill(); ns.Wait() })
	// unshare execs sleep once the namespace exists.
	deadline := time.Now().Add(5 * time.Second)
	for {
		self, _ := os.Readlink("/proc/self/ns/net")
		other, _ := os.Readlink("/proc/" + itoa(ns.Process.Pid) + "/ns/net")
		if other != "" && other != self {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the namespace did not appear")
		}
		time.Sleep(10 * time.Millisecond)
	}
	f, err := Create(ns.Process.Pid, Config{
		Name:      "eth0",
		Address:   netip.MustParsePrefix("10.88.0.2/24"),
		Gateway:   netip.MustParseAddr("10.88.0.1"),
		AddressV6: netip.MustParsePrefix("fd88::2/64"),
		GatewayV6: netip.MustParseAddr("fe80::1"),
		MTU:       1400,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	in := func(args ...string) string {
		t.Helper()
		out, err := exec.Command("nsenter", append([]string{"-t", itoa(ns.Process.Pid), "-n"}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	addr := in("ip", "addr", "show", "eth0")
	for _, want := range []string{"10.88.0.2/24", "fd88::2/64", "mtu 1400", "UP"} {
		if !strings.Contains(addr, want) {
			t.Errorf("eth0 lacks %q:\n%s", want, addr)
		}
	}
	if r := in("ip", "route"); !strings.Contains(r, "default via 10.88.0.1 dev eth0") {
		t.Errorf("no IPv4 default route:\n%s", r)
	}
	if r := in("ip", "-6", "route"); !strings.Contains(r, "default via fe80::1 dev eth0") {
		t.Errorf("no IPv6 default route:\n%s", r)
	}
	// The host's own interfaces are not in the namespace.
	if links := in("ip", "-o", "link"); strings.Count(links, "\n") != 2 {
		t.Errorf("the namespace has other links:\n%s", links)
	}
	// An ARP request for the gateway comes out of the file.
	go func() {
		out, err := exec.Command("nsenter", "-t", itoa(ns.Process.Pid), "-n", "bash", "-c", "echo x >/dev/udp/10.88.0.1/9").CombinedOutput()
		if err != nil {
			t.Logf("sending to the gateway: %v %s", err, out)
		}
	}()
	buf := make([]byte, 2048)
	f.SetReadDeadline(time.Now().Add(5 * time.Second))
	for {
		n, err := f.Read(buf)
		if err != nil {
			t.Fatalf("no frame from the sandbox: %v", err)
		}
		// Ethernet type ARP, target 10.88.0.1.
		if n >= 42 && buf[12] == 0x08 && buf[13] == 0x06 && string(buf[38:42]) == "\x0a\x58\x00\x01" {
			return
		}
	}
}

func itoa(i int) string { return strconv.Itoa(i) }
