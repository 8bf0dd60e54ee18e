package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/airlock-sandbox/airlock/client"
)

func (a *app) newPolicyCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "policy ID [allow|deny|remove HOST...]",
		Short: "Show or change the hosts a running sandbox may reach",
		Long: `Show the allowed and denied host patterns of a running sandbox's network
policy, or change them: allow adds patterns to the allowed hosts, deny to
the denied hosts (which win over every allowed pattern and egress rule),
and remove takes patterns out of either list. A change applies to new
requests, connections and DNS questions at once.

The sandbox must have a network: one started by airlock run --detach with
a network flag (--allow-host, --network-config, ...), or created with a
network by an airlock rpc session. Patterns are api.example.com (that
name), '*.example.com' (any subdomain) or '*' (any public host); quote
them from the shell. An allowed pattern opens ports 80 and 443; one with
a port, api.example.com:8443, opens that port alone. After a change the
lists in force are printed.`,
		Example: `  airlock policy sb-3f
  airlock policy sb-3f allow api.example.com '*.githubusercontent.com'
  airlock policy sb-3f allow api.example.com:8443
  airlock policy sb-3f deny tracker.example.com
  airlock policy sb-3f remove api.example.com
  airlock policy --json sb-3f`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.runPolicy(cmd.Context(), args[0], args[1:], asJSON)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print {sandbox_id, allowed_hosts, denied_hosts} as JSON")
	return cmd
}

func (a *app) runPolicy(ctx context.Context, prefix string, args []string, asJSON bool) error {
	var change func(*client.Sandbox, context.Context, string) error
	if len(args) > 0 {
		switch args[0] {
		case "allow":
			change = (*client.Sandbox).AllowHost
		case "deny":
			change = (*client.Sandbox).DenyHost
		case "remove", "rm":
			change = (*client.Sandbox).RemoveHost
		default:
			return fmt.Errorf("%q is not allow, deny or remove: give `airlock policy ID` to show the hosts, or `airlock policy ID allow|deny|remove HOST` (one or more hosts) to change them", args[0])
		}
		if len(args) == 1 {
			return fmt.Errorf("give the host patterns to %s after %s", args[0], args[0])
		}
	}
	c, sb, err := a.runningSandbox(ctx, prefix)
	if err != nil {
		return err
	}
	defer c.Close()
	failed := 0
	if change != nil {
		for _, host := range args[1:] {
			err := change(sb, ctx, host)
			switch {
			case err == nil:
				continue
			case errors.Is(err, client.ErrUnsupported):
				return noNetwork(sb.ID())
			case !errors.Is(err, client.ErrInvalidParams) && !errors.Is(err, client.ErrNotFound):
				// Not about this pattern: the sandbox stopped, the
				// connection dropped.
				return err
			}
			failed++
			a.warnf("%s %s: %s", args[0], termText(host), termText(serverMessage(err)))
		}
	}
	allowed, denied, err := sb.Hosts(ctx)
	if errors.Is(err, client.ErrUnsupported) {
		return noNetwork(sb.ID())
	}
	if err != nil {
		return err
	}
	if asJSON {
		if allowed == nil {
			allowed = []string{}
		}
		if denied == nil {
			denied = []string{}
		}
		if err := writeJSON(map[string]any{"sandbox_id": sb.ID(), "allowed_hosts": allowed, "denied_hosts": denied}); err != nil {
			return err
		}
	} else {
		fmt.Printf("allowed hosts: %s\n", hostList(allowed))
		fmt.Printf("denied hosts:  %s\n", hostList(denied))
	}
	if failed > 0 {
		return exitError{1}
	}
	return nil
}

func noNetwork(id string) error {
	return fmt.Errorf("sandbox %s has no network, so no hosts to show or change: it was started without one; start a sandbox with --allow-host, --network-config or another network flag (see airlock run --help)", id)
}

// serverMessage is the server's own words for a failed call.
func serverMessage(err error) string {
	var ce *client.Error
	if errors.As(err, &ce) {
		return ce.Message
	}
	return err.Error()
}

func hostList(hosts []string) string {
	if len(hosts) == 0 {
		return "(none)"
	}
	safe := make([]string, len(hosts))
	for i, h := range hosts {
		safe[i] = termText(h)
	}
	return strings.Join(safe, " ")
}
