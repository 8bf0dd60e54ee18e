package airlock

import "testing"

// TestDirectPaths: a path is in a direct mount when the innermost mount
// holding it is one; a programmable mount inside a direct one is not.
func TestDirectPaths(t *testing.T) {
	d := directPaths{direct: []string{"/work", "/data"}, all: []string{"/work", "/work/mem", "/data", "/m"}}
	for p, want := range map[string]bool{
		"/work":          true,
		"/work/a/b":      true,
		"/work/mem":      false,
		"/work/mem/x":    false,
		"/work/memo":     true,
		"/data/x":        true,
		"/m/x":           false,
		"/elsewhere":     false,
		"/":              false,
		"/workspace/abc": false,
	} {
		if got := d.has(p); got != want {
			t.Errorf("has(%q) = %v, want %v", p, got, want)
		}
	}
	if (directPaths{all: []string{"/m"}}).has("/m/x") {
		t.Error("a path is in a direct mount where there is none")
	}
}
