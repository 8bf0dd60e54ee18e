// Command custom-cli is my-sandbox: a sandbox program of its own, built
// on package cli, with what flags and JSON cannot carry built in.
//
//   - /data in every sandbox is a Go provider, a tree in this program's
//     memory, filled here before any sandbox starts;
//   - a Go hook on the sandbox's files refuses to remove anything in /data;
//   - the network allows api.example.com alone, and its key is read from
//     this program's $MY_SANDBOX_API_KEY: commands see a placeholder in
//     $API_KEY, and the value goes only into requests to that host.
//
// It has every command of airlock: my-sandbox run -- cat /data/motd.txt,
// my-sandbox rpc, my-sandbox mcp, ...; flags given at run time add to
// this configuration (see package cli for the rules). Build it with
// CGO_ENABLED=0 to let it serve as its own agent.
package main

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/cli"
	"github.com/airlock-sandbox/airlock/policy"
	"github.com/airlock-sandbox/airlock/vfs"
)

// motd is what /data/motd.txt holds.
const motd = "hello from a Go provider\n"

func main() {
	data, err := dataTree(context.Background())
	if err != nil {
		fmt.Fprintf(os.Stderr, "my-sandbox: %v\n", err)
		os.Exit(125)
	}
	network := &policy.Config{AllowedHosts: []string{"api.example.com"}}
	if key, ok := os.LookupEnv("MY_SANDBOX_API_KEY"); ok {
		network.Secrets = map[string]policy.Secret{
			"API_KEY": {Value: key, Hosts: []string{"api.example.com"}},
		}
	}
	cli.Main(cli.Options{
		Name:  "my-sandbox",
		Short: "Run code in a sandbox with this team's data and API key",
		Config: airlock.Config{
			Resources: airlock.Resources{MemoryMB: 512},
			Env:       map[string]string{"MODE": "my-sandbox"},
			Network:   network,
			VFS: airlock.VFSConfig{
				Providers: map[string]vfs.Provider{"/data": data},
				Hooks:     vfs.Hooks{BeforeRemove: keepData},
			},
		},
	})
}

// dataTree is the tree mounted at /data.
func dataTree(ctx context.Context) (vfs.Provider, error) {
	m := vfs.NewMemory(vfs.MemoryOptions{MaxBytes: 64 << 20})
	h, err := m.Create(ctx, "/motd.txt", 0o644)
	if err != nil {
		return nil, fmt.Errorf("make /data/motd.txt: %w", err)
	}
	defer h.Close()
	if _, err := h.WriteAt(ctx, []byte(motd), 0); err != nil {
		return nil, fmt.Errorf("write /data/motd.txt: %w", err)
	}
	return m, nil
}

// keepData refuses to remove anything in /data (the sandbox gets EPERM);
// it sees the paths of every programmable mount, as the sandbox names
// them.
func keepData(_ context.Context, path string) error {
	if strings.HasPrefix(path, "/data/") {
		return fmt.Errorf("%s is kept: nothing in /data is removed", path)
	}
	return nil
}
