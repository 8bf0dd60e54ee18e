package cli

import (
	"testing"
	"time"
)

func TestSecondsFlag(t *testing.T) {
	for in, want := range map[string]time.Duration{"30": 30 * time.Second, "1.5": 1500 * time.Millisecond, "30s": 30 * time.Second, "5m": 5 * time.Minute, " 2 ": 2 * time.Second, "0": 0} {
		var d time.Duration
		if err := (seconds{&d}).Set(in); err != nil || d != want {
			t.Errorf("%q: %v %v, want %v", in, d, err, want)
		}
	}
	for _, in := range []string{"-1", "abc", "-5s", "1e300", ""} {
		var d time.Duration
		if err := (seconds{&d}).Set(in); err == nil {
			t.Errorf("%q accepted as %v", in, d)
		}
	}
}
