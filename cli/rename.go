package cli

import (
	"github.com/spf13/cobra"
)

func (a *app) newRenameCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "rename ID NEW_NAME",
		Short: "Give a sandbox another name",
		Long: `Give a sandbox (running or stopped) another name, as docker rename does:
the old name is free at once, and a name another sandbox has is refused.
Names are 1-64 letters, digits, '.', '-' and '_', starting with a letter
or digit.`,
		Example: "  " + a.name + " rename web web-old",
		Args:    cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			store, err := openStore()
			if err != nil {
				return err
			}
			id, err := store.Resolve(args[0])
			if err != nil {
				return err
			}
			return store.Rename(id, args[1])
		},
	}
}
