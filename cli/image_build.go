package cli

import (
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/airlock-sandbox/airlock/internal/image/store"
	"github.com/airlock-sandbox/airlock/internal/image/variant"
)

// buildResult is what `airlock image build --json` prints for a
// variant.
type buildResult struct {
	Name       string `json:"name"`
	Key        string `json:"key,omitempty"`
	Cached     bool   `json:"cached"`
	Size       int64  `json:"size"`
	Files      int64  `json:"files"`
	EROFSSize  int64  `json:"erofs_size,omitempty"`
	RootFS     string `json:"rootfs,omitempty"`
	DurationMS int64  `json:"duration_ms"`
	Error      string `json:"error,omitempty"`
}

func (a *app) newImageBuildCmd(cacheDir *string) *cobra.Command {
	var asJSON, all, rebuild, plain bool
	cmd := &cobra.Command{
		Use:   "build [VARIANT...]",
		Short: "Build image variants from Debian's packages (default: standard)",
		Long: `Build airlock's own images from Debian's packages with mmdebstrap, into the
image cache, unless the cache holds them already:

  minimal    a shell, coreutils, curl, ca-certificates, Python 3
  standard   minimal + pip, venv, python (= python3), Node.js, npm, git,
             ssh, gcc, make
  full       standard + numpy, pandas, Ruby, Go

An image is keyed by its package list, the Debian suite, the architecture
and the build recipe, so a build is done once and reused. Docs, man pages,
translations and apt's lists are left out. Building needs root and
mmdebstrap (Debian, Ubuntu: apt-get install mmdebstrap).

Where the packages come from: $AIRLOCK_DEBIAN_MIRROR (default
http://deb.debian.org/debian), $AIRLOCK_DEBIAN_SECURITY_MIRROR (default
http://deb.debian.org/debian-security; "none" for no security updates) and
$AIRLOCK_DEBIAN_SUITE (default bookworm).`,
		Example: `  airlock image build                 # standard
  airlock image build minimal full
  airlock image build --all --json
  airlock image build --rebuild standard   # again, with today's packages`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			switch {
			case all && len(args) > 0:
				return fmt.Errorf("--all builds every variant: name none with it")
			case all:
				args = variant.Names()
			case len(args) == 0:
				args = []string{"standard"}
			}
			for _, a := range args {
				if _, err := variant.Get(a); err != nil {
					return err
				}
			}
			c, err := openImageCache(*cacheDir)
			if err != nil {
				return err
			}
			src, err := variant.SourceFromEnv()
			if err != nil {
				return err
			}
			view := newProgressView(os.Stderr, asJSON || plain)
			defer func() { view.Close() }()
			b := variant.Builder{Cache: c, Source: src, Rebuild: rebuild}
			if !asJSON {
				b.Progress = view.Report
			}
			var (
				out    []buildResult
				failed bool
			)
			for _, name := range args {
				r := buildOne(cmd, &b, c, name)
				out = append(out, r)
				if r.Error != "" {
					failed = true
				}
				if asJSON {
					continue
				}
				view.Close()
				switch {
				case r.Error != "":
					a.warnf("%s", termText(r.Error))
				case r.Cached:
					fmt.Printf("%s: cached, %s in %d files (%s)\n", r.Name, humanBytes(r.Size), r.Files, shortItem(r.Key))
				default:
					fmt.Printf("%s: built in %s, %s in %d files, erofs %s (%s)\n", r.Name,
						(time.Duration(r.DurationMS) * time.Millisecond).Round(time.Second), humanBytes(r.Size), r.Files, humanBytes(r.EROFSSize), shortItem(r.Key))
				}
				view = newProgressView(os.Stderr, plain)
				b.Progress = view.Report
			}
			if asJSON {
				if err := writeJSON(out); err != nil {
					return err
				}
			}
			if failed {
				return exitError{code: 1}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON array of results, and no progress")
	cmd.Flags().BoolVar(&all, "all", false, "build every variant")
	cmd.Flags().BoolVar(&rebuild, "rebuild", false, "build even when the cache holds the variant, replacing it")
	cmd.Flags().BoolVar(&plain, "plain", false, "report progress as plain lines, even on a terminal")
	return cmd
}

// buildOne builds one variant and says how it went.
func buildOne(cmd *cobra.Command, b *variant.Builder, c *store.Cache, name string) buildResult {
	r := buildResult{Name: name}
	start := time.Now()
	img, ok, err := b.Cached(name)
	switch {
	case err != nil:
		r.Error = err.Error()
		return r
	case ok && !b.Rebuild:
		r.Cached = true
		// The name may have gone while the image stayed.
		if err := c.Tag(name, img.Key); err != nil {
			r.Error = err.Error()
			return r
		}
	default:
		if img, err = b.Build(cmd.Context(), name); err != nil {
			r.Error = err.Error()
			return r
		}
	}
	r.DurationMS = time.Since(start).Milliseconds()
	r.Key, r.Size, r.Files, r.RootFS = img.Key, img.Size, img.Files, img.RootFS
	if p, err := c.EROFS(cmd.Context(), img); err == nil {
		if fi, err := os.Stat(p); err == nil {
			r.EROFSSize = fi.Size()
		}
	}
	return r
}
