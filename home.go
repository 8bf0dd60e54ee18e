package airlock

import (
	"fmt"
	"os"
	"path/filepath"
)

// Home is the airlock state directory: $AIRLOCK_HOME, default ~/.airlock.
func Home() (string, error) {
	if h := os.Getenv("AIRLOCK_HOME"); h != "" {
		return filepath.Abs(h)
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("find the state directory: set AIRLOCK_HOME: %w", err)
	}
	return filepath.Join(home, ".airlock"), nil
}
