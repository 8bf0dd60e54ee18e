//go:build linux

// Command containerd-shim-airlock-v2 is airlock's containerd shim
// (runtime v2, task API v2): containerd runs containers in airlock
// sandboxes through it, as runtime "io.containerd.airlock.v2". Install
// it on PATH beside containerd; see deploy/ and the README's
// "Kubernetes" section.
//
// It is a binary of its own rather than a mode of airlock: it links
// containerd's shim library, ttrpc and protobuf, which airlock's users
// off Kubernetes nodes do not need.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/containerd/containerd/pkg/shutdown"
	"github.com/containerd/containerd/plugin"
	"github.com/containerd/containerd/runtime/v2/shim"

	"github.com/airlock-sandbox/airlock/internal/ctrshim"
)

func main() {
	if len(os.Args) == 2 && (os.Args[1] == "-info" || os.Args[1] == "--info") {
		// containerd 2.x's runtime introspection, which the 1.7
		// shim library this is built on does not know.
		if err := ctrshim.WriteInfo(os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "containerd-shim-airlock-v2 -info:", err)
			os.Exit(1)
		}
		return
	}
	plugin.Register(&plugin.Registration{
		Type:     plugin.TTRPCPlugin,
		ID:       "task",
		Requires: []plugin.Type{plugin.EventPlugin, plugin.InternalPlugin},
		InitFn: func(ic *plugin.InitContext) (any, error) {
			pp, err := ic.GetByID(plugin.EventPlugin, "publisher")
			if err != nil {
				return nil, err
			}
			ss, err := ic.GetByID(plugin.InternalPlugin, "shutdown")
			if err != nil {
				return nil, err
			}
			return ctrshim.NewService(ic.Context, pp.(shim.Publisher), ss.(shutdown.Service))
		},
	})
	// The sandboxes' supervisors wait for their own children (agents,
	// VM monitors, runsc): no reaper may take their exits first.
	shim.RunManager(context.Background(), ctrshim.Manager{}, func(c *shim.Config) {
		c.NoReaper = true
		c.NoSubreaper = true
	})
}
