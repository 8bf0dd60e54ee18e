//go:build linux

package ctrshim

import (
	"fmt"
	"io"
	"runtime/debug"

	apitypes "github.com/containerd/containerd/api/types"
	"google.golang.org/protobuf/proto"
)

// maxInfoOptions bounds the runtime options containerd writes to the
// shim's standard input for -info.
const maxInfoOptions = 1 << 20

// WriteInfo answers containerd 2.x's `containerd-shim-airlock-v2 -info`
// (its runtime introspection): the runtime's name and version, as a
// protobuf RuntimeInfo on w. The options containerd sends on in are
// read and not used: the shim takes none.
func WriteInfo(in io.Reader, w io.Writer) error {
	if _, err := io.Copy(io.Discard, io.LimitReader(in, maxInfoOptions)); err != nil {
		return fmt.Errorf("read the runtime options: %w", err)
	}
	info := &apitypes.RuntimeInfo{Name: RuntimeName, Version: &apitypes.RuntimeVersion{Version: "(devel)"}}
	if bi, ok := debug.ReadBuildInfo(); ok {
		info.Version.Version = bi.Main.Version
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				info.Version.Revision = s.Value
			}
		}
	}
	b, err := proto.Marshal(info)
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}
