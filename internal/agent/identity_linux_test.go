package agent

import (
	"regexp"
	"testing"

	"golang.org/x/sys/unix"
)

var uuidV4 = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

func TestNewHostMask(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		m, err := newHostMask(true)
		if err != nil {
			t.Fatal(err)
		}
		if !uuidV4.MatchString(m.BootID) {
			t.Fatalf("boot id %q is not a version 4 UUID", m.BootID)
		}
		if seen[m.BootID] {
			t.Fatalf("boot id %q made twice", m.BootID)
		}
		seen[m.BootID] = true
		if m.Cmdline != sandboxCmdline {
			t.Errorf("cmdline %q", m.Cmdline)
		}
		// The offsets are the clocks' values now, in whole seconds: the
		// kernel refuses one that would make a clock negative.
		var mono, boot unix.Timespec
		if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &mono); err != nil {
			t.Fatal(err)
		}
		if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &boot); err != nil {
			t.Fatal(err)
		}
		if m.MonotonicSec < 0 || m.MonotonicSec > mono.Sec || m.BoottimeSec < 0 || m.BoottimeSec > boot.Sec {
			t.Fatalf("offsets %d/%d, clocks now %d/%d", m.MonotonicSec, m.BoottimeSec, mono.Sec, boot.Sec)
		}
	}
}
