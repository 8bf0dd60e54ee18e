//go:build !linux

package variant

import (
	"context"
	"fmt"
	"runtime"
)

// fill cannot build here: mmdebstrap and the namespaces it builds in
// are Linux's.
func (b *Builder) fill(ctx context.Context, v Variant, dir string, t *throttle) error {
	return fmt.Errorf("building image variant %s needs Linux with mmdebstrap, and this is %s: build it on a Linux machine", v.Name, runtime.GOOS)
}
