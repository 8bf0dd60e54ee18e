package client

import (
	"bytes"
	"crypto/rand"
	"io/fs"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/api"
)

// TestRealServerFileParts: files larger than a part go in and out in
// parts (WriteFileFrom, ReadFileTo), ReadFileAt reads a part, WriteFileAt
// writes in place, and Symlink and SetAttr make links and set modes and
// times.
func TestRealServerFileParts(t *testing.T) {
	c := startReal(t, Options{})
	ctx := testCtx(t)
	sb, err := c.Create(ctx, api.CreateParams{})
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, 2*StreamChunk+12345)
	rand.Read(data)
	if n, err := sb.WriteFileFrom(ctx, "/workspace/big", bytes.NewReader(data), 0o640); err != nil || n != int64(len(data)) {
		t.Fatalf("WriteFileFrom: %d, %v", n, err)
	}
	var out bytes.Buffer
	if n, err := sb.ReadFileTo(ctx, "/workspace/big", &out); err != nil || n != int64(len(data)) || !bytes.Equal(out.Bytes(), data) {
		t.Fatalf("ReadFileTo: %d, %v (equal: %v)", n, err, bytes.Equal(out.Bytes(), data))
	}
	part, size, err := sb.ReadFileAt(ctx, "/workspace/big", StreamChunk-5, 10)
	if err != nil || size != int64(len(data)) || !bytes.Equal(part, data[StreamChunk-5:StreamChunk+5]) {
		t.Errorf("ReadFileAt: %d bytes of %d, %v", len(part), size, err)
	}
	if err := sb.WriteFileAt(ctx, "/workspace/big", 3, []byte("xy"), 0, true); err != nil {
		t.Fatal(err)
	}
	if b, err := sb.ReadFile(ctx, "/workspace/big"); err != nil || !bytes.Equal(b, append(data[:3:3], "xy"...)) {
		t.Errorf("after WriteFileAt with truncate: %d bytes, %v", len(b), err)
	}
	if err := sb.Symlink(ctx, "big", "/workspace/link"); err != nil {
		t.Fatal(err)
	}
	mode := fs.FileMode(0o600)
	when := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	if err := sb.SetAttr(ctx, "/workspace/big", &mode, when); err != nil {
		t.Fatal(err)
	}
	fi, err := sb.Stat(ctx, "/workspace/big")
	if err != nil || fi.Mode&0o777 != 0o600 || !fi.ModTime.Equal(when) {
		t.Errorf("after SetAttr: %+v, %v", fi, err)
	}
	if li, err := sb.Stat(ctx, "/workspace/link"); err != nil || li.Link != "big" {
		t.Errorf("the link: %+v, %v", li, err)
	}
	suid := fs.FileMode(0o755) | fs.ModeSetuid
	if err := sb.SetAttr(ctx, "/workspace/big", &suid, time.Time{}); err == nil {
		t.Error("SetAttr with a setuid bit succeeded")
	}
}
