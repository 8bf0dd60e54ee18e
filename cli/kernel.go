package cli

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/airlock-sandbox/airlock/internal/image/store"
	"github.com/airlock-sandbox/airlock/internal/state"
	"github.com/airlock-sandbox/airlock/internal/vmkernel"
)

// kernelCacheDir is --cache-dir, else $AIRLOCK_KERNEL_CACHE, else the
// image cache's default ($AIRLOCK_CACHE_DIR, else ~/.cache/airlock):
// kernels live beside the images, in its kernels folder.
func kernelCacheDir(dir string) (string, error) {
	if dir != "" {
		return dir, nil
	}
	if d := os.Getenv(vmkernel.EnvCacheDir); d != "" {
		return d, nil
	}
	return store.DefaultDir()
}

func (a *app) newKernelCmd() *cobra.Command {
	var cacheDir string
	cmd := &cobra.Command{
		Use:   "kernel",
		Short: "Build, list and remove the guest kernels of the vm boundary",
		Long: `Build, list and remove the guest kernels that the vm boundary boots.

A guest kernel is built from Debian's linux-source package with
` + "`make tinyconfig`" + ` plus a config fragment that airlock carries (virtio-mmio
block, network, console and vsock; FUSE, overlayfs, 9p, erofs, ext4, tmpfs;
cgroups, seccomp, landlock; on x86_64 the PVH entry that QEMU's microvm and
Firecracker boot directly). It is kept in the cache directory
($AIRLOCK_CACHE_DIR, else ~/.cache/airlock) under kernels/, keyed by the
source's version, the architecture, the fragment and the build script, so
it is built once and reused.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.PersistentFlags().StringVar(&cacheDir, "cache-dir", "", "cache directory (default $AIRLOCK_CACHE_DIR, else ~/.cache/airlock)")
	cmd.AddCommand(a.newKernelBuildCmd(&cacheDir), a.newKernelListCmd(&cacheDir), a.newKernelRmCmd(&cacheDir), a.newKernelPruneCmd(&cacheDir))
	return cmd
}

// kernelBuildResult is what `airlock kernel build --json` prints.
type kernelBuildResult struct {
	vmkernel.Kernel
	Cached     bool  `json:"cached"`
	DurationMS int64 `json:"duration_ms"`
}

func (a *app) newKernelBuildCmd(cacheDir *string) *cobra.Command {
	var (
		arch                    string
		jobs                    int
		asJSON, rebuild, stream bool
	)
	cmd := &cobra.Command{
		Use:   "build",
		Short: "Build the guest kernel, unless the cache holds it",
		Long: `Build the guest kernel for an architecture into the cache, unless the cache
holds it already. Needs Debian's linux-source-6.1 in /usr/src and a
compiler (apt-get install linux-source-6.1 build-essential flex bison bc
libelf-dev; for arm64 on another machine, gcc-aarch64-linux-gnu too). The
compile runs under nice -n 19 and takes minutes; progress goes to
standard error, the whole output to the kernel's build.log.`,
		Example: `  airlock kernel build
  airlock kernel build --arch arm64 --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			dir, err := kernelCacheDir(*cacheDir)
			if err != nil {
				return err
			}
			if arch == "" {
				arch = vmkernel.HostArch(runtime.GOARCH)
			}
			start := time.Now()
			opts := vmkernel.BuildOptions{CacheDir: dir, Arch: arch, Jobs: jobs, Rebuild: rebuild}
			switch {
			case stream:
				opts.Log = os.Stderr
			case !asJSON:
				opts.Progress = kernelProgress(os.Stderr, start)
			}
			k, cached, err := vmkernel.Build(cmd.Context(), opts)
			if err != nil {
				return err
			}
			r := kernelBuildResult{Kernel: k, Cached: cached, DurationMS: time.Since(start).Milliseconds()}
			if asJSON {
				return writeJSON(r)
			}
			how := "built in " + time.Since(start).Round(time.Second).String()
			if cached {
				how = "cached"
			}
			fmt.Printf("%s kernel %s: %s, %s (%s)\n%s\n", k.Arch, termText(k.Release), how, humanBytes(k.Size), k.Key[:12], termText(k.Path))
			return nil
		},
	}
	cmd.Flags().StringVar(&arch, "arch", "", "architecture: "+strings.Join(vmkernel.Arches, " or ")+" (default this machine's)")
	cmd.Flags().IntVarP(&jobs, "jobs", "j", 0, "parallel compile jobs (default the number of CPUs)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the kernel as JSON, and no progress")
	cmd.Flags().BoolVar(&rebuild, "rebuild", false, "build even when the cache holds the kernel, replacing it")
	cmd.Flags().BoolVar(&stream, "log", false, "copy the build's whole output to standard error instead of progress lines")
	return cmd
}

// kernelProgress writes a line on w when a step begins, and one at most
// every few seconds while the compile goes.
func kernelProgress(w io.Writer, start time.Time) func(vmkernel.Progress) {
	var last time.Time
	return func(p vmkernel.Progress) {
		since := time.Since(start).Round(time.Second)
		switch {
		case p.Step != "compile" || p.Objects == 0:
			fmt.Fprintf(w, "kernel %s: %s (%s)\n", p.Arch, p.Step, since)
			last = time.Now()
		case time.Since(last) >= plainEvery:
			fmt.Fprintf(w, "kernel %s: compile, %d objects (%s)\n", p.Arch, p.Objects, since)
			last = time.Now()
		}
	}
}

func (a *app) newKernelListCmd(cacheDir *string) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List the guest kernels in the cache",
		Long: `List the guest kernels in the cache. CURRENT marks those built from this
airlock's config fragment and build script: the ones the vm boundary boots.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			dir, err := kernelCacheDir(*cacheDir)
			if err != nil {
				return err
			}
			ks, err := vmkernel.List(dir)
			if err != nil {
				return err
			}
			if asJSON {
				if ks == nil {
					ks = []vmkernel.Kernel{}
				}
				return writeJSON(ks)
			}
			tw := tabwriter.NewWriter(os.Stdout, 0, 4, 3, ' ', 0)
			fmt.Fprintln(tw, "ARCH\tRELEASE\tKEY\tCURRENT\tSIZE\tSOURCE\tBUILT\tPATH")
			now := time.Now()
			for _, k := range ks {
				cur := "no"
				if k.Current {
					cur = "yes"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", k.Arch, termText(k.Release), k.Key[:12], cur, humanBytes(k.Size),
					termText(k.Source+" "+k.SourceVersion), state.HumanAge(now.Sub(k.BuiltAt)), termText(k.Path))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func (a *app) newKernelRmCmd(cacheDir *string) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:     "rm KEY...",
		Aliases: []string{"remove"},
		Short:   "Remove guest kernels from the cache, by key (at least 4 characters of it)",
		Example: `  ` + a.name + ` kernel rm 6588c2a5`,
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			dir, err := kernelCacheDir(*cacheDir)
			if err != nil {
				return err
			}
			removed := []vmkernel.Kernel{}
			var failed error
			for _, key := range args {
				k, err := vmkernel.Remove(cmd.Context(), dir, key)
				if err != nil {
					a.warnf("%s", termText(err.Error()))
					failed = exitError{1}
					continue
				}
				removed = append(removed, k)
				if !asJSON {
					fmt.Println(k.Key)
				}
			}
			if asJSON {
				if err := writeJSON(removed); err != nil {
					return err
				}
			}
			return failed
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the kernels removed as JSON")
	return cmd
}

func (a *app) newKernelPruneCmd(cacheDir *string) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "prune",
		Short: "Remove the guest kernels not built from this airlock's fragment, which nothing boots",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			dir, err := kernelCacheDir(*cacheDir)
			if err != nil {
				return err
			}
			removed, err := vmkernel.Prune(cmd.Context(), dir)
			if asJSON {
				if removed == nil {
					removed = []vmkernel.Kernel{}
				}
				if jerr := writeJSON(removed); jerr != nil {
					return jerr
				}
			} else {
				for _, k := range removed {
					fmt.Println(k.Key)
				}
			}
			return err
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the kernels removed as JSON")
	return cmd
}
