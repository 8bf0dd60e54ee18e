//go:build linux

// Command airlock-runsc is gVisor's runsc, built from the
// gvisor.dev/gvisor module at the version airlock's go.mod pins: the
// boundary of the gvisor isolation level, installed next to airlock.
//
// It is runsc's own entry point (gvisor.dev/gvisor/runsc/cli/maincli,
// Copyright 2025 The gVisor Authors, Apache License 2.0) with one import
// left out: runsc/gvisorbinaries/embed, which links a 47 MB prebuilt
// checkpointgofer executable into the binary. That sidecar serves
// checkpoints to cloud storage, which airlock never uses; without it the
// binary is 36 MB instead of 83 MB, all of it compiled from source.
//
// It lives in a module of its own because runsc at this version is
// written against github.com/opencontainers/runtime-spec v1.2, and
// airlock's module needs v1.3 (through github.com/containerd/cgroups/v3),
// whose types differ. `make runsc` checks that both go.mod files name the
// same gvisor.dev/gvisor version.
package main

import (
	"github.com/google/subcommands"
	"gvisor.dev/gvisor/runsc/cli"
	"gvisor.dev/gvisor/runsc/cmd"
	"gvisor.dev/gvisor/runsc/cmd/alias"
	"gvisor.dev/gvisor/runsc/cmd/nvproxy"
	"gvisor.dev/gvisor/runsc/cmd/profile"
	"gvisor.dev/gvisor/runsc/cmd/sentry/sentrycmd"
	"gvisor.dev/gvisor/runsc/cmd/trace"
	"gvisor.dev/gvisor/runsc/cmd/util"
	"gvisor.dev/gvisor/runsc/version"
)

// version.Version is set with -ldflags -X
// gvisor.dev/gvisor/runsc/version.version=...; referring to it keeps it
// linked in.
var _ = version.Version()

const (
	userGroup     = ""
	helperGroup   = "helpers"
	debugGroup    = "debug"
	metricGroup   = "metrics"
	internalGroup = "internal use only"
)

func main() {
	alias.HandleAlias()
	cmds, helpCmds := commands()
	cli.Run(nil, cmds, helpCmds)
}

// commands is maincli's command table, unchanged.
func commands() (map[util.SubCommand]string, []subcommands.Command) {
	cmds := map[util.SubCommand]string{
		// OCI user-facing commands.
		new(cmd.Checkpoint): userGroup,
		new(cmd.Create):     userGroup,
		new(cmd.Delete):     userGroup,
		new(cmd.Events):     userGroup,
		new(cmd.Exec):       userGroup,
		new(cmd.Kill):       userGroup,
		new(cmd.List):       userGroup,
		new(cmd.PS):         userGroup,
		new(cmd.Pause):      userGroup,
		new(cmd.Restore):    userGroup,
		new(cmd.Resume):     userGroup,
		new(cmd.Run):        userGroup,
		new(cmd.Spec):       userGroup,
		new(cmd.Start):      userGroup,
		new(cmd.State):      userGroup,
		new(cmd.Update):     userGroup,
		new(cmd.Wait):       userGroup,

		// Non-OCI user-facing commands.
		new(cmd.Do):           userGroup,
		new(cmd.FSCheckpoint): userGroup,
		new(cmd.PortForward):  userGroup,
		new(cmd.Read):         userGroup,
		new(cmd.SandboxExec):  userGroup,
		new(cmd.Tar):          userGroup,

		// Helpers.
		new(cmd.Install):     helperGroup,
		new(cmd.Mitigate):    helperGroup,
		new(cmd.Uninstall):   helperGroup,
		new(nvproxy.Nvproxy): helperGroup,
		new(trace.Trace):     helperGroup,
		new(cmd.CPUFeatures): helperGroup,
		new(cmd.Features):    helperGroup,

		new(cmd.Debug):        debugGroup,
		new(profile.Profile):  debugGroup,
		new(cmd.Statefile):    debugGroup,
		new(cmd.Symbolize):    debugGroup,
		new(cmd.Usage):        debugGroup,
		new(cmd.ReadControl):  debugGroup,
		new(cmd.WriteControl): debugGroup,

		new(cmd.MetricMetadata): metricGroup,
		new(cmd.MetricExport):   metricGroup,
		new(cmd.MetricServer):   metricGroup,

		// Internal commands: the sandbox and the gofer re-execute this
		// binary with these.
		new(sentrycmd.Boot):   internalGroup,
		new(cmd.Gofer):        internalGroup,
		new(sentrycmd.Umount): internalGroup,
	}
	for k, v := range alias.Commands() {
		cmds[k] = v
	}
	// As runsc has it, `help platforms` and `help syscalls`.
	helpCmds := []subcommands.Command{
		new(cmd.Platforms),
		new(cmd.Syscalls),
	}
	return cmds, helpCmds
}
