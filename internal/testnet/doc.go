// Package testnet is a stand-in internet for end-to-end tests: DNS, HTTP,
// HTTPS, WebSocket, TCP and UDP servers on fixed public-looking addresses,
// all of them inside a network namespace that the test binary made for
// itself, so that nothing a test does can reach another machine.
//
// A package opts in from its TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(testnet.Main(m)) }
//
// and each test that needs the servers calls Start:
//
//	w := testnet.Start(t) // skips the test when there is no namespace
//	resp, err := w.Client().Get(w.URL(testnet.API, 443, "/echo"))
//
// # Addresses
//
// The World's DNS server (UDP and TCP, DNSAddr 203.0.113.53:53) answers:
//
//	name                    A                 AAAA             serves
//	api.example.com         203.0.113.10      2001:db8:77::10  full set (below)
//	other.example.org       203.0.113.11                       full set
//	files.example.net       203.0.113.12                       full set
//	wrongname.example.com   203.0.113.10                       (not in .10's certificate)
//	untrusted.example.com   203.0.113.13                       HTTPS 443, certificate from another CA
//	expired.example.com     203.0.113.14                       HTTPS 443, expired certificate
//	private.example.com     10.77.0.5                          private HTTP on 80
//	loop.example.com        127.0.0.1                          private HTTP on 7780 and 80
//	metadata.example.com    169.254.169.254                    private HTTP on 80
//
// The full set, on 203.0.113.10 (and [2001:db8:77::10]), .11 and .12:
//
//	443, 8443  HTTPS, h2 and http/1.1, certificate signed by the World's CA
//	80, 8080   HTTP/1.1 (and h2c with prior knowledge)
//	2222       TCP echo: sends "ECHO ready\n", then echoes every byte
//	9999       UDP echo: returns each datagram to its sender
//
// A site's certificate names its DNS names (api.example.com's also
// *.api.example.com) and its IP addresses. The private servers, also on
// [::1]:7780, answer every request with "PRIVATE <ip:port>\n"; tests assert
// through Reached that the sandbox never got to them.
//
// Every HTTP and HTTPS site serves the same paths: see [World] for them.
//
// # Isolation
//
// Main re-executes the test binary in a new network namespace and makes
// the addresses above local there through local routes on lo, not
// interface addresses: the sockets bind, the kernel delivers, and
// net.InterfaceAddrs still lists only 127.0.0.1 and ::1. Without root or
// without namespaces, Available is false and Start skips: the World never
// serves, and its clients never dial, outside a namespace of its own.
package testnet

import "testing"

// Names the World's DNS server answers by default.
const (
	API       = "api.example.com"
	Other     = "other.example.org"
	Files     = "files.example.net"
	WrongName = "wrongname.example.com"
	Untrusted = "untrusted.example.com"
	Expired   = "expired.example.com"
	Private   = "private.example.com"
	Loop      = "loop.example.com"
	Metadata  = "metadata.example.com"
)

// The World's addresses.
const (
	APIAddr       = "203.0.113.10"
	APIAddr6      = "2001:db8:77::10"
	OtherAddr     = "203.0.113.11"
	FilesAddr     = "203.0.113.12"
	UntrustedAddr = "203.0.113.13"
	ExpiredAddr   = "203.0.113.14"
	PrivateAddr   = "10.77.0.5"
	LoopAddr      = "127.0.0.1"
	LoopAddr6     = "::1"
	MetadataAddr  = "169.254.169.254"
	// DNSAddr is the World's DNS server, UDP and TCP, as ip:port (the
	// form of network.dns_servers).
	DNSAddr = "203.0.113.53:53"
)

// The World's ports.
const (
	PortHTTP     = 80
	PortHTTPAlt  = 8080
	PortHTTPS    = 443
	PortHTTPSAlt = 8443
	PortEcho     = 2222 // TCP echo, banner first
	PortUDPEcho  = 9999
	PortLoop     = 7780 // the private server on 127.0.0.1 and ::1
)

// EchoBanner is what the TCP echo server sends on every new connection
// before it echoes anything.
const EchoBanner = "ECHO ready\n"

var (
	available bool
	reason    = "testnet.Main was not called: the package's TestMain must return testnet.Main(m)"
)

// Available reports whether this test binary runs in a network namespace
// that Main set up, so that a World can start.
func Available() bool { return available }

// Skip skips the test, with the reason, unless Available.
func Skip(t testing.TB) {
	t.Helper()
	if !available {
		t.Skip("testnet: " + reason)
	}
}
