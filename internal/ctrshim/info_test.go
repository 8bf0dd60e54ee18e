//go:build linux

package ctrshim

import (
	"bytes"
	"strings"
	"testing"

	apitypes "github.com/containerd/containerd/api/types"
	"google.golang.org/protobuf/proto"
)

// TestWriteInfo answers -info as containerd 2.x reads it: a protobuf
// RuntimeInfo naming the runtime, whatever options it was sent.
func TestWriteInfo(t *testing.T) {
	var out bytes.Buffer
	if err := WriteInfo(strings.NewReader("\x0a\x03abc"), &out); err != nil {
		t.Fatal(err)
	}
	var info apitypes.RuntimeInfo
	if err := proto.Unmarshal(out.Bytes(), &info); err != nil {
		t.Fatalf("decode the answer: %v", err)
	}
	if info.Name != RuntimeName || info.Version == nil || info.Version.Version == "" {
		t.Errorf("runtime info: %v", &info)
	}
}
