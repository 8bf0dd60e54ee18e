package cli

import (
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/airlock-sandbox/airlock/internal/agentbin"
	"github.com/airlock-sandbox/airlock/internal/image/owners"
	"github.com/airlock-sandbox/airlock/internal/image/store"
	"github.com/airlock-sandbox/airlock/internal/state"
)

// openImageCache opens the image cache: --cache-dir, $AIRLOCK_CACHE_DIR,
// or ~/.cache/airlock. Without root, its trees keep their files' owners
// when the caller has subordinate ids (see package owners).
func openImageCache(dir string) (*store.Cache, error) {
	if dir == "" {
		var err error
		if dir, err = store.DefaultDir(); err != nil {
			return nil, err
		}
	}
	agent, _ := agentbin.Find("")
	o, _ := owners.Detect(agent)
	return store.OpenWith(dir, o)
}

// noteOwners says on stderr, to a caller without root whose images
// cannot keep their files' owners, why and how to fix it.
func noteOwners() {
	agent, _ := agentbin.Find("")
	if _, err := owners.Detect(agent); err != nil {
		fmt.Fprintf(os.Stderr, "note: %v\n", err)
	}
}

func (a *app) newImageCmd() *cobra.Command {
	var cacheDir string
	cmd := &cobra.Command{
		Use: "image",
		// What a docker user may type first (images, pull and rmi are
		// shortcuts of their own: dockerShortcuts).
		SuggestFor: []string{"build"},
		Short:      "Manage the images sandboxes run: build variants, pull OCI images, list, remove",
		Long: `Manage the image cache ($AIRLOCK_CACHE_DIR, else ~/.cache/airlock).

A sandbox runs the host's /usr, /bin and /lib read-only unless --image names
another root: a variant airlock builds from Debian's packages (minimal,
standard, full), or any OCI image (python:3.12-slim, a registry reference by
tag or digest, a local OCI layout directory, a docker-save tarball). An image
not in the cache is got when a sandbox first asks for it; these commands get,
list and remove images ahead of time.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.PersistentFlags().StringVar(&cacheDir, "cache-dir", "", "image cache directory (default $AIRLOCK_CACHE_DIR, else ~/.cache/airlock)")
	cmd.AddCommand(a.newImageBuildCmd(&cacheDir), a.newImageListCmd(&cacheDir), a.newImageRmCmd(&cacheDir), a.newImagePruneCmd(&cacheDir))
	cmd.AddCommand(a.newImagePullCmd(&cacheDir))
	cmd.AddCommand(a.newImagePublishCmd(&cacheDir))
	return cmd
}

// dockerShortcuts are docker's top-level image commands: airlock images,
// pull and rmi are image list, image pull and image rm, flags included.
func (a *app) dockerShortcuts() []*cobra.Command {
	var cacheDir string
	cmds := []*cobra.Command{a.newImageListCmd(&cacheDir), a.newImagePullCmd(&cacheDir), a.newImageRmCmd(&cacheDir)}
	for i, use := range []string{"images", "pull", "rmi"} {
		c := cmds[i]
		c.Short = fmt.Sprintf("%s (airlock image %s, as docker %s)", c.Short, c.Name(), use)
		_, args, _ := strings.Cut(c.Use, " ")
		c.Use = strings.TrimSpace(use + " " + args)
		c.Aliases = nil
		c.Hidden = true
		c.Flags().StringVar(&cacheDir, "cache-dir", "", "image cache directory (default $AIRLOCK_CACHE_DIR, else ~/.cache/airlock)")
	}
	return cmds
}

func (a *app) newImageListCmd(cacheDir *string) *cobra.Command {
	var asJSON, quiet bool
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List the images in the cache",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := openImageCache(*cacheDir)
			if err != nil {
				return err
			}
			imgs, err := c.List()
			if err != nil {
				return err
			}
			switch {
			case asJSON:
				if imgs == nil {
					imgs = []store.Image{}
				}
				return writeJSON(imgs)
			case quiet:
				for _, img := range imgs {
					fmt.Println(img.Key)
				}
				return nil
			}
			tw := tabwriter.NewWriter(os.Stdout, 0, 4, 3, ' ', 0)
			fmt.Fprintln(tw, "NAME\tKEY\tKIND\tSIZE\tFILES\tCREATED")
			now := time.Now()
			for _, img := range imgs {
				names := "<none>"
				if len(img.Names) > 0 {
					names = strings.Join(img.Names, ", ")
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\n", termText(names), shortItem(img.Key), img.Kind, humanBytes(img.Size), img.Files, state.HumanAge(now.Sub(img.Created)))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.Flags().BoolVarP(&quiet, "quiet", "q", false, "print keys only")
	return cmd
}

func (a *app) newImageRmCmd(cacheDir *string) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:     "rm NAME|KEY...",
		Aliases: []string{"remove"},
		Short:   "Remove names, or images by key; an image goes with its last name",
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := openImageCache(*cacheDir)
			if err != nil {
				return err
			}
			type result struct {
				Name    string   `json:"name"`
				Removed []string `json:"removed_images"`
				Error   string   `json:"error,omitempty"`
			}
			var out []result
			var failed error
			for _, name := range args {
				removed, err := c.Remove(cmd.Context(), name)
				r := result{Name: name, Removed: removed}
				if r.Removed == nil {
					r.Removed = []string{}
				}
				if err != nil {
					r.Error = err.Error()
					failed = fmt.Errorf("some images were not removed")
					if !asJSON {
						a.warnf("%s", termText(err.Error()))
					}
				} else if !asJSON {
					fmt.Println(termText("untagged: " + name))
					for _, k := range removed {
						fmt.Println("deleted: " + k)
					}
				}
				out = append(out, r)
			}
			if asJSON {
				if err := writeJSON(out); err != nil {
					return err
				}
			}
			if failed != nil {
				return exitError{code: 1}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func (a *app) newImagePruneCmd(cacheDir *string) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "prune",
		Short: "Remove images no name points at, blobs and chains of layers no image needs, and work left by builds that died",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := openImageCache(*cacheDir)
			if err != nil {
				return err
			}
			r, err := c.Prune(cmd.Context())
			if err != nil {
				return err
			}
			if asJSON {
				if r.Images == nil {
					r.Images = []string{}
				}
				if r.Blobs == nil {
					r.Blobs = []string{}
				}
				return writeJSON(r)
			}
			for _, k := range r.Images {
				fmt.Println("deleted image: " + k)
			}
			for _, k := range r.Blobs {
				fmt.Println("deleted blob: " + k)
			}
			if r.Chains > 0 {
				fmt.Printf("deleted %d chains of layers\n", r.Chains)
			}
			fmt.Printf("freed %s\n", humanBytes(r.Freed))
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}
