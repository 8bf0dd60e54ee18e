package testbin

import "testing"

func TestEnded(t *testing.T) {
	out := "=== RUN   TestA\n--- PASS: TestA (1.50s)\n    --- PASS: TestA/sub (1.00s)\n=== RUN   TestB\n" +
		"panic: test timed out after 15m0s\n\trunning tests:\n\t\tTestB (14m58s)\n\ngoroutine 1 [running]:\nmain.x()\n"
	want := "--- PASS: TestA (1.50s)\npanic: test timed out after 15m0s\n\trunning tests:\n\t\tTestB (14m58s)\n\n"
	if got := ended(out); got != want {
		t.Errorf("ended =\n%q\nwant\n%q", got, want)
	}
}
