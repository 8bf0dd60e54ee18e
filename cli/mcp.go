package cli

import (
	"errors"
	"log/slog"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/mcpserver"
)

type mcpFlags struct {
	image        string
	memory       string
	disk         string
	maxOutput    string
	maxRead      string
	maxSandboxes int
	net          networkFlags
}

func (a *app) newMCPCmd() *cobra.Command {
	var f mcpFlags
	cmd := &cobra.Command{
		Use:   "mcp",
		Short: "Serve sandboxes to a model as Model Context Protocol tools, on stdin and stdout",
		Long: `Serve airlock as a Model Context Protocol server over stdio, for an MCP
client (an agent, an IDE, a chat application) to start as a subprocess.

The tools are sandbox_create, exec, write_file, read_file, list_files,
sandbox_close and policy_allow. Every output a model gets is bounded
(--max-output, --max-read), and the result says when it was cut.

Secrets come only from this command's flags (--secret NAME@HOST takes the
value from airlock's own environment) or its --network-config file, never
from a tool call: commands in a sandbox see placeholders, and the value
goes only into requests to its hosts. Every sandbox closes when the client
goes away.`,
		Example: `  airlock mcp
  airlock mcp --image standard --allow-host pypi.org --secret OPENAI_API_KEY@api.openai.com

  # in an MCP client's configuration:
  {"mcpServers": {"airlock": {"command": "airlock", "args": ["mcp", "--image", "standard"]}}}`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts, err := f.options(a)
			if err != nil {
				return err
			}
			opts.Version = a.version
			opts.Logger = slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelWarn}))
			go airlock.Sweep()
			return mcpserver.New(opts).Run(cmd.Context(), &mcp.StdioTransport{})
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.image, "image", "", "every sandbox's image unless a call names one: host (default), minimal, standard, full, or an OCI reference")
	fl.StringVarP(&f.memory, "memory", "m", "", "every sandbox's memory limit unless a call gives one (512m, 2g; default 1g)")
	fl.StringVar(&f.disk, "disk", "", "every sandbox's writable tree (default: half of the memory, at most 1g)")
	fl.StringVar(&f.maxOutput, "max-output", "64k", "bytes of stdout and of stderr an exec returns")
	fl.StringVar(&f.maxRead, "max-read", "1m", "bytes a read_file returns at once")
	fl.IntVar(&f.maxSandboxes, "max-sandboxes", mcpserver.DefaultMaxSandboxes, "sandboxes open at once")
	f.net.register(cmd)
	return cmd
}

// options builds the server's options from the flags, over the
// program's built-in configuration.
func (f *mcpFlags) options(a *app) (mcpserver.Options, error) {
	var o mcpserver.Options
	o.Base.Image = f.image
	var err error
	if o.Base.Resources.MemoryMB, err = parseMiB(f.memory, "--memory"); err != nil {
		return o, err
	}
	if o.Base.DiskMB, err = parseMiB(f.disk, "--disk"); err != nil {
		return o, err
	}
	if o.MaxOutputBytes, err = parseBytes(f.maxOutput); err != nil {
		return o, errors.New("--max-output: " + err.Error())
	}
	if o.MaxReadBytes, err = parseBytes(f.maxRead); err != nil {
		return o, errors.New("--max-read: " + err.Error())
	}
	if f.maxSandboxes < 1 {
		return o, errors.New("--max-sandboxes: give at least 1")
	}
	o.MaxSandboxes = f.maxSandboxes
	if o.Base.Network, err = f.net.config(map[string]string{}); err != nil {
		return o, err
	}
	if o.Base, err = a.withBase(o.Base); err != nil {
		return o, err
	}
	return o, o.Base.Validate()
}
