package cli

import (
	"encoding/json"
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"

	"github.com/airlock-sandbox/airlock/internal/agentproto"
)

type versionInfo struct {
	Version  string `json:"version"`
	Commit   string `json:"commit,omitempty"`
	Go       string `json:"go"`
	Platform string `json:"platform"`
	Protocol int    `json:"agent_protocol"`
}

func (a *app) currentVersion() versionInfo {
	v := versionInfo{Version: a.version, Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH, Protocol: agentproto.Version}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				v.Commit = s.Value
			}
		}
	}
	return v
}

func (a *app) newVersionCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the version of " + a.name,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v := a.currentVersion()
			if asJSON {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(v)
			}
			commit := v.Commit
			if len(commit) > 12 {
				commit = commit[:12]
			}
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "%s %s (commit %s, %s, %s, agent protocol %d)\n", a.name, v.Version, orDash(commit), v.Go, v.Platform, v.Protocol)
			return err
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
