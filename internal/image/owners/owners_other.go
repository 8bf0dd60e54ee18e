//go:build !linux

package owners

import "github.com/airlock-sandbox/airlock/internal/image/store"

// Detect returns store.Local(): only Linux maps user namespaces.
func Detect(agent string) (store.Owners, error) { return store.Local(), nil }
