package testbin

import (
	"os"
	"strings"
	"testing"
)

// ReadmeShowsCode checks that the first Go block of the section of
// README.md at readme under heading (a "### " line's text) is code of
// the file src: its lines, but for blank ones and "// ..." that stands
// for lines left out, are lines of src, in the same order. An example
// that a test builds and runs then keeps the README's code true.
func ReadmeShowsCode(t *testing.T, readme, heading, src string) {
	t.Helper()
	doc, err := os.ReadFile(readme)
	if err != nil {
		t.Fatal(err)
	}
	code, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "\n### "+heading+"\n")
	if !ok {
		t.Fatalf("%s has no section %q", readme, heading)
	}
	_, block, ok := strings.Cut(section, "\n```go\n")
	block, _, closed := strings.Cut(block, "\n```\n")
	if !ok || !closed {
		t.Fatalf("%s's section %q has no Go code", readme, heading)
	}
	lines := strings.Split(string(code), "\n")
	n := 0
	for _, want := range strings.Split(block, "\n") {
		if strings.TrimSpace(want) == "" || strings.TrimSpace(want) == "// ..." {
			continue
		}
		for n < len(lines) && lines[n] != want {
			n++
		}
		if n == len(lines) {
			t.Fatalf("the Go code of %s's section %q has a line that %s lacks (or has earlier):\n%s", readme, heading, src, want)
		}
		n++
	}
}
