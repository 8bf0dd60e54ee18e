package cli

import (
	"cmp"
	"fmt"
	"maps"
	"reflect"
	"slices"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/policy"
)

// withBase is the configuration a sandbox is created with when run is
// what was asked at run time: run laid over the program's built-in
// configuration, by the rules of the package documentation.
func (a *app) withBase(run airlock.Config) (airlock.Config, error) {
	return mergeConfig(a.name, a.base, run)
}

// mergeConfig lays run over base (see the package documentation); name
// is the program's, for errors. With a zero base it returns run as it
// is.
func mergeConfig(name string, base, run airlock.Config) (airlock.Config, error) {
	out := run
	if run.Image == "" && run.RootFS == "" {
		out.Image, out.RootFS = base.Image, base.RootFS
	}
	out.Isolation = cmp.Or(run.Isolation, base.Isolation)
	out.Hostname = cmp.Or(run.Hostname, base.Hostname)
	out.Resources = airlock.Resources{
		CPUs:           cmp.Or(run.Resources.CPUs, base.Resources.CPUs),
		MemoryMB:       cmp.Or(run.Resources.MemoryMB, base.Resources.MemoryMB),
		TimeoutSeconds: cmp.Or(run.Resources.TimeoutSeconds, base.Resources.TimeoutSeconds),
	}
	out.PidsLimit = cmp.Or(run.PidsLimit, base.PidsLimit)
	out.NofileLimit = cmp.Or(run.NofileLimit, base.NofileLimit)
	out.DiskMB = cmp.Or(run.DiskMB, base.DiskMB)
	out.MaxFileSizeMB = cmp.Or(run.MaxFileSizeMB, base.MaxFileSizeMB)
	out.MaxOutputBytes = cmp.Or(run.MaxOutputBytes, base.MaxOutputBytes)
	out.ImageCacheDir = cmp.Or(run.ImageCacheDir, base.ImageCacheDir)
	out.AgentPath = cmp.Or(run.AgentPath, base.AgentPath)
	out.HookTimeout = cmp.Or(run.HookTimeout, base.HookTimeout)
	out.AllowPtrace = run.AllowPtrace || base.AllowPtrace
	if len(base.Ports) > 0 {
		out.Ports = append(slices.Clone(base.Ports), run.Ports...)
	}

	if base.Network != nil {
		for secret := range base.Network.Secrets {
			v, ok := run.Env[secret]
			switch {
			case !ok:
			case v == "${"+secret+"}":
				// What it holds anyway, as JSON-RPC's create allows.
				out.Env = maps.Clone(out.Env)
				delete(out.Env, secret)
			default:
				return out, fmt.Errorf("$%s is a secret built into %s: commands get its placeholder there; leave it out of the environment", secret, name)
			}
		}
	}
	if len(base.Env) > 0 {
		env := maps.Clone(base.Env)
		maps.Copy(env, out.Env)
		out.Env = env
	}
	var err error
	if out.Network, err = mergeNetwork(name, base.Network, run.Network); err != nil {
		return out, err
	}
	if out.VFS, err = mergeVFS(name, base.VFS, run.VFS); err != nil {
		return out, err
	}

	if base.OnRequest != nil {
		out.OnRequest = base.OnRequest
	}
	if base.OnResponse != nil {
		out.OnResponse = base.OnResponse
	}
	out.OnEvent = both(base.OnEvent, run.OnEvent)
	out.OnImageProgress = both(base.OnImageProgress, run.OnImageProgress)
	if base.Logger != nil {
		out.Logger = base.Logger
	}
	return out, nil
}

// both calls first, then second; either may be nil.
func both[T any](first, second func(T)) func(T) {
	switch {
	case first == nil:
		return second
	case second == nil:
		return first
	}
	return func(v T) {
		first(v)
		second(v)
	}
}

// union is a's entries, then b's that a lacks, in a new slice.
func union(a, b []string) []string {
	out := slices.Clone(a)
	for _, s := range b {
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

// mergeNetwork lays the run-time policy over the built-in one.
func mergeNetwork(name string, base, run *policy.Config) (*policy.Config, error) {
	if base == nil {
		return run, nil
	}
	if run == nil {
		run = &policy.Config{}
	}
	out := policy.Config{
		AllowedHosts:                 union(base.AllowedHosts, run.AllowedHosts),
		DeniedHosts:                  union(base.DeniedHosts, run.DeniedHosts),
		BlockPrivateIPs:              cmp.Or(run.BlockPrivateIPs, base.BlockPrivateIPs),
		AllowedCIDRs:                 union(base.AllowedCIDRs, run.AllowedCIDRs),
		Egress:                       append(slices.Clone(base.Egress), run.Egress...),
		Secrets:                      maps.Clone(base.Secrets),
		ScrubResponses:               base.ScrubResponses || run.ScrubResponses,
		PolicyScript:                 base.PolicyScript,
		DNSServers:                   slices.Clone(base.DNSServers),
		ExtraRootCAs:                 union(base.ExtraRootCAs, run.ExtraRootCAs),
		ResponseHeaderTimeoutSeconds: cmp.Or(run.ResponseHeaderTimeoutSeconds, base.ResponseHeaderTimeoutSeconds),
	}
	for secret, s := range run.Secrets {
		if _, dup := out.Secrets[secret]; dup {
			return nil, fmt.Errorf("secret %s is built into %s: it cannot be given again", secret, name)
		}
		if out.Secrets == nil {
			out.Secrets = map[string]policy.Secret{}
		}
		out.Secrets[secret] = s
	}
	if run.PolicyScript != "" {
		if base.PolicyScript != "" && base.PolicyScript != run.PolicyScript {
			return nil, fmt.Errorf("%s has a policy script built in: a network policy cannot bring another", name)
		}
		out.PolicyScript = run.PolicyScript
	}
	if len(run.DNSServers) > 0 {
		out.DNSServers = slices.Clone(run.DNSServers)
	}
	return &out, nil
}

// mergeVFS adds the run-time mounts and blocked paths to the built-in
// ones, whose hooks stay.
func mergeVFS(name string, base, run airlock.VFSConfig) (airlock.VFSConfig, error) {
	hooked := !reflect.ValueOf(base.Hooks).IsZero()
	if base.IsZero() && !hooked {
		return run, nil
	}
	taken := map[string]bool{}
	for t := range base.Mounts {
		taken[t] = true
	}
	for t := range base.DirectMounts {
		taken[t] = true
	}
	for t := range base.Providers {
		taken[t] = true
	}
	targets := slices.Concat(slices.Collect(maps.Keys(run.Mounts)), slices.Collect(maps.Keys(run.DirectMounts)), slices.Collect(maps.Keys(run.Providers)))
	slices.Sort(targets)
	for _, t := range targets {
		if taken[t] {
			return airlock.VFSConfig{}, fmt.Errorf("%s is a mount built into %s: mount elsewhere", t, name)
		}
	}
	out := airlock.VFSConfig{
		Mounts:       joinMaps(base.Mounts, run.Mounts),
		DirectMounts: joinMaps(base.DirectMounts, run.DirectMounts),
		Providers:    joinMaps(base.Providers, run.Providers),
		BlockedPaths: union(base.BlockedPaths, run.BlockedPaths),
		Hooks:        run.Hooks,
	}
	if hooked {
		out.Hooks = base.Hooks
	}
	return out, nil
}

// joinMaps is a new map of a's and b's entries (b's keys are not in a),
// nil when both are empty.
func joinMaps[V any](a, b map[string]V) map[string]V {
	if len(a)+len(b) == 0 {
		return nil
	}
	out := make(map[string]V, len(a)+len(b))
	maps.Copy(out, a)
	maps.Copy(out, b)
	return out
}
