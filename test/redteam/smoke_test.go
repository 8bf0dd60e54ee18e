package redteam_test

import (
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock"
)

// TestLevelsRun checks the harness itself: every level that claims to
// work runs a command, as the uid it says, under the level it was asked.
func TestLevelsRun(t *testing.T) {
	eachLevel(t, func(t *testing.T, lv airlock.Isolation) {
		sb := box(t, lv, airlock.Config{})
		if got := sb.Config().Isolation; got != lv {
			t.Fatalf("sandbox isolation %q, want %q", got, lv)
		}
		if out := strings.TrimSpace(ok(t, sb, "id -u")); out != "0" {
			t.Errorf("id -u in the sandbox: %q, want 0 (root of its own namespace)", out)
		}
	})
}
