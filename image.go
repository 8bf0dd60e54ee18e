package airlock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/internal/agentbin"
	"github.com/airlock-sandbox/airlock/internal/image"
	"github.com/airlock-sandbox/airlock/internal/image/owners"
	"github.com/airlock-sandbox/airlock/internal/image/store"
)

// ImageProgress reports work on an image that Create gets into the cache
// before it starts a sandbox: a build, a download or a pull.
type ImageProgress struct {
	// Image is the name asked for.
	Image string `json:"image"`
	// Step is "resolve", "download", "unpack", "build", "verify",
	// "pack" or "done".
	Step string `json:"step"`
	// Item is what the step works on: a layer's digest, a file, a
	// package.
	Item string `json:"item,omitempty"`
	// Done of Total bytes, or of items when Unit is "items"; Total is
	// 0 when not known.
	Done  int64 `json:"done"`
	Total int64 `json:"total,omitempty"`
	// Unit is "" for bytes, "items" for a count (packages).
	Unit string `json:"unit,omitempty"`
}

// ImageInfo describes the image a sandbox runs.
type ImageInfo struct {
	// Name is the image as asked for ("host", "standard", a reference).
	Name string `json:"name"`
	// Key is its content key in the image cache; empty for host.
	Key string `json:"key,omitempty"`
	// Kind is how it was made: "variant", "oci", "download", or "host".
	Kind string `json:"kind"`
	// Env, WorkingDir, User, Entrypoint and Cmd are the image's own
	// configuration, as an OCI image's config has them. Env and
	// WorkingDir apply to every command; Entrypoint and Cmd are what
	// `airlock run --image` runs when it is given no command.
	Env        []string `json:"env,omitempty"`
	WorkingDir string   `json:"working_dir,omitempty"`
	User       string   `json:"user,omitempty"`
	Entrypoint []string `json:"entrypoint,omitempty"`
	Cmd        []string `json:"cmd,omitempty"`
}

// DefaultCommand is the command the image runs when none is given: its
// Entrypoint followed by its Cmd, as docker runs them. Empty when the
// image names none.
func (i ImageInfo) DefaultCommand() []string {
	return append(append([]string{}, i.Entrypoint...), i.Cmd...)
}

// resolvedImage is what create learned of c.Image before the start.
type resolvedImage struct {
	info   ImageInfo
	rootfs string
	// erofs is the tree packed as an erofs file, for the vm level; ""
	// when none could be made (the vm level then shares the tree).
	erofs string
	// done ends the sandbox's use of the image in the cache, which
	// keeps its tree from removal while the sandbox's overlay reads it.
	done func()
}

// release ends the use of the image: once the sandbox is stopped, or
// when it did not start. Nil-safe, and safe to call more than once.
func (r *resolvedImage) release() {
	if r != nil && r.done != nil {
		r.done()
	}
}

// usesImage reports whether c names an image from the cache (not the
// host's, not a rootfs).
func (c *Config) usesImage() bool {
	return c.Image != "" && c.Image != image.Host
}

// imageCacheDir is the image cache c uses.
func (c *Config) imageCacheDir() (string, error) {
	if c.ImageCacheDir != "" {
		return c.ImageCacheDir, nil
	}
	return store.DefaultDir()
}

// openImageCache opens the image cache c uses. Without root, its trees
// keep their files' owners when the caller has subordinate ids (see
// package owners), with c's agent binary doing that work.
func (c *Config) openImageCache() (*store.Cache, error) {
	dir, err := c.imageCacheDir()
	if err != nil {
		return nil, err
	}
	agent, _ := agentbin.Find(c.AgentPath)
	o, err := owners.Detect(agent)
	if err != nil {
		slog.Debug("image cache", "owners", err)
	}
	return store.OpenWith(dir, o)
}

// resolveImage gets c.Image into the image cache when it names one,
// reporting progress to c.OnImageProgress, and returns it, in use (see
// store.Cache.Use) until its release.
func resolveImage(ctx context.Context, c *Config) (*resolvedImage, error) {
	if !c.usesImage() {
		return nil, nil
	}
	cache, err := c.openImageCache()
	if err != nil {
		return nil, err
	}
	r := newResolver(cache, c)
	var progress store.ProgressFunc
	if c.OnImageProgress != nil {
		progress = func(p store.Progress) { c.OnImageProgress(ImageProgress(p)) }
	}
	start := time.Now()
	// An image removed between its get and its use is got again.
	var (
		img     store.Image
		release func()
	)
	for attempt := 0; ; attempt++ {
		if img, err = r.Get(ctx, c.Image, progress); err != nil {
			return nil, fmt.Errorf("get image %q: %w", c.Image, err)
		}
		release, err = cache.Use(ctx, img.Key)
		if err == nil {
			break
		}
		if !errors.Is(err, store.ErrNotFound) || attempt == 2 {
			return nil, fmt.Errorf("use image %q: %w", c.Image, err)
		}
	}
	c.Logger.Debug("image ready", "image", c.Image, "key", img.Key, "took", time.Since(start))
	var packed string
	if c.Isolation == IsolationVM {
		// A VM attaches the image as a disk: packed once, kept beside
		// the tree.
		if packed, err = cache.EROFS(ctx, img); err != nil {
			c.Logger.Warn("image not packed for the vm level; its tree is shared instead", "image", c.Image, "err", err)
			packed = ""
		}
	}
	return &resolvedImage{
		rootfs: img.RootFS,
		erofs:  packed,
		done:   sync.OnceFunc(release),
		info: ImageInfo{
			Name: c.Image, Key: img.Key, Kind: img.Kind,
			Env: img.Config.Env, WorkingDir: img.Config.WorkingDir, User: img.Config.User,
			Entrypoint: img.Config.Entrypoint, Cmd: img.Config.Cmd,
		},
	}, nil
}

// errImageAndRootFS is the refusal of a config that names both.
var errImageAndRootFS = errors.New("give image or rootfs, not both")

// workingDir is where commands start unless they say otherwise: the
// image's WorkingDir, or /workspace.
func (c *Config) workingDir() string {
	if c.image != nil && c.image.info.WorkingDir != "" {
		return c.image.info.WorkingDir
	}
	return "/workspace"
}

// Image describes the image the sandbox runs.
func (s *Sandbox) Image() ImageInfo {
	if s.cfg.image != nil {
		return s.cfg.image.info
	}
	if s.cfg.RootFS != "" {
		return ImageInfo{Name: "rootfs:" + s.cfg.RootFS, Kind: "rootfs"}
	}
	return ImageInfo{Name: image.Host, Kind: image.Host}
}

// PrepareImage gets the image cfg names into the image cache (building,
// downloading or pulling it, with progress to cfg.OnImageProgress) and
// describes it, without starting a sandbox. A later Create with cfg
// finds it there.
func PrepareImage(ctx context.Context, cfg Config) (ImageInfo, error) {
	if err := cfg.Validate(); err != nil {
		return ImageInfo{}, fmt.Errorf("invalid sandbox config: %w", err)
	}
	c := cfg.withDefaults()
	img, err := resolveImage(ctx, &c)
	if err != nil {
		return ImageInfo{}, err
	}
	img.release()
	if img == nil {
		if c.RootFS != "" {
			return ImageInfo{Name: "rootfs:" + c.RootFS, Kind: "rootfs"}, nil
		}
		return ImageInfo{Name: image.Host, Kind: image.Host}, nil
	}
	return img.info, nil
}

// commandUser is who a command runs as: its own User, else the image's,
// else root ("").
func (c *Config) commandUser(user string) string {
	if user != "" {
		return user
	}
	if c.image != nil {
		return c.image.info.User
	}
	return ""
}
