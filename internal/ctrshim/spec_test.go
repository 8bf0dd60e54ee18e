//go:build linux

package ctrshim

import (
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/airlock-sandbox/airlock"
)

func ptr[T any](v T) *T { return &v }

func TestSandboxConfigFromSpec(t *testing.T) {
	dir := t.TempDir()
	secret := filepath.Join(dir, "openai")
	if err := os.WriteFile(secret, []byte("sk-node-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	node := &NodeConfig{Isolation: "gvisor", Secrets: map[string]NodeSecret{"openai": {File: secret, Hosts: []string{"api.openai.com"}}}}
	s := &specs.Spec{
		Hostname: "box",
		Process:  &specs.Process{Args: []string{"sh"}},
		Annotations: map[string]string{
			AnnotationNetwork: `{"allowed_hosts": ["api.openai.com", "pypi.org"]}`,
			AnnotationSecrets: "OPENAI_API_KEY=openai",
		},
		Linux: &specs.Linux{Resources: &specs.LinuxResources{
			Memory: &specs.LinuxMemory{Limit: ptr(int64(100<<20 + 1))},
			CPU:    &specs.LinuxCPU{Quota: ptr(int64(150000)), Period: ptr(uint64(100000))},
			Pids:   &specs.LinuxPids{Limit: ptr(int64(64))},
		}},
	}
	cfg, err := sandboxConfig(node, s, "/rootfs")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Isolation != airlock.IsolationGVisor || cfg.RootFS != "/rootfs" || cfg.Hostname != "box" {
		t.Errorf("level %q, root %q, hostname %q", cfg.Isolation, cfg.RootFS, cfg.Hostname)
	}
	if cfg.Resources.MemoryMB != 101 || cfg.Resources.CPUs != 1.5 || cfg.PidsLimit != 64+12 {
		t.Errorf("limits: %d MiB, %v CPUs, %d pids", cfg.Resources.MemoryMB, cfg.Resources.CPUs, cfg.PidsLimit)
	}
	if cfg.Network == nil || len(cfg.Network.AllowedHosts) != 2 {
		t.Fatalf("network %+v", cfg.Network)
	}
	sec, ok := cfg.Network.Secrets["OPENAI_API_KEY"]
	if !ok || sec.Value != "sk-node-secret" || len(sec.Hosts) != 1 || sec.Hosts[0] != "api.openai.com" {
		t.Errorf("secret %+v", sec)
	}

	// The level from the annotation wins over the node's.
	s.Annotations[AnnotationIsolation] = "process"
	if cfg, err := sandboxConfig(node, s, "/rootfs"); err != nil || cfg.Isolation != airlock.IsolationProcess {
		t.Errorf("annotated level: %q, %v", cfg.Isolation, err)
	}
	// The resources annotation wins over the spec's limits, where it
	// says something.
	s.Annotations[AnnotationResources] = `{"memory_mb": 4096, "timeout_seconds": 600}`
	if cfg, err := sandboxConfig(node, s, "/rootfs"); err != nil || cfg.Resources.MemoryMB != 4096 || cfg.Resources.CPUs != 1.5 || cfg.Resources.TimeoutSeconds != 600 {
		t.Errorf("annotated resources: %+v, %v", cfg.Resources, err)
	}
}

// TestPodSize: a pod's sandbox container carries the pod's size, the
// sums of its containers' limits, which size the sandbox; the same
// annotations on an app container size nothing, and airlock's own
// resources annotation still wins.
func TestPodSize(t *testing.T) {
	node := &NodeConfig{}
	s := &specs.Spec{
		Process: &specs.Process{Args: []string{"pause"}},
		Annotations: map[string]string{
			annotationContainerType:    containerTypeSandbox,
			annotationSandboxMemory:    strconv.Itoa(96<<20 + 1),
			annotationSandboxCPUQuota:  "50000",
			annotationSandboxCPUPeriod: "100000",
		},
	}
	cfg, err := sandboxConfig(node, s, "/rootfs")
	if err != nil || cfg.Resources.MemoryMB != 97 || cfg.Resources.CPUs != 0.5 {
		t.Errorf("a pod's sandbox: %+v, %v; want 97 MiB and 0.5 CPUs", cfg.Resources, err)
	}
	// 0: some container has no limit, and the pod none.
	s.Annotations[annotationSandboxMemory] = "0"
	s.Annotations[annotationSandboxCPUQuota] = "0"
	if cfg, err := sandboxConfig(node, s, "/rootfs"); err != nil || cfg.Resources.MemoryMB != 0 || cfg.Resources.CPUs != 0 {
		t.Errorf("a pod without limits: %+v, %v", cfg.Resources, err)
	}
	s.Annotations[annotationSandboxMemory] = strconv.Itoa(96 << 20)
	s.Annotations[AnnotationResources] = `{"memory_mb": 2048}`
	if cfg, err := sandboxConfig(node, s, "/rootfs"); err != nil || cfg.Resources.MemoryMB != 2048 {
		t.Errorf("the resources annotation over the pod's size: %+v, %v", cfg.Resources, err)
	}
	s.Annotations[annotationContainerType] = containerTypeContainer
	delete(s.Annotations, AnnotationResources)
	if cfg, err := sandboxConfig(node, s, "/rootfs"); err != nil || cfg.Resources.MemoryMB != 0 {
		t.Errorf("an app container's copy of the pod's size: %+v, %v", cfg.Resources, err)
	}
	s.Annotations[annotationContainerType] = containerTypeSandbox
	s.Annotations[annotationSandboxMemory] = "-1"
	if _, err := sandboxConfig(node, s, "/rootfs"); err == nil || !strings.Contains(err.Error(), annotationSandboxMemory) {
		t.Errorf("a negative pod size: %v", err)
	}
}

func TestSandboxConfigRefuses(t *testing.T) {
	node := &NodeConfig{Secrets: map[string]NodeSecret{"a": {File: "/nonexistent", Hosts: []string{"x.com"}}}}
	for name, tc := range map[string]struct {
		annotations map[string]string
		want        string
	}{
		"a secret in the network annotation": {map[string]string{AnnotationNetwork: `{"secrets": {"K": {"value": "v", "hosts": ["evil.example"]}}}`}, "cannot be given in a pod's spec"},
		"an unknown level":                   {map[string]string{AnnotationIsolation: "chroot"}, "unknown isolation level"},
		"an unknown secret":                  {map[string]string{AnnotationSecrets: "K=nope"}, `no secret "nope"`},
		"a malformed secret pair":            {map[string]string{AnnotationSecrets: "K"}, "not ENV=NAME"},
		"an unreadable secret":               {map[string]string{AnnotationSecrets: "K=a"}, "/nonexistent"},
		"an unknown network field":           {map[string]string{AnnotationNetwork: `{"allow_everything": true}`}, "allow_everything"},
		"an unknown resource":                {map[string]string{AnnotationResources: `{"gpus": 1}`}, "gpus"},
		"a huge annotation":                  {map[string]string{AnnotationNetwork: strings.Repeat(" ", maxAnnotation+1)}, "more than"},
	} {
		t.Run(name, func(t *testing.T) {
			s := &specs.Spec{Process: &specs.Process{Args: []string{"sh"}}, Annotations: tc.annotations}
			_, err := sandboxConfig(node, s, "/rootfs")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err %v, want one saying %q", err, tc.want)
			}
		})
	}
}

func TestCommandFromProcess(t *testing.T) {
	cmd, err := command(&specs.Process{
		Args: []string{"python3", "-c", "print(1)"}, Env: []string{"A=1", "B=x=y", "=bad"}, Cwd: "/app",
		Terminal: true, ConsoleSize: &specs.Box{Height: 40, Width: 120},
		User: specs.User{UID: 0, GID: 0, AdditionalGids: []uint32{0}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if cmd.User != "" || cmd.Dir != "/app" || !cmd.TTY || cmd.Rows != 40 || cmd.Cols != 120 || cmd.Env["A"] != "1" || cmd.Env["B"] != "x=y" || len(cmd.Env) != 2 {
		t.Errorf("command %+v", cmd)
	}
	cmd, _ = command(&specs.Process{Args: []string{"id"}, User: specs.User{UID: 1000, GID: 100}})
	if cmd.User != "1000:100" {
		t.Errorf("user %q, want 1000:100", cmd.User)
	}
	if _, err := command(&specs.Process{}); err == nil {
		t.Error("a process without args was accepted")
	}
}

func TestPodOf(t *testing.T) {
	for _, tc := range []struct {
		annotations map[string]string
		pod         string
		sandbox     bool
	}{
		{nil, "c1", false},
		{map[string]string{annotationContainerType: containerTypeSandbox}, "c1", true},
		{map[string]string{annotationContainerType: containerTypeContainer, annotationSandboxID: "p1"}, "p1", false},
	} {
		pod, sandbox := podOf("c1", &specs.Spec{Annotations: tc.annotations})
		if pod != tc.pod || sandbox != tc.sandbox {
			t.Errorf("%v: pod %q sandbox %v, want %q %v", tc.annotations, pod, sandbox, tc.pod, tc.sandbox)
		}
	}
}

func TestSandboxID(t *testing.T) {
	if got := SandboxID("abc-1"); got != "ctr-abc-1" {
		t.Errorf("SandboxID(abc-1) = %q", got)
	}
	long := SandboxID(strings.Repeat("f", 64))
	odd := SandboxID("a/b")
	if len(long) > 64 || len(odd) > 64 || long == odd || strings.ContainsAny(odd, "/") {
		t.Errorf("SandboxID: %q, %q", long, odd)
	}
}

// FuzzSandboxConfig feeds the annotations and limits a pod's author
// controls to the spec's decoding: it never panics, and what it accepts
// is bounded.
func FuzzSandboxConfig(f *testing.F) {
	f.Add("gvisor", `{"allowed_hosts": ["a.com"]}`, "K=a", int64(1<<20), int64(100000), uint64(100000), int64(10))
	f.Add("", `{"egress": [{"host": "x"}]}`, ",,K=", int64(-1), int64(-1), uint64(0), int64(-5))
	f.Add("vm", "", "", int64(math.MaxInt64), int64(math.MaxInt64), uint64(1), int64(math.MaxInt64))
	f.Fuzz(func(t *testing.T, level, network, secrets string, mem, quota int64, period uint64, pids int64) {
		dir := t.TempDir()
		secret := filepath.Join(dir, "a")
		os.WriteFile(secret, []byte("value"), 0o600)
		node := &NodeConfig{Secrets: map[string]NodeSecret{"a": {File: secret, Hosts: []string{"a.com"}}}}
		s := &specs.Spec{
			Process:     &specs.Process{Args: []string{"sh"}},
			Annotations: map[string]string{AnnotationIsolation: level, AnnotationNetwork: network, AnnotationSecrets: secrets},
			Linux: &specs.Linux{Resources: &specs.LinuxResources{
				Memory: &specs.LinuxMemory{Limit: &mem},
				CPU:    &specs.LinuxCPU{Quota: &quota, Period: &period},
				Pids:   &specs.LinuxPids{Limit: &pids},
			}},
		}
		cfg, err := sandboxConfig(node, s, "/rootfs")
		if err != nil {
			return
		}
		if cfg.Resources.MemoryMB < 0 || cfg.Resources.CPUs < 0 || cfg.PidsLimit < 0 {
			t.Fatalf("negative limits: %+v, pids %d", cfg.Resources, cfg.PidsLimit)
		}
		if cfg.Network != nil {
			for k, v := range cfg.Network.Secrets {
				if v.Value != "value" || len(v.Hosts) != 1 || v.Hosts[0] != "a.com" {
					t.Fatalf("secret %s is %+v: only the node's value and hosts may be used", k, v)
				}
			}
		}
	})
}
