//go:build linux

package containerd_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/airlock-sandbox/airlock/internal/ctrshim"
	"github.com/airlock-sandbox/airlock/internal/testnet"
)

// pauseImage is the image of the tests' pods' sandbox containers: the
// busybox image, sleeping.
const pauseImage = "airlock.test/pause:latest"

// criConfig configures the CRI plugin as deploy/containerd-config.toml
// does, with the tests' pause image and CNI folders of their own (the
// pods use the node's network namespace: airlock's netstack is theirs).
func criConfig(dir string) string {
	return fmt.Sprintf(`[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %q
  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "airlock"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.airlock]
    runtime_type = %q
    pod_annotations = ["airlock.dev/*"]
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %q
    conf_dir = %q
`, pauseImage, ctrshim.RuntimeName, filepath.Join(dir, "cni-bin"), filepath.Join(dir, "cni-conf"))
}

// TestCRI drives a pod as a kubelet does, through containerd's CRI plugin
// (k8s.io/cri-api): RunPodSandbox with the runtime handler "airlock",
// two containers created and started in it, ExecSync, StopPodSandbox and
// RemovePodSandbox. The containers see each other's files in a shared
// volume; the pod's egress policy, from its annotations, lets a command
// reach the allowed host of the test's network and no other; the pod's
// size, the sum of its containers' limits, holds its memory; nothing is
// left behind.
func TestCRI(t *testing.T) {
	w := testnet.Start(t)
	d := startContainerdCRI(t, criConfig)
	for _, img := range []struct {
		ref string
		cmd []string
	}{{testImage, []string{"sh"}}, {pauseImage, []string{"sleep", "86400"}}} {
		if err := d.ImportBusyboxIn("k8s.io", t.TempDir(), img.ref, v1.Config{Cmd: img.cmd}); err != nil {
			t.Fatal(err)
		}
	}
	conn, err := grpc.NewClient("unix://"+d.Address, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rt := runtimeapi.NewRuntimeServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	network := fmt.Sprintf(`{"allowed_hosts": [%q], "dns_servers": [%q]}`, testnet.API, testnet.DNSAddr)
	logs := t.TempDir()
	podCfg := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: "agent", Uid: "uid-1", Namespace: "default"},
		Hostname:     "agent-pod",
		LogDirectory: logs,
		Annotations:  map[string]string{ctrshim.AnnotationNetwork: network},
		Linux: &runtimeapi.LinuxPodSandboxConfig{
			SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
				NamespaceOptions: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE},
			},
			// The sum of the containers' limits, as the kubelet
			// gives it: the pod's sandbox is held to it.
			Resources: &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 96 << 20},
		},
	}
	pod, err := rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: podCfg, RuntimeHandler: "airlock"})
	if err != nil {
		t.Fatalf("RunPodSandbox: %v", err)
	}
	podID := pod.PodSandboxId
	removed := false
	defer func() {
		if !removed {
			rt.StopPodSandbox(context.Background(), &runtimeapi.StopPodSandboxRequest{PodSandboxId: podID})
			rt.RemovePodSandbox(context.Background(), &runtimeapi.RemovePodSandboxRequest{PodSandboxId: podID})
		}
	}()

	vol := t.TempDir()
	var ids []string
	for i, command := range []string{"echo from writer > /shared/note; exec sleep 3600", "exec sleep 3600"} {
		name := fmt.Sprintf("c%d", i)
		cc := &runtimeapi.ContainerConfig{
			Metadata: &runtimeapi.ContainerMetadata{Name: name},
			Image:    &runtimeapi.ImageSpec{Image: testImage},
			Command:  []string{"sh", "-c", command},
			Mounts:   []*runtimeapi.Mount{{ContainerPath: "/shared", HostPath: vol}},
			LogPath:  name + ".log",
		}
		c, err := rt.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: podID, Config: cc, SandboxConfig: podCfg})
		if err != nil {
			t.Fatalf("CreateContainer %s: %v", name, err)
		}
		if _, err := rt.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: c.ContainerId}); err != nil {
			t.Fatalf("StartContainer %s: %v", name, err)
		}
		ids = append(ids, c.ContainerId)
	}
	execIn := func(id string, cmd ...string) *runtimeapi.ExecSyncResponse {
		t.Helper()
		r, err := rt.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: id, Cmd: cmd, Timeout: 60})
		if err != nil {
			t.Fatalf("ExecSync %v: %v", cmd, err)
		}
		return r
	}
	var note string
	for range 100 {
		if r := execIn(ids[1], "cat", "/shared/note"); r.ExitCode == 0 {
			note = string(r.Stdout)
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if note != "from writer\n" {
		t.Errorf("the second container reads %q from the shared volume", note)
	}
	if b, err := os.ReadFile(filepath.Join(vol, "note")); err != nil || string(b) != "from writer\n" {
		t.Errorf("the volume on the host: %q, %v", b, err)
	}
	// Egress: the allowed host answers, another does not. (The image's
	// busybox is Debian's static one, whose resolver cannot load its
	// modules and whose wget crashes in a bare root: the names are
	// looked up with its nslookup, through the pod's DNS, and the
	// requests written to nc, to the addresses, naming the host.)
	get := func(host, addr string) string {
		r := execIn(ids[1], "sh", "-c", fmt.Sprintf(`busybox nslookup %s >/dev/null 2>&1; printf 'GET /echo HTTP/1.0\r\nHost: %s\r\n\r\n' | busybox nc -w 20 %s 80`, host, host, addr))
		return string(r.Stdout) + string(r.Stderr)
	}
	if out := get(testnet.API, testnet.APIAddr); !strings.HasPrefix(out, "HTTP/1.") || !strings.Contains(out, " 200 OK") || !strings.Contains(out, `"host": "api.example.com"`) {
		t.Errorf("a request to the allowed host got %q", out)
	}
	if out := get(testnet.Other, testnet.OtherAddr); strings.Contains(out, " 200 ") {
		t.Errorf("a request to a host the pod's policy does not allow got %q", out)
	}
	if n := w.Reached(testnet.Other); n != 0 {
		t.Errorf("%s was reached %d times, want never", testnet.Other, n)
	}

	// The pod's memory: 30 MB fits in its 96 MiB, 200 MB does not
	// (a sandbox without a limit has 1 GiB or a quarter of the host's).
	hold := func(n int) string {
		r := execIn(ids[1], "sh", "-c", fmt.Sprintf(`x=$(busybox head -c %d /dev/zero | busybox tr '\0' a); echo survived ${#x}`, n))
		return fmt.Sprintf("exit %d: %s%s", r.ExitCode, r.Stdout, r.Stderr)
	}
	if out := hold(30_000_000); !strings.Contains(out, "survived 30000000") {
		t.Errorf("30 MB in a pod of 96 MiB: %s", out)
	}
	if out := hold(200_000_000); strings.Contains(out, "survived") {
		t.Errorf("200 MB in a pod of 96 MiB: %s", out)
	}

	if _, err := rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: podID}); err != nil {
		t.Fatalf("StopPodSandbox: %v", err)
	}
	for _, id := range ids {
		if _, err := rt.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: id}); err != nil {
			t.Errorf("RemoveContainer: %v", err)
		}
	}
	if _, err := rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: podID}); err != nil {
		t.Fatalf("RemovePodSandbox: %v", err)
	}
	removed = true
	for _, id := range append(ids, podID) {
		d.checkNothingLeft(t, id)
	}
	if out := d.ctr("--namespace", "k8s.io", "task", "ls"); strings.Count(out, "\n") > 1 {
		t.Errorf("tasks left:\n%s", out)
	}
}
