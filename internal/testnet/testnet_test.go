package testnet_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/testnet"
)

func TestMain(m *testing.M) { os.Exit(testnet.Main(m)) }

// run runs a real client and returns its standard output; the test skips
// when the client is not installed, and fails when it fails.
func run(t *testing.T, stdin string, name string, args ...string) string {
	t.Helper()
	if _, err := exec.LookPath(name); err != nil {
		t.Skipf("%s is not installed", name)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\nstdout:\n%s\nstderr:\n%s", name, strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

func decodeEcho(t *testing.T, data []byte) testnet.Echo {
	t.Helper()
	var e testnet.Echo
	if err := json.Unmarshal(data, &e); err != nil {
		t.Fatalf("decoding /echo: %v\n%s", err, data)
	}
	return e
}

func get(t *testing.T, c *http.Client, url string) (*http.Response, []byte) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: reading the body: %v", url, err)
	}
	return resp, body
}

func TestAddressesAreNotInterfaceAddresses(t *testing.T) {
	testnet.Skip(t)
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		ip, _ := netip.ParsePrefix(a.String())
		if ip.Addr().String() == testnet.APIAddr {
			t.Errorf("net.InterfaceAddrs lists %s", testnet.APIAddr)
		}
		if !ip.Addr().IsLoopback() {
			t.Errorf("interface address %v: only loopback addresses were expected", a)
		}
	}
	// Yet the addresses are local: they can be bound.
	for _, addr := range []string{"203.0.113.200:0", "10.77.0.200:0", "[2001:db8:77::200]:0"} {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Errorf("listening on %s: %v", addr, err)
			continue
		}
		ln.Close()
	}
}

// A process that a test starts in the namespace, even unprivileged,
// finds it set up.
func TestNestedUnprivileged(t *testing.T) {
	testnet.Skip(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// Not t.TempDir: its parent is private to root.
	dir, err := os.MkdirTemp("", "testnet-nested-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	copied := filepath.Join(dir, "testnet.test")
	if err := os.WriteFile(copied, data, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(copied, "-test.run=^TestAddressesAreNotInterfaceAddresses$", "-test.v")
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: TestAddressesAreNotInterfaceAddresses") {
		t.Errorf("the test binary as nobody: %v\n%s", err, out)
	}
}

func TestDNS(t *testing.T) {
	w := testnet.Start(t)
	ctx := context.Background()
	r := w.Resolver()

	got, err := r.LookupNetIP(ctx, "ip", testnet.API)
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(got, netip.Addr.Compare)
	want := []netip.Addr{netip.MustParseAddr(testnet.APIAddr), netip.MustParseAddr(testnet.APIAddr6)}
	if !slices.Equal(got, want) {
		t.Errorf("%s: %v, want %v", testnet.API, got, want)
	}
	for name, want := range map[string]string{
		"Other.Example.ORG.": testnet.OtherAddr,
		testnet.Private:      testnet.PrivateAddr,
		testnet.Loop:         testnet.LoopAddr,
		testnet.Metadata:     testnet.MetadataAddr,
		testnet.WrongName:    testnet.APIAddr,
		"files.example.net.": testnet.FilesAddr,
	} {
		got, err := r.LookupNetIP(ctx, "ip4", name)
		if err != nil || len(got) != 1 || got[0].String() != want {
			t.Errorf("%s: %v, %v; want %s", name, got, err, want)
		}
	}

	_, err = r.LookupNetIP(ctx, "ip", "nowhere.example.com")
	var dnsErr *net.DNSError
	if !errors.As(err, &dnsErr) || !dnsErr.IsNotFound {
		t.Errorf("nowhere.example.com: %v, want NXDOMAIN", err)
	}
	if n := w.DNS.Queries("NOWHERE.example.com."); n == 0 {
		t.Errorf("Queries(nowhere.example.com) = 0 after a lookup")
	}
	if n := w.DNS.Queries("never.example.com"); n != 0 {
		t.Errorf("Queries(never.example.com) = %d, never asked", n)
	}

	// Successive lookups walk the sequence; the last answer repeats. Each
	// lookup asks for A and AAAA, which go through it each at its pace.
	a, b := netip.MustParseAddr("203.0.113.10"), netip.MustParseAddr("10.77.0.5")
	w.DNS.SetSequence("rebind.example.com", 0, []netip.Addr{a}, []netip.Addr{b})
	for i, want := range []netip.Addr{a, b, b} {
		got, err := r.LookupNetIP(ctx, "ip", "rebind.example.com")
		if err != nil || len(got) != 1 || got[0] != want {
			t.Errorf("lookup %d of rebind.example.com: %v, %v; want %v", i, got, err, want)
		}
	}
	if n := w.DNS.Queries("rebind.example.com"); n != 6 {
		t.Errorf("Queries(rebind.example.com) = %d after 3 lookups of A and AAAA, want 6", n)
	}

	w.DNS.SetTXT("txt.example.com", "v=test "+strings.Repeat("x", 300))
	txt, err := r.LookupTXT(ctx, "txt.example.com")
	if err != nil || strings.Join(txt, "") != "v=test "+strings.Repeat("x", 300) {
		t.Errorf("TXT: %q, %v", txt, err)
	}

	// Too long for UDP: truncated, then asked again over TCP.
	w.DNS.SetTXT("long.example.com", strings.Repeat("y", 3000))
	txt, err = r.LookupTXT(ctx, "long.example.com")
	if err != nil || strings.Join(txt, "") != strings.Repeat("y", 3000) {
		t.Errorf("long TXT: %d strings, %v", len(txt), err)
	}

	w.DNS.SetCNAME("alias.example.com", testnet.Private)
	got, err = r.LookupNetIP(ctx, "ip4", "alias.example.com")
	if err != nil || len(got) != 1 || got[0].String() != testnet.PrivateAddr {
		t.Errorf("CNAME alias.example.com: %v, %v", got, err)
	}

	// TCP gets the same answers.
	tcp := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", w.DNSAddr)
	}}
	got, err = tcp.LookupNetIP(ctx, "ip4", testnet.Files)
	if err != nil || len(got) != 1 || got[0].String() != testnet.FilesAddr {
		t.Errorf("over TCP: %v, %v", got, err)
	}

	w.DNS.Delete(testnet.Files)
	if _, err := r.LookupNetIP(ctx, "ip4", testnet.Files); !errors.As(err, &dnsErr) || !dnsErr.IsNotFound {
		t.Errorf("after Delete: %v, want NXDOMAIN", err)
	}
	if w.DNS.Total() == 0 || w.Reached(w.DNSAddr) == 0 {
		t.Errorf("Total %d, Reached(DNS) %d", w.DNS.Total(), w.Reached(w.DNSAddr))
	}
}

func TestCurl(t *testing.T) {
	w := testnet.Start(t)
	resolve := "api.example.com:443:" + testnet.APIAddr
	for _, tc := range []struct {
		args  []string
		proto string
		tls   bool
	}{
		{[]string{"--resolve", resolve, "--http1.1", "https://api.example.com/echo?a=1"}, "HTTP/1.1", true},
		{[]string{"--resolve", resolve, "--http2", "https://api.example.com/echo?a=1"}, "HTTP/2.0", true},
		{[]string{"--resolve", "api.example.com:8080:" + testnet.APIAddr, "http://api.example.com:8080/echo?a=1"}, "HTTP/1.1", false},
		{[]string{"--http2-prior-knowledge", "http://api.example.com:8080/echo?a=1", "--resolve", "api.example.com:8080:" + testnet.APIAddr}, "HTTP/2.0", false},
	} {
		args := append([]string{"-sS", "--fail", "--cacert", w.CAFile, "-H", "X-Test: yes"}, tc.args...)
		e := decodeEcho(t, []byte(run(t, "", "curl", args...)))
		if e.Proto != tc.proto || e.TLS != tc.tls || e.Path != "/echo" || e.Query != "a=1" || e.Headers["X-Test"] != "yes" {
			t.Errorf("curl %v: %+v", tc.args, e)
		}
		if tc.tls && e.SNI != testnet.API {
			t.Errorf("curl %v: SNI %q", tc.args, e.SNI)
		}
	}
	last, ok := w.LastRequest("api.example.com:8080")
	if !ok || last.Proto != "HTTP/2.0" || !strings.HasPrefix(last.Header.Get("User-Agent"), "curl/") {
		t.Errorf("LastRequest(api.example.com:8080): %+v, %v", last, ok)
	}
	if n := len(w.Requests(testnet.APIAddr + ":443")); n != 2 {
		t.Errorf("%d requests to %s:443, want 2", n, testnet.APIAddr)
	}

	// IPv6, and a POST body.
	out := run(t, "", "curl", "-sS", "--fail", "--cacert", w.CAFile, "-g", "-d", "hi there",
		"https://[2001:db8:77::10]/echo")
	e := decodeEcho(t, []byte(out))
	if e.Method != "POST" || e.Body != "hi there" || e.Server != "[2001:db8:77::10]:443" {
		t.Errorf("IPv6 POST: %+v", e)
	}
	if last, _ := w.LastRequest(testnet.APIAddr6); string(last.Body) != "hi there" {
		t.Errorf("LastRequest(%s).Body = %q", testnet.APIAddr6, last.Body)
	}
}

func TestOpenSSL(t *testing.T) {
	w := testnet.Start(t)
	out := run(t, "", "openssl", "s_client", "-connect", testnet.APIAddr+":8443",
		"-servername", testnet.API, "-CAfile", w.CAFile, "-verify_return_error", "-verify_hostname", testnet.API)
	if !strings.Contains(out, "Verify return code: 0 (ok)") {
		t.Errorf("openssl s_client did not verify:\n%s", out)
	}
}

func TestPython(t *testing.T) {
	w := testnet.Start(t)
	out := run(t, "", "python3", "-c", `
import json, urllib.request
print(urllib.request.urlopen("http://203.0.113.11:8080/echo?from=python").read().decode())
`)
	e := decodeEcho(t, []byte(out))
	if e.Host != "203.0.113.11:8080" || e.Query != "from=python" || !strings.HasPrefix(e.Headers["User-Agent"], "Python-urllib") {
		t.Errorf("python: %+v", e)
	}
	if w.Reached(testnet.Other) != 1 {
		t.Errorf("Reached(%s) = %d, want 1", testnet.Other, w.Reached(testnet.Other))
	}
}

func TestPaths(t *testing.T) {
	w := testnet.Start(t)
	c := w.Client()

	resp, body := get(t, c, w.URL(testnet.Other, 443, "/"))
	if string(body) != "hello from other.example.org\n" || resp.Proto != "HTTP/2.0" {
		t.Errorf("/: %s %q", resp.Proto, body)
	}
	resp, _ = get(t, c, w.URL(testnet.Files, 80, "/nothing"))
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("/nothing: %s", resp.Status)
	}
	resp, _ = get(t, c, w.URL(testnet.Files, 8443, "/status/418"))
	if resp.StatusCode != http.StatusTeapot {
		t.Errorf("/status/418: %s", resp.Status)
	}
	const n = 1<<20 + 12345
	resp, body = get(t, c, w.URL(testnet.API, 8080, "/bytes?n=1060921"))
	if resp.ContentLength != n || !bytes.Equal(body, testnet.Pattern(n)) {
		t.Errorf("/bytes: length %d (%d read), pattern equal %v", resp.ContentLength, len(body), bytes.Equal(body, testnet.Pattern(n)))
	}
	resp, body = get(t, c, w.URL(testnet.API, 80, "/chunked?n=3"))
	if string(body) != "chunk 1\nchunk 2\nchunk 3\n" || !slices.Equal(resp.TransferEncoding, []string{"chunked"}) {
		t.Errorf("/chunked: %q, %v", body, resp.TransferEncoding)
	}
	_, body = get(t, c, w.URL(testnet.API, 443, "/sse?n=3&gap_ms=5"))
	if string(body) != "data: 1\n\ndata: 2\n\ndata: 3\n\n" {
		t.Errorf("/sse: %q", body)
	}
	resp, err := c.Post(w.URL(testnet.API, 443, "/discard"), "application/octet-stream", bytes.NewReader(make([]byte, 100000)))
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "{\"bytes\": 100000}\n" {
		t.Errorf("/discard: %q", body)
	}
	if n := len(w.Requests("")); n != 7 {
		t.Errorf("%d requests recorded, want 7", n)
	}
}

func TestCertificates(t *testing.T) {
	w := testnet.Start(t)
	c := w.Client()
	for name, want := range map[string]string{
		testnet.Untrusted: "unknown authority",
		testnet.Expired:   "expired",
		testnet.WrongName: "not " + testnet.WrongName,
	} {
		_, err := c.Get(w.URL(name, 443, "/"))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error with %q", name, err, want)
		}
	}
	// The IP addresses are in the certificate too.
	if _, body := get(t, c, w.URL(testnet.APIAddr6, 443, "/")); string(body) != "hello from api.example.com\n" {
		t.Errorf("IPv6 literal: %q", body)
	}
}

func TestHold(t *testing.T) {
	w := testnet.Start(t)
	for _, port := range []int{443, 8080} {
		resp, err := w.Client().Get(w.URL(testnet.API, port, "/hold"))
		if err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(resp.Body)
		line, err := br.ReadString('\n')
		if err != nil || line != "data: held\n" {
			t.Fatalf("first event: %q, %v", line, err)
		}
		if n := w.Release(); n != 1 {
			t.Errorf("Release released %d holds, want 1", n)
		}
		rest, err := io.ReadAll(br)
		resp.Body.Close()
		if err != nil || string(rest) != "\ndata: released\n\n" {
			t.Errorf("after Release: %q, %v", rest, err)
		}
	}
	if n := w.Release(); n != 0 {
		t.Errorf("Release with no hold: %d", n)
	}
}

func TestTCPEcho(t *testing.T) {
	w := testnet.Start(t)
	for _, addr := range []string{testnet.APIAddr, testnet.APIAddr6, testnet.FilesAddr} {
		c, err := net.Dial("tcp", net.JoinHostPort(addr, "2222"))
		if err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(c)
		if banner, err := br.ReadString('\n'); banner != testnet.EchoBanner {
			t.Errorf("%s: banner %q, %v", addr, banner, err)
		}
		io.WriteString(c, "hello echo\n")
		if line, err := br.ReadString('\n'); line != "hello echo\n" {
			t.Errorf("%s: echo %q, %v", addr, line, err)
		}
		c.Close()
	}
	if n := w.Reached(testnet.APIAddr + ":2222"); n != 1 {
		t.Errorf("Reached(%s:2222) = %d", testnet.APIAddr, n)
	}
}

func TestUDPEcho(t *testing.T) {
	testnet.Start(t)
	for _, addr := range []string{testnet.OtherAddr, testnet.APIAddr6} {
		c, err := net.Dial("udp", net.JoinHostPort(addr, "9999"))
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Write([]byte("ping")); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 100)
		n, err := c.Read(buf)
		if string(buf[:n]) != "ping" {
			t.Errorf("%s: %q, %v", addr, buf[:n], err)
		}
		c.Close()
	}
}

func TestPrivate(t *testing.T) {
	w := testnet.Start(t)
	c := w.Client()
	for _, tc := range []struct{ name, url, addr string }{
		{testnet.Private, "http://private.example.com/echo", "10.77.0.5:80"},
		{testnet.Metadata, "http://169.254.169.254/latest/meta-data/", "169.254.169.254:80"},
		{testnet.Loop, "http://loop.example.com:7780/", "127.0.0.1:7780"},
		{testnet.Loop, "http://loop.example.com/", "127.0.0.1:80"},
		{testnet.Loop, "http://[::1]:7780/", "[::1]:7780"},
	} {
		if n := w.Reached(tc.addr); n != 0 {
			t.Errorf("Reached(%s) = %d before any request", tc.addr, n)
		}
		_, body := get(t, c, tc.url)
		if string(body) != "PRIVATE "+tc.addr+"\n" {
			t.Errorf("%s: %q", tc.url, body)
		}
		if n := w.Reached(tc.addr); n != 1 {
			t.Errorf("Reached(%s) = %d, want 1", tc.addr, n)
		}
		if last, ok := w.LastRequest(tc.addr); !ok || last.Name != "private" {
			t.Errorf("LastRequest(%s) = %+v, %v", tc.addr, last, ok)
		}
	}
	if n := w.Reached(testnet.Loop); n != 3 {
		t.Errorf("Reached(%s) = %d, want 3", testnet.Loop, n)
	}
}

func TestWebSocket(t *testing.T) {
	w := testnet.Start(t)
	plain, err := net.Dial("tcp", testnet.APIAddr+":80")
	if err != nil {
		t.Fatal(err)
	}
	wsEcho(t, plain, testnet.API)
	if r, _ := w.LastRequest(testnet.API); len(r.Messages) != 2 || string(r.Messages[0]) != "hello ws" || len(r.Messages[1]) != 1000 {
		t.Errorf("/ws recorded the messages %q", r.Messages)
	}
	secure, err := tls.Dial("tcp", testnet.OtherAddr+":443", &tls.Config{
		RootCAs: w.CertPool(), ServerName: testnet.Other, NextProtos: []string{"http/1.1"},
	})
	if err != nil {
		t.Fatal(err)
	}
	wsEcho(t, secure, testnet.Other)
}

// wsEcho makes the WebSocket handshake on c, then sends frames and reads
// their echoes.
func wsEcho(t *testing.T, c net.Conn, host string) {
	t.Helper()
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	keyBytes := make([]byte, 16)
	rand.Read(keyBytes)
	key := base64.StdEncoding.EncodeToString(keyBytes)
	io.WriteString(c, "GET /ws HTTP/1.1\r\nHost: "+host+"\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
		"Sec-WebSocket-Key: "+key+"\r\nSec-WebSocket-Version: 13\r\n\r\n")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols || resp.Header.Get("Sec-WebSocket-Accept") != testnet.WebSocketAccept(key) {
		t.Fatalf("handshake: %s %v", resp.Status, resp.Header)
	}
	send := func(op byte, payload []byte) {
		mask := []byte{1, 2, 3, 4}
		frame := []byte{0x80 | op}
		if len(payload) < 126 {
			frame = append(frame, 0x80|byte(len(payload)))
		} else {
			frame = append(frame, 0x80|126)
			frame = binary.BigEndian.AppendUint16(frame, uint16(len(payload)))
		}
		frame = append(frame, mask...)
		for i, b := range payload {
			frame = append(frame, b^mask[i%4])
		}
		if _, err := c.Write(frame); err != nil {
			t.Fatal(err)
		}
	}
	recv := func() (byte, []byte) {
		var h [2]byte
		if _, err := io.ReadFull(br, h[:]); err != nil {
			t.Fatal(err)
		}
		n := int(h[1] & 0x7f)
		if n == 126 {
			var l [2]byte
			io.ReadFull(br, l[:])
			n = int(binary.BigEndian.Uint16(l[:]))
		}
		p := make([]byte, n)
		if _, err := io.ReadFull(br, p); err != nil {
			t.Fatal(err)
		}
		return h[0], p
	}
	send(0x1, []byte("hello ws"))
	if b0, p := recv(); b0 != 0x81 || string(p) != "hello ws" {
		t.Errorf("text echo: %#x %q", b0, p)
	}
	big := bytes.Repeat([]byte{0xfe}, 1000)
	send(0x2, big)
	if b0, p := recv(); b0 != 0x82 || !bytes.Equal(p, big) {
		t.Errorf("binary echo: %#x, %d bytes", b0, len(p))
	}
	send(0x9, []byte("ping"))
	if b0, p := recv(); b0 != 0x8A || string(p) != "ping" {
		t.Errorf("pong: %#x %q", b0, p)
	}
	send(0x8, []byte{0x03, 0xe8})
	if b0, p := recv(); b0 != 0x88 || !bytes.Equal(p, []byte{0x03, 0xe8}) {
		t.Errorf("close: %#x %q", b0, p)
	}
}

func TestURL(t *testing.T) {
	var w testnet.World
	for _, tc := range []struct {
		name string
		port int
		path string
		want string
	}{
		{testnet.API, 443, "/echo", "https://api.example.com/echo"},
		{testnet.API, 8443, "echo", "https://api.example.com:8443/echo"},
		{testnet.API, 80, "/", "http://api.example.com/"},
		{testnet.API, 8080, "/x?y=1", "http://api.example.com:8080/x?y=1"},
		{testnet.APIAddr6, 443, "/", "https://[2001:db8:77::10]/"},
		{testnet.APIAddr6, 8080, "/", "http://[2001:db8:77::10]:8080/"},
	} {
		if got := w.URL(tc.name, tc.port, tc.path); got != tc.want {
			t.Errorf("URL(%q, %d, %q) = %q, want %q", tc.name, tc.port, tc.path, got, tc.want)
		}
	}
}

func BenchmarkBytes(b *testing.B) {
	w := testnet.Start(b)
	c := w.Client()
	const n = 64 << 20
	url := w.URL(testnet.API, 8080, "/bytes?n=67108864")
	b.SetBytes(n)
	for b.Loop() {
		resp, err := c.Get(url)
		if err != nil {
			b.Fatal(err)
		}
		got, err := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err != nil || got != n {
			b.Fatalf("%d bytes, %v", got, err)
		}
	}
}
