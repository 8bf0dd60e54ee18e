// Package kernel tells which Linux release airlock runs on, for the
// behaviours that changed between releases.
package kernel

import (
	"strconv"
	"strings"
)

// AtLeast reports whether release (e.g. "6.8.0-45-generic") is at least
// major.minor. An unparseable release counts as new enough.
func AtLeast(release string, major, minor int) bool {
	parts := strings.SplitN(release, ".", 3)
	if len(parts) < 2 {
		return true
	}
	maj, err1 := strconv.Atoi(parts[0])
	mnr, err2 := strconv.Atoi(strings.TrimFunc(parts[1], func(r rune) bool { return r < '0' || r > '9' }))
	if err1 != nil || err2 != nil {
		return true
	}
	return maj > major || maj == major && mnr >= minor
}
