package state

import (
	"os"
	"strings"
	"testing"
)

func TestParseStat(t *testing.T) {
	// Fields 3 to 52 of a real line; field 22 (start time) is 4242.
	tail := "S 1 2 3 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 4242 1000 10 " +
		strings.TrimSpace(strings.Repeat("0 ", 30))
	for _, comm := range []string{"sleep", "a b", "x) S 1 2 3", "((", ")", ") 99 99"} {
		line := "1234 (" + comm + ") " + tail + "\n"
		state, start, err := parseStat([]byte(line))
		if err != nil || state != 'S' || start != 4242 {
			t.Errorf("comm %q: state %q, start %d, %v", comm, state, start, err)
		}
	}
	for _, line := range []string{"", "1234 sleep S 1", "1234 (sleep) S 1 2 3", "1234 (x) SS " + tail[2:], "1234 (x) " + strings.Replace(tail, "4242", "-1", 1)} {
		if _, _, err := parseStat([]byte(line)); err == nil {
			t.Errorf("parseStat(%q) succeeded", line)
		}
	}
}

func TestProcessStartTime(t *testing.T) {
	start, err := ProcessStartTime(os.Getpid())
	if err != nil || start == 0 {
		t.Fatalf("ProcessStartTime(self) = %d, %v", start, err)
	}
	again, err := ProcessStartTime(os.Getpid())
	if err != nil || again != start {
		t.Errorf("start time changed: %d then %d (%v)", start, again, err)
	}
	if !Alive(os.Getpid(), start) || !Alive(os.Getpid(), 0) {
		t.Error("this process is not alive")
	}
	if Alive(os.Getpid(), start+1) {
		t.Error("a wrong start time counts as alive")
	}
	for _, pid := range []int{0, -1, 1 << 30} {
		if Alive(pid, 0) {
			t.Errorf("Alive(%d)", pid)
		}
		if _, err := ProcessStartTime(pid); err == nil {
			t.Errorf("ProcessStartTime(%d) succeeded", pid)
		}
	}
}
