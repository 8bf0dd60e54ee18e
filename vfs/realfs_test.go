package vfs_test

import (
	"testing"

	"github.com/airlock-sandbox/airlock/vfs"
	"github.com/airlock-sandbox/airlock/vfs/vfstest"
)

func newRealFS(t *testing.T) vfs.Provider {
	t.Helper()
	p, err := vfs.NewRealFS(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if c, ok := p.(interface{ Close() error }); ok {
		t.Cleanup(func() { c.Close() })
	}
	return p
}

func TestRealFSConformance(t *testing.T) {
	vfstest.RunWith(t, vfstest.Options{NoSetIDFiles: true}, newRealFS)
}
