package privdir

import (
	"os"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// detachUnder detaches every mount at or beneath dir, deepest first, and
// reports whether there was any.
func detachUnder(dir string) bool {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return false
	}
	var under []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && (f[4] == dir || strings.HasPrefix(f[4], dir+"/")) {
			under = append(under, f[4])
		}
	}
	slices.SortFunc(under, func(a, b string) int { return len(b) - len(a) })
	for _, m := range under {
		_ = unix.Unmount(m, unix.MNT_DETACH)
	}
	return len(under) > 0
}
