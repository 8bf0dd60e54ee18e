package testbin

import (
	"testing"
	"time"
)

func TestEnded(t *testing.T) {
	out := "=== RUN   TestA\n--- PASS: TestA (1.50s)\n    --- PASS: TestA/sub (1.00s)\n=== RUN   TestB\n" +
		"panic: test timed out after 15m0s\n\trunning tests:\n\t\tTestB (14m58s)\n\ngoroutine 1 [running]:\nmain.x()\n"
	want := "--- PASS: TestA (1.50s)\npanic: test timed out after 15m0s\n\trunning tests:\n\t\tTestB (14m58s)\n\n"
	if got := ended(out); got != want {
		t.Errorf("ended =\n%q\nwant\n%q", got, want)
	}
}

// TestParseTestOutput reads go test -v output as Rerun does: each
// top-level test's verdict, what it logged, and how long it took.
func TestParseTestOutput(t *testing.T) {
	out := parseTestOutput(`=== RUN   TestA
    a_test.go:1: said
--- PASS: TestA (12.34s)
=== RUN   TestB
=== RUN   TestB/sub
--- FAIL: TestB (0.50s)
    --- FAIL: TestB/sub (0.40s)
        b_test.go:2: broke
--- SKIP: TestC (0.00s)
`)
	if a := out["TestA"]; a.Status != "PASS" || a.Duration != 12340*time.Millisecond || a.Log != "    a_test.go:1: said\n" {
		t.Errorf("TestA: %+v", a)
	}
	if b := out["TestB"]; b.Status != "FAIL" || b.Duration != 500*time.Millisecond {
		t.Errorf("TestB: %+v", b)
	}
	if c := out["TestC"]; c.Status != "SKIP" || len(out) != 3 {
		t.Errorf("TestC: %+v, all: %v", c, out)
	}
}

// TestStuck keeps, of a timeout's dump, the goroutines in this module's
// code, and of any other output its tail.
func TestStuck(t *testing.T) {
	out := "=== RUN   TestB\npanic: test timed out after 4m0s\n\trunning tests:\n\t\tTestB (3m)\n\n" +
		"goroutine 1 [chan receive]:\ntesting.(*T).Run(...)\n\n" +
		"goroutine 7 [chan receive]:\ngithub.com/airlock-sandbox/airlock/internal/boundary/process.(*Sandbox).Close(...)\n\t/x/process_linux.go:392\n\n" +
		"goroutine 9 [IO wait]:\ninternal/poll.runtime_pollWait(...)\n"
	want := "goroutine 7 [chan receive]:\ngithub.com/airlock-sandbox/airlock/internal/boundary/process.(*Sandbox).Close(...)\n\t/x/process_linux.go:392\n\n"
	if got := stuck(out, 10); got != want {
		t.Errorf("stuck =\n%q\nwant\n%q", got, want)
	}
	if got := stuck("a long output", 6); got != "...\noutput" {
		t.Errorf("stuck without a panic = %q", got)
	}
}
