package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCopyTail(t *testing.T) {
	for _, tc := range []struct {
		log  string
		n    int
		want string
	}{
		{"a\nb\nc\n", 2, "b\nc\n"},
		{"a\nb\nc\n", 0, ""},
		{"a\nb\nc\n", 3, "a\nb\nc\n"},
		{"a\nb\nc\n", 10, "a\nb\nc\n"},
		{"a\nb\nc", 1, "c"},
		{"a\nb\nc", 2, "b\nc"},
		{"", 5, ""},
		{"\n\n\n", 2, "\n\n"},
	} {
		p := filepath.Join(t.TempDir(), "log")
		if err := os.WriteFile(p, []byte(tc.log), 0o600); err != nil {
			t.Fatal(err)
		}
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		var out strings.Builder
		if err := copyTail(&out, f, tc.n); err != nil {
			t.Fatal(err)
		}
		f.Close()
		if out.String() != tc.want {
			t.Errorf("tail %d of %q: %q, want %q", tc.n, tc.log, out.String(), tc.want)
		}
	}
}
