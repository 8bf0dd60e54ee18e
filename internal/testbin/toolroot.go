package testbin

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// ErrToolMissing is returned by ToolRoot for a tool not on PATH.
var ErrToolMissing = errors.New("tool is not installed")

// ToolRoot fills the new, empty folder root (made 0755) with a prepared
// root holding the host's tools under /bin, the libraries they link,
// and empty /tmp and /etc.
func ToolRoot(root string, tools ...string) error {
	if err := os.Chmod(root, 0o755); err != nil {
		return err
	}
	copyFile := func(src, dst string) error {
		real, err := filepath.EvalSymlinks(src)
		if err != nil {
			return err
		}
		b, err := os.ReadFile(real)
		if err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		return os.WriteFile(dst, b, 0o755)
	}
	for _, tool := range tools {
		path, err := exec.LookPath(tool)
		if err != nil {
			return fmt.Errorf("%s: %w", tool, ErrToolMissing)
		}
		if err := copyFile(path, filepath.Join(root, "bin", tool)); err != nil {
			return err
		}
		out, err := exec.Command("ldd", path).Output()
		if err != nil {
			continue // static
		}
		for _, f := range strings.Fields(string(out)) {
			if strings.HasPrefix(f, "/") {
				if err := copyFile(f, filepath.Join(root, f)); err != nil {
					return err
				}
			}
		}
	}
	for _, d := range []string{"tmp", "etc"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			return err
		}
	}
	return nil
}
