package agent

import (
	"os"
	"strings"
	"testing"
	"time"
)

// TestMain: this test binary, started as the spawner (startZygote runs
// /proc/self/exe), exits at once: a spawner that dies during its setup, as
// one does that cannot make a thread under a small pids limit.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "zygote" {
		os.Exit(3)
	}
	os.Exit(m.Run())
}

// TestSpawnerDiesInSetup starts a spawner that exits before it reports
// ready: the agent learns it at once, from the end of the socket, instead
// of waiting (before, it kept the spawner's end open itself, and waited
// for ever).
func TestSpawnerDiesInSetup(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the spawner's namespaces need root")
	}
	done := make(chan error, 1)
	go func() {
		_, err := startZygote(ZygoteConfig{}, nil)
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "exited during setup") {
			t.Fatalf("startZygote = %v, want the spawner's exit during setup", err)
		}
	case <-time.After(time.Minute / 2):
		// Shorter than the setup's own deadline: this wait is the bug.
		t.Fatal("startZygote still waits for a spawner that exited")
	}
}
