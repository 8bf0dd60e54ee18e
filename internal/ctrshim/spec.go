//go:build linux

package ctrshim

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/agentproto"
	"github.com/airlock-sandbox/airlock/internal/strictjson"
	"github.com/airlock-sandbox/airlock/policy"
)

// The annotations a container's spec may carry for airlock.
const (
	// AnnotationIsolation is the sandbox's isolation level: process,
	// gvisor or vm. Default: the node's (NodeConfig.Isolation).
	AnnotationIsolation = "airlock.dev/isolation"
	// AnnotationNetwork is the sandbox's egress policy, as JSON in the
	// form of the JSON-RPC create's "network" (allowed_hosts, egress
	// rules, policy_script, ...), without secrets. Absent: the sandbox
	// has loopback only.
	AnnotationNetwork = "airlock.dev/network"
	// AnnotationSecrets names the node's secrets the sandbox gets, as
	// ENV=NAME pairs separated by commas: the command sees a placeholder
	// in $ENV, and the node's secret NAME replaces it on the way to the
	// hosts the node allows it.
	AnnotationSecrets = "airlock.dev/secrets"
	// AnnotationResources sizes the sandbox, as JSON in the form of the
	// JSON-RPC create's "resources" (cpus, memory_mb, timeout_seconds),
	// over the spec's limits: for a pod, whose containers share its
	// sandbox, and whose sandbox container's spec carries none.
	AnnotationResources = "airlock.dev/resources"
)

// What containerd's CRI plugin says of a container.
const (
	annotationContainerType = "io.kubernetes.cri.container-type"
	annotationSandboxID     = "io.kubernetes.cri.sandbox-id"
	containerTypeSandbox    = "sandbox"
	containerTypeContainer  = "container"
	// The pod's size, on its sandbox container: the sums of its
	// containers' limits that the kubelet gives in RunPodSandbox
	// (PodSandboxConfig.linux.resources), which the CRI plugin of
	// containerd 1.7 and 2.x copies here for runtimes that size a
	// sandbox for the whole pod. Memory in bytes; CPU as a CFS quota
	// and period in µs. Absent or 0: some container has no limit.
	annotationSandboxMemory    = "io.kubernetes.cri.sandbox-memory"
	annotationSandboxCPUQuota  = "io.kubernetes.cri.sandbox-cpu-quota"
	annotationSandboxCPUPeriod = "io.kubernetes.cri.sandbox-cpu-period"
)

// Bounds on what a spec may ask of the shim.
const (
	maxAnnotation = 64 << 10
	maxSpecBytes  = 4 << 20
	maxArgs       = 4096
	maxEnv        = 4096
)

// readSpec reads a bundle's config.json.
func readSpec(path string) (*specs.Spec, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read the bundle's spec: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("read the bundle's spec: %w", err)
	}
	if fi.Size() > maxSpecBytes {
		return nil, fmt.Errorf("the bundle's spec %s is %d bytes, more than %d", path, fi.Size(), maxSpecBytes)
	}
	var s specs.Spec
	if err := json.NewDecoder(f).Decode(&s); err != nil {
		return nil, fmt.Errorf("decode the bundle's spec %s: %w", path, err)
	}
	if s.Process == nil {
		return nil, fmt.Errorf("the bundle's spec %s has no process", path)
	}
	return &s, nil
}

// podOf says which pod a container belongs to, from CRI's annotations:
// a pod's sandbox (pause) container names itself; its other containers
// name it. A container without them (ctr run, a plain client) is a pod
// of its own.
func podOf(id string, s *specs.Spec) (pod string, sandbox bool) {
	switch s.Annotations[annotationContainerType] {
	case containerTypeSandbox:
		return id, true
	case containerTypeContainer:
		if p := s.Annotations[annotationSandboxID]; p != "" {
			return p, false
		}
	}
	return id, false
}

// sandboxConfig is the airlock configuration of the sandbox that holds
// the container of spec s, whose root is rootfs.
func sandboxConfig(node *NodeConfig, s *specs.Spec, rootfs string) (airlock.Config, error) {
	cfg := airlock.Config{
		RootFS:    rootfs,
		Isolation: airlock.Isolation(node.Isolation),
		Hostname:  s.Hostname,
	}
	if cfg.Isolation == "" {
		cfg.Isolation = airlock.IsolationProcess
	}
	a := s.Annotations
	for _, k := range []string{AnnotationIsolation, AnnotationNetwork, AnnotationSecrets, AnnotationResources} {
		if len(a[k]) > maxAnnotation {
			return cfg, fmt.Errorf("annotation %s is %d bytes, more than %d", k, len(a[k]), maxAnnotation)
		}
	}
	if v := a[AnnotationIsolation]; v != "" {
		switch lv := airlock.Isolation(v); lv {
		case airlock.IsolationProcess, airlock.IsolationGVisor, airlock.IsolationVM:
			cfg.Isolation = lv
		default:
			return cfg, fmt.Errorf("annotation %s: unknown isolation level %q: use process, gvisor or vm", AnnotationIsolation, v)
		}
	}
	if v := a[AnnotationNetwork]; v != "" {
		var n policy.Config
		if err := strictjson.Decode([]byte(v), &n); err != nil {
			return cfg, fmt.Errorf("annotation %s: %w", AnnotationNetwork, err)
		}
		if len(n.Secrets) > 0 {
			return cfg, fmt.Errorf("annotation %s: secrets cannot be given in a pod's spec, where whoever creates pods could read them: name the node's secrets in %s", AnnotationNetwork, AnnotationSecrets)
		}
		cfg.Network = &n
	}
	if v := a[AnnotationSecrets]; v != "" {
		secrets, err := node.secrets(v)
		if err != nil {
			return cfg, fmt.Errorf("annotation %s: %w", AnnotationSecrets, err)
		}
		if cfg.Network == nil {
			cfg.Network = &policy.Config{}
		}
		cfg.Network.Secrets = secrets
	}
	if err := limits(&cfg, s); err != nil {
		return cfg, err
	}
	if a[annotationContainerType] == containerTypeSandbox {
		if err := podSize(&cfg, a); err != nil {
			return cfg, err
		}
	}
	if v := a[AnnotationResources]; v != "" {
		var r airlock.Resources
		if err := strictjson.Decode([]byte(v), &r); err != nil {
			return cfg, fmt.Errorf("annotation %s: %w", AnnotationResources, err)
		}
		if r.CPUs != 0 {
			cfg.Resources.CPUs = r.CPUs
		}
		if r.MemoryMB != 0 {
			cfg.Resources.MemoryMB = r.MemoryMB
		}
		if r.TimeoutSeconds != 0 {
			cfg.Resources.TimeoutSeconds = r.TimeoutSeconds
		}
	}
	return cfg, nil
}

// limits copies the spec's memory, CPU and pids limits.
func limits(cfg *airlock.Config, s *specs.Spec) error {
	if s.Linux == nil || s.Linux.Resources == nil {
		return nil
	}
	r := s.Linux.Resources
	if m := r.Memory; m != nil && m.Limit != nil && *m.Limit > 0 {
		cfg.Resources.MemoryMB = memoryMB(*m.Limit)
	}
	if c := r.CPU; c != nil && c.Quota != nil && *c.Quota > 0 && c.Period != nil && *c.Period > 0 {
		cfg.Resources.CPUs = cpus(*c.Quota, int64(*c.Period))
	}
	if p := r.Pids; p != nil && p.Limit != nil && *p.Limit > 0 {
		// The spec counts the container's tasks; airlock's limit also
		// counts its own spawner's threads.
		cfg.PidsLimit = max(min(*p.Limit, math.MaxInt32)+agentproto.SpawnerTasks, airlock.MinPidsLimit)
	}
	return nil
}

// memoryMB is a limit of n bytes in airlock's MiB, rounded up: never
// below what was asked.
func memoryMB(n int64) int64 {
	mb := n >> 20
	if n&(1<<20-1) != 0 {
		mb++
	}
	return mb
}

// cpus is a CFS quota over its period as airlock's CPUs, rounded up to
// a hundredth.
func cpus(quota, period int64) float64 {
	return math.Ceil(float64(quota)/float64(period)*100) / 100
}

// podSize sizes a pod's sandbox from the pod's limits, the sums of its
// containers' that the CRI plugin puts on the sandbox container (see
// annotationSandboxMemory): its containers share the sandbox, so the
// sandbox holds them all to their sum, as one VM per pod does. A
// container's own limit is not held apart from its pod's.
func podSize(cfg *airlock.Config, a map[string]string) error {
	num := func(k string) (int64, error) {
		v := a[k]
		if v == "" {
			return 0, nil
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("annotation %s: %q is not a number of at least 0", k, v)
		}
		return n, nil
	}
	mem, err := num(annotationSandboxMemory)
	if err != nil {
		return err
	}
	if mem > 0 {
		cfg.Resources.MemoryMB = memoryMB(mem)
	}
	quota, err := num(annotationSandboxCPUQuota)
	if err != nil {
		return err
	}
	period, err := num(annotationSandboxCPUPeriod)
	if err != nil {
		return err
	}
	if quota > 0 && period > 0 {
		cfg.Resources.CPUs = cpus(quota, period)
	}
	return nil
}

// command is the airlock command of an OCI process.
func command(p *specs.Process) (airlock.Command, error) {
	if len(p.Args) == 0 {
		return airlock.Command{}, errors.New("the process has no args: the image has no entrypoint or command, so give one")
	}
	if len(p.Args) > maxArgs || len(p.Env) > maxEnv {
		return airlock.Command{}, fmt.Errorf("the process has %d args and %d environment variables, more than %d and %d", len(p.Args), len(p.Env), maxArgs, maxEnv)
	}
	cmd := airlock.Command{
		Argv: slices.Clone(p.Args),
		Dir:  p.Cwd,
		TTY:  p.Terminal,
		Env:  map[string]string{},
	}
	for _, kv := range p.Env {
		k, v, _ := strings.Cut(kv, "=")
		if k != "" {
			cmd.Env[k] = v
		}
	}
	if p.ConsoleSize != nil {
		cmd.Rows, cmd.Cols = clampSize(p.ConsoleSize.Height), clampSize(p.ConsoleSize.Width)
	}
	// Root is the sandbox's default user: left unsaid, it also runs in a
	// sandbox that maps no other ids, where naming it would make the
	// agent change ids (and groups) it cannot. containerd lists the
	// primary group among the additional ones. The command's groups are
	// its user's in the root's /etc/group.
	switch u := p.User; {
	case u.Username != "":
		cmd.User = u.Username
	case u.UID != 0 || u.GID != 0 || slices.ContainsFunc(u.AdditionalGids, func(g uint32) bool { return g != u.GID }):
		cmd.User = strconv.FormatUint(uint64(u.UID), 10) + ":" + strconv.FormatUint(uint64(u.GID), 10)
	}
	return cmd, nil
}

func clampSize(n uint) uint16 { return uint16(min(n, math.MaxUint16)) }

// NodeConfig is the node's configuration of the shim: the file
// ConfigPath names (JSON), written by the node's administrator. Nothing
// in it comes from a pod.
type NodeConfig struct {
	// Isolation is the level of sandboxes whose pods do not say:
	// process (default), gvisor or vm.
	Isolation string `json:"isolation,omitempty"`
	// Secrets are the secrets pods may ask for by name
	// (AnnotationSecrets): each value is read from a file on the node,
	// and goes only to the hosts listed here.
	Secrets map[string]NodeSecret `json:"secrets,omitempty"`
	// StateDir keeps the shim's sandboxes' state; default
	// /run/airlock-shim.
	StateDir string `json:"state_dir,omitempty"`
	// EventLog is a file the shim appends every sandbox event to, as
	// JSON lines; default none (events still reach containerd where
	// they map to its own).
	EventLog string `json:"event_log,omitempty"`
}

// NodeSecret is one secret of the node.
type NodeSecret struct {
	// File holds the value (a trailing newline is not part of it).
	File string `json:"file"`
	// Hosts the value may be sent to (patterns as in allowed_hosts).
	Hosts []string `json:"hosts"`
	// AllowPlaintext lets the value go over plain HTTP too.
	AllowPlaintext bool `json:"allow_plaintext,omitempty"`
}

// DefaultConfigPath is where the shim reads its node configuration,
// unless $AIRLOCK_SHIM_CONFIG names another file.
const DefaultConfigPath = "/etc/airlock/containerd-shim.json"

// LoadNodeConfig reads the node's configuration; a missing default file
// is an empty configuration.
func LoadNodeConfig() (*NodeConfig, error) {
	path, explicit := os.LookupEnv("AIRLOCK_SHIM_CONFIG")
	if !explicit {
		path = DefaultConfigPath
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) && !explicit {
		return &NodeConfig{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the shim's node configuration: %w", err)
	}
	var c NodeConfig
	if err := strictjson.Decode(b, &c); err != nil {
		return nil, fmt.Errorf("read the shim's node configuration %s: %w", path, err)
	}
	switch airlock.Isolation(c.Isolation) {
	case "", airlock.IsolationProcess, airlock.IsolationGVisor, airlock.IsolationVM:
	default:
		return nil, fmt.Errorf("the shim's node configuration %s: unknown isolation %q: use process, gvisor or vm", path, c.Isolation)
	}
	for name, s := range c.Secrets {
		if s.File == "" || len(s.Hosts) == 0 {
			return nil, fmt.Errorf("the shim's node configuration %s: secret %q needs a file and hosts", path, name)
		}
	}
	return &c, nil
}

// secrets resolves AnnotationSecrets' ENV=NAME pairs to the node's
// secrets, reading each value from its file.
func (c *NodeConfig) secrets(list string) (map[string]policy.Secret, error) {
	out := map[string]policy.Secret{}
	for pair := range strings.SplitSeq(list, ",") {
		pair = strings.TrimSpace(pair)
		if pair == "" {
			continue
		}
		env, name, ok := strings.Cut(pair, "=")
		if !ok || env == "" || name == "" {
			return nil, fmt.Errorf("%q is not ENV=NAME", pair)
		}
		ns, ok := c.Secrets[name]
		if !ok {
			return nil, fmt.Errorf("the node has no secret %q (it has %s)", name, strings.Join(slices.Sorted(maps.Keys(c.Secrets)), ", "))
		}
		b, err := readBounded(ns.File, policy.MaxSecretValue+2)
		if err != nil {
			return nil, fmt.Errorf("secret %q: %w", name, err)
		}
		v := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
		out[env] = policy.Secret{Value: v, Hosts: slices.Clone(ns.Hosts), AllowPlaintext: ns.AllowPlaintext}
	}
	return out, nil
}

func readBounded(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, limit)
	}
	return b, nil
}
