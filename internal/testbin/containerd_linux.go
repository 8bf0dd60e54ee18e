package testbin

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Containerd is a containerd of a test's or a benchmark's own: Debian's,
// on a private socket, root and state directory, with the CRI plugin
// off.
type Containerd struct {
	// Address is its socket.
	Address string
	// Env is its environment, and ctr's.
	Env []string
	cmd *exec.Cmd
	// args are containerd's command line.
	args []string
	mu   sync.Mutex
	log  bytes.Buffer
}

// ContainerdEnv, when set, is the containerd binary that StartContainerd
// runs, rather than the one on PATH.
const ContainerdEnv = "AIRLOCK_TEST_CONTAINERD"

// StartContainerd starts containerd with its state in the new folder
// dir, and env added to its environment (the shim's PATH, airlock's
// variables), and waits until it answers.
func StartContainerd(dir string, env ...string) (*Containerd, error) {
	return StartContainerdCRI(dir, "", env...)
}

// StartContainerdCRI is StartContainerd with the CRI plugin on, and
// cri, when not empty, the TOML of its configuration (its tables, under
// [plugins."io.containerd.grpc.v1.cri"]).
func StartContainerdCRI(dir, cri string, env ...string) (*Containerd, error) {
	bin := os.Getenv(ContainerdEnv)
	if bin == "" {
		var err error
		if bin, err = exec.LookPath("containerd"); err != nil {
			return nil, fmt.Errorf("no containerd: run scripts/deps.sh (as root), or apt-get install containerd: %w", err)
		}
	}
	c := &Containerd{Address: filepath.Join(dir, "containerd.sock")}
	plugins := `disabled_plugins = ["io.containerd.grpc.v1.cri"]`
	if cri != "" {
		plugins = ""
	}
	config := fmt.Sprintf(`version = 2
root = %q
state = %q
%s
[grpc]
  address = %q
[ttrpc]
  address = %q
%s
`, filepath.Join(dir, "root"), filepath.Join(dir, "state"), plugins, c.Address, c.Address+".ttrpc", cri)
	cfgPath := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(cfgPath, []byte(config), 0o644); err != nil {
		return nil, err
	}
	c.Env = append(os.Environ(), env...)
	c.args = []string{bin, "--config", cfgPath}
	if err := c.start(); err != nil {
		return nil, err
	}
	return c, nil
}

// start starts containerd and waits until it answers.
func (c *Containerd) start() error {
	c.cmd = exec.Command(c.args[0], c.args[1:]...)
	c.cmd.Env = c.Env
	c.cmd.Stdout, c.cmd.Stderr = (*lockedWriter)(c), (*lockedWriter)(c)
	if err := c.cmd.Start(); err != nil {
		return fmt.Errorf("start containerd: %w", err)
	}
	if !WaitFor(30*time.Second, func() bool {
		_, err := c.Ctr(context.Background(), "version")
		return err == nil
	}) {
		c.Stop()
		return fmt.Errorf("containerd did not answer on %s:\n%s", c.Address, c.Log())
	}
	return nil
}

// Restart kills containerd with SIGKILL, as a crash would, and starts
// it again on the same root and state. The shims it started live on.
func (c *Containerd) Restart() error {
	c.Stop()
	return c.start()
}

type lockedWriter Containerd

func (w *lockedWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.log.Write(b)
}

// Log is what containerd, and the shims it ran, printed.
func (c *Containerd) Log() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.log.String()
}

// Stop stops containerd.
func (c *Containerd) Stop() {
	_ = c.cmd.Process.Kill()
	_ = c.cmd.Wait()
}

// Ctr runs ctr against this containerd, for at most three minutes, and
// returns its output.
func (c *Containerd) Ctr(ctx context.Context, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "ctr", append([]string{"--address", c.Address}, args...)...)
	cmd.Env = c.Env
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// ImportBusybox imports a BusyboxImage with cfg as ref, through a
// docker-save tarball in dir.
func (c *Containerd) ImportBusybox(dir, ref string, cfg v1.Config) error {
	return c.ImportBusyboxIn("default", dir, ref, cfg)
}

// ImportBusyboxIn is ImportBusybox into containerd namespace ns (the
// CRI plugin's is "k8s.io").
func (c *Containerd) ImportBusyboxIn(ns, dir, ref string, cfg v1.Config) error {
	img, err := BusyboxImage(cfg)
	if err != nil {
		return err
	}
	tag, err := name.NewTag(ref)
	if err != nil {
		return err
	}
	tarPath := filepath.Join(dir, "image.tar")
	if err := tarball.WriteToFile(tarPath, tag, img); err != nil {
		return err
	}
	if out, err := c.Ctr(context.Background(), "--namespace", ns, "image", "import", tarPath); err != nil {
		return errors.Join(fmt.Errorf("ctr image import: %w", err), errors.New(out))
	}
	return nil
}
