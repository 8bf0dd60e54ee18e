//go:build tools

// Package deps pins module dependencies that later packages use.
package deps

import (
	_ "github.com/containerd/cgroups/v3"
	_ "github.com/containerd/cgroups/v3/cgroup1"
	_ "github.com/containerd/cgroups/v3/cgroup2"
	_ "github.com/creack/pty"
	_ "github.com/fxamacker/cbor/v2"
	_ "github.com/hashicorp/yamux"
	_ "github.com/landlock-lsm/go-landlock/landlock"
	_ "github.com/opencontainers/runtime-spec/specs-go"
	_ "github.com/spf13/cobra"
	_ "golang.org/x/net/bpf"
	_ "golang.org/x/sys/unix"
	_ "golang.org/x/term"
)
