package egress_test

import (
	"context"
	"io"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/testnet"
	"github.com/airlock-sandbox/airlock/policy"
)

const (
	unprivUser = "airlock-test"
	// envUnprivChild carries, to TestUnprivilegedEgressChild, the World's
	// DNS address and CA file, separated by a comma.
	envUnprivChild = "AIRLOCK_EGRESS_UNPRIV_CHILD"
)

// TestUnprivilegedEgress proves that a supervisor without root gets a
// working, policed network when /dev/net/tun is open to it (mode 0666, the
// default on most distributions): its agent, root in the sandbox's own
// namespaces, makes the TAP device and sends it back. /dev/net/tun is 0600
// on the build machine, so the child runs in a mount namespace of its own
// where a 0666 node of the same device stands in for it.
func TestUnprivilegedEgress(t *testing.T) {
	e := newEnv(t)
	u, err := user.Lookup(unprivUser)
	if err != nil {
		t.Skipf("no user %s: %v", unprivUser, err)
	}
	for _, tool := range []string{"unshare", "setpriv", "mknod"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed", tool)
		}
	}
	dir, err := os.MkdirTemp("", "airlock-egress-unpriv-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "egress.test")
	if err := copyFile(self, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	ca := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(ca, e.w.CAPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	home := filepath.Join(dir, "home")
	if err := os.Mkdir(home, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := exec.Command("chown", u.Uid+":"+u.Gid, home).Run(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	script := `mount -t tmpfs -o mode=0755 tmpfs /dev/net && mknod -m 0666 /dev/net/tun c 10 200 && exec "$@"`
	cmd := exec.CommandContext(ctx, "unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh",
		"setpriv", "--reuid="+unprivUser, "--regid="+unprivUser, "--clear-groups", "--inh-caps=-all",
		"env", "-i", "PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "TMPDIR=/tmp", "HOME="+home,
		"AIRLOCK_HOME="+home, "AIRLOCK_AGENT="+os.Getenv("AIRLOCK_AGENT"), envBuilt+"=1",
		envUnprivChild+"="+e.w.DNSAddr+","+ca,
		bin, "-test.run", "^TestUnprivilegedEgressChild$", "-test.v", "-test.count=1")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: TestUnprivilegedEgressChild") {
		t.Fatalf("the unprivileged run failed (%v):\n%s", err, out)
	}
	reqs := e.w.Requests(testnet.API)
	if len(reqs) != 1 || reqs[0].Path != "/echo" || reqs[0].RawQuery != "from=unprivileged" {
		t.Errorf("api.example.com got %+v, want the one request of the unprivileged sandbox", reqs)
	}
	if n := len(e.w.Requests(testnet.Other)); n != 0 {
		t.Errorf("other.example.org, not allowed, got %d requests", n)
	}
}

// TestUnprivilegedEgressChild is the unprivileged side of
// TestUnprivilegedEgress.
func TestUnprivilegedEgressChild(t *testing.T) {
	spec := os.Getenv(envUnprivChild)
	if spec == "" {
		t.Skip("run by TestUnprivilegedEgress")
	}
	if os.Geteuid() == 0 {
		t.Fatal("the unprivileged run is root")
	}
	dnsAddr, caFile, _ := strings.Cut(spec, ",")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sb, err := airlock.Create(ctx, airlock.Config{
		Network: &policy.Config{AllowedHosts: []string{testnet.API}, DNSServers: []string{dnsAddr}, ExtraRootCAs: []string{caFile}},
	})
	if err != nil {
		t.Fatalf("create a sandbox with a network, unprivileged: %v", err)
	}
	defer sb.Close()
	res, err := sb.Exec(ctx, "curl -sS --max-time 10 'https://api.example.com/echo?from=unprivileged' && ! curl -sS --max-time 5 https://other.example.org/")
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 0 || !strings.Contains(string(res.Stdout), `"tls": true`) {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", res.ExitCode, res.Stdout, res.Stderr)
	}
	t.Logf("uid %d: %s", os.Geteuid(), res.Stdout)
	if st, err := sb.NetworkStats(); err != nil || st.LeavesMinted != 1 {
		t.Errorf("stats: %+v, %v", st, err)
	}
}

func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
