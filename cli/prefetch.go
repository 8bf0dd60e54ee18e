package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"

	"github.com/spf13/cobra"

	"github.com/airlock-sandbox/airlock/internal/image/dist"
)

// defaultVariant is what prefetch gets when no variant is named: the
// image a sandbox is created from unless it names another.
const defaultVariant = "standard"

func (a *app) newPrefetchCmd() *cobra.Command {
	var (
		variants []string
		all      bool
		erofs    bool
		manifest string
		cacheDir string
		asJSON   bool
	)
	cmd := &cobra.Command{
		Use:   "prefetch [--variant V ...]",
		Short: "Download images from the image manifest into the cache, for offline use or CI",
		Long: `Download images from the image manifest into the image cache
($AIRLOCK_CACHE_DIR, else ~/.cache/airlock), so that sandboxes start
without a download.

The manifest is --manifest, else $AIRLOCK_IMAGE_MANIFEST, else
"image_manifest" in $XDG_CONFIG_HOME/airlock/config.json (an http or
https URL, a file URL or a path). A mirror is made with
` + "`airlock image publish DIR`" + `.

Without --variant, the standard variant is fetched; --all fetches every
variant the manifest has for this machine's architecture. Downloads
resume where they stopped, are retried, and are checked against the
manifest's sha256 and size before use.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fail := func(err error) error {
				if asJSON {
					return writeJSONError(err)
				}
				return err
			}
			cache, err := openImageCache(cacheDir)
			if err != nil {
				return fail(err)
			}
			var cl *dist.Client
			if manifest != "" {
				u, err := dist.ManifestURL(manifest)
				if err != nil {
					return fail(fmt.Errorf("--manifest: %w", err))
				}
				cl = &dist.Client{Manifest: u}
			} else if cl, err = dist.Configured(); err != nil {
				return fail(err)
			}
			cl.EROFS = erofs
			ctx := cmd.Context()
			if all {
				if len(variants) > 0 {
					return fail(fmt.Errorf("--all and --variant do not go together"))
				}
				m, err := cl.LoadManifest(ctx)
				if err != nil {
					return fail(err)
				}
				if variants = m.Variants(runtime.GOARCH); len(variants) == 0 {
					return fail(fmt.Errorf("the image manifest %s has no variant for %s", cl.Manifest, runtime.GOARCH))
				}
			}
			if len(variants) == 0 {
				variants = []string{defaultVariant}
			}
			view := newProgressView(os.Stderr, asJSON)
			imgs, err := cl.Prefetch(ctx, cache, variants, view.Report)
			view.Close()
			if err != nil {
				return fail(err)
			}
			if asJSON {
				return writeJSON(map[string]any{"manifest": cl.Manifest, "images": imgs})
			}
			for i, img := range imgs {
				fmt.Fprintf(cmd.OutOrStdout(), "%s\t%s\t%s\t%s\n", variants[i], shortItem(img.Key), humanBytes(img.Size), img.RootFS)
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringArrayVar(&variants, "variant", nil, "variant to download (repeatable; default "+defaultVariant+")")
	fl.BoolVar(&all, "all", false, "download every variant the manifest has for this architecture")
	fl.BoolVar(&erofs, "erofs", false, "also download each variant's erofs file (the vm level's disk), when the manifest has one")
	fl.StringVar(&manifest, "manifest", "", "manifest URL or path (default $"+dist.EnvManifest+", or image_manifest in airlock's config.json)")
	fl.StringVar(&cacheDir, "cache-dir", "", "image cache directory (default $AIRLOCK_CACHE_DIR, else ~/.cache/airlock)")
	fl.BoolVar(&asJSON, "json", false, "print the images as JSON")
	return cmd
}

func (a *app) newImagePublishCmd(cacheDir *string) *cobra.Command {
	var (
		noEROFS bool
		ver     string
		asJSON  bool
	)
	cmd := &cobra.Command{
		Use:   "publish DIR [VARIANT...]",
		Short: "Write the images built here, with a manifest, into DIR for a static HTTP server to serve as a mirror",
		Long: `Write images from the image cache into DIR as artifacts (each root tree
as a tar compressed with zstd, and its erofs file), with a manifest.json
whose URLs are relative to it. Serve DIR with any static HTTP server and
point $AIRLOCK_IMAGE_MANIFEST at its manifest.json (or at the file
itself: a folder on a shared disk serves too).

Without VARIANT, every image built here or downloaded, by its name, is
published. Publishing into a folder that has a manifest adds to it (so
one folder can serve several architectures); a replaced artifact's old
file is removed. Archives keep owners (as numbers), modes with setuid,
setgid and sticky bits, symbolic and hard links, FIFOs and modification
times; not extended attributes, nor device nodes, which a sandbox never
takes from an image. The same tree gives the same archive, byte for byte.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			fail := func(err error) error {
				if asJSON {
					return writeJSONError(err)
				}
				return err
			}
			cache, err := openImageCache(*cacheDir)
			if err != nil {
				return fail(err)
			}
			out, err := filepath.Abs(args[0])
			if err != nil {
				return fail(err)
			}
			view := newProgressView(os.Stderr, asJSON)
			res, err := dist.Publish(cmd.Context(), cache, out, args[1:], dist.PublishOptions{
				Version:  ver,
				EROFS:    !noEROFS,
				Progress: view.Report,
			})
			view.Close()
			if err != nil {
				return fail(err)
			}
			if asJSON {
				return writeJSON(map[string]any{"dir": out, "manifest": filepath.Join(out, dist.ManifestFile), "written": res.Written, "skipped": res.Skipped, "artifacts": res.Manifest.Artifacts})
			}
			w := cmd.OutOrStdout()
			for _, name := range res.Written {
				a := res.Manifest.Artifacts[name]
				fmt.Fprintf(w, "%s\t%s\t%s\n", name, humanBytes(a.Size), filepath.Join(out, a.URL))
			}
			for v, skipped := range res.Skipped {
				fmt.Fprintf(cmd.ErrOrStderr(), "%s: %s: left out %d device nodes and sockets (a sandbox has its own /dev)\n", a.name, v, len(skipped))
			}
			fmt.Fprintf(w, "manifest\t%s\n", filepath.Join(out, dist.ManifestFile))
			return nil
		},
	}
	fl := cmd.Flags()
	fl.BoolVar(&noEROFS, "no-erofs", false, "do not write erofs files (they need mkfs.erofs, from erofs-utils)")
	fl.StringVar(&ver, "version", "", "the manifest's version (default: the time now, UTC)")
	fl.BoolVar(&asJSON, "json", false, "print what was written as JSON")
	return cmd
}
